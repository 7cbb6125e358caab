"""Test support shared by the suites, imported as `tests.support.<module>` (pytest puts the
checkout's root on sys.path: `pythonpath` in pyproject.toml), never through `sys.path.insert`:

- `fake_engine`: a scripted `ChatEngine` for the GUI tests and bench.suites.gui;
- `gui`: drivers for a real window (type and send, wait until idle, open a chat);
- `tiny_gguf`: tiny random-weight GGUF models (llama/qwen2) with a NumPy reference forward;
- `plain_onnx`: a plain-attention ONNX graph from a tiny model;
- `raw_openai_server`: a scripted OpenAI-compatible HTTP server on 127.0.0.1;
- `server`: a real `amber-engine serve` child process and the server tests' constants;
- `openapi_spec`, `openapi_check`, `checked_serve`: every answer of a test server checked against
  OpenAI's pinned OpenAPI spec (tests/data/openai-openapi);
- `loopback_only`: refuses and records name lookups and connections beyond 127.0.0.1;
- `bounded`: run a reader under a time and memory bound (hostile-input and fuzz tests);
- `gguf_bytes`: GGUF files written byte by byte (hostile-input and fuzz tests);
- `ks`: the two-sample Kolmogorov–Smirnov test the sampling tests use.
"""
