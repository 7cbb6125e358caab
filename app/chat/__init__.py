"""Chat logic with no Qt at all: one turn (request in, events out) and its small helpers.

The GUI's controllers (app/gui/controllers) drive these on worker threads; tests drive them with a
fake engine and a real store, no widgets.
"""
