"""A remote engine: an OpenAI-compatible server used through the ChatEngine protocol (engine.remote.engine) over HTTP (engine.remote.http)."""
