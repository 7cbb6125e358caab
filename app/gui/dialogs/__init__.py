"""Dialogs: the settings, a chat's settings, connecting to a server (they read settings and
engine options, so they live outside `widgets`, which import neither)."""
