"""The model at run time: loading and checking a model folder, ONNX Runtime providers and sessions
(runner.py is the one place that runs ONNX Runtime), KV cache buffers, fingerprints. What it
changes in the host process (malloc settings, huge pages, page residency, thread spinning) is in
host/; what it shares with the importer (graph scanning, the GPU variant, float16 casts) is in
engine.onnx, which it stands on (it never imports engine.convert)."""
