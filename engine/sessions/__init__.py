"""Sessions: the manager (the engine API), their manifests, persistence and the memory budget."""
