"""Saved KV state on disk: KV files, the content-addressed block store and the shared prefix cache."""
