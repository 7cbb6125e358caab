"""Small widgets of the chat window, one job each."""
