"""Tools for chats: MCP servers (their configuration and a client over the official `mcp` SDK)
and what a turn needs to offer their tools to a model, ask the user, and run them. No Qt here."""
