"""One generation: the decode loop (generate), token-exact chat history, context overflow policies, chat prompt planning."""
