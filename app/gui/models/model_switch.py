"""What switching the model costs, in words, and the names the window gives models: one model is
loaded at a time, so a switch unloads it and the other chats' in-memory KV goes with it (pinned
chats keep theirs on disk, valid for the model that made it)."""
from __future__ import annotations

from engine.base import paths

from ..remote_config import is_remote_choice


def model_label(choice: str, picker_label: str | None = None) -> str:
    """A model's name for the user: the default model's, a folder's, a saved server's label."""
    if choice == "":
        return paths.DEFAULT_MODEL_NAME
    if is_remote_choice(choice) and picker_label:
        return picker_label.removesuffix(" (remote)")
    return choice


def recorded_choice(model_choice: str | None, model_id: str) -> str | None:
    """A chat's model as the window loads it. Chats made before that was recorded have only the
    engine's name for it: the default model's name, or a folder under models/ (which the window
    offers only if the picker lists it); a saved server's model name maps to no choice."""
    if model_choice is not None:
        return model_choice
    if not model_id:
        return None
    return "" if model_id == paths.DEFAULT_MODEL_NAME else model_id


def switch_cost(to: str, loaded: str, in_memory: int, *, replying: bool = False) -> str:
    """“Switching to X unloads Y; 3 chats' in-memory context will be re-read on their next
    message (pinned chats keep theirs on disk).”"""
    if in_memory == 0:
        lost = "no chat has context in memory to lose"
    else:
        whose = "1 chat's" if in_memory == 1 else f"{in_memory:,} chats'"
        lost = f"{whose} in-memory context will be re-read on the next message"
    text = f"Switching to {to} unloads {loaded}; {lost} (pinned chats keep theirs on disk)."
    if replying:
        text += " The reply being written stops."
    return text


def chat_notice(chat_model: str, loaded: str, cost: str, *, pinned: bool) -> str:
    """The notice above a chat made with another model than the one loaded."""
    text = f"This chat was made with {chat_model}; {loaded} is loaded. {cost}"
    if pinned:
        text += (f" Its saved context is {chat_model}'s: sending with {loaded} re-reads the chat "
                 "and replaces it.")
    return text
