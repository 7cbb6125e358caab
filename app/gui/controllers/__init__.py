"""The window's controllers: QObjects that own the chat state and do the work off the UI thread
(through `TaskRunner.run_task`), and say what changed through signals that the widgets' side
(app/gui/bindings.py and the other bindings main_window.py wires) subscribes to. No `QtWidgets` here (a contract in
pyproject.toml): a controller never touches a widget.

* `engine.EngineController`: the engine's life cycle (load, model list, import, clear cache,
  the shutdown wait).
* `chats.ChatsController`: the chat list and the chat on screen (open, new, pin, rename,
  duplicate / branch, close, search, siblings) and what the engine says of each chat's KV.
* `deletions.Deletions`: a deleted chat stays restorable for a while (undo), then goes.
* `replies.RepliesController`: send, regenerate, edit, stop, the streaming state, the send queue.
"""
