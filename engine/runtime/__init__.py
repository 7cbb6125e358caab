"""The model at run time: loading and checking a model folder, ONNX Runtime providers and sessions
(runner.py is the one place that runs ONNX Runtime), KV cache buffers, fingerprints, float16 casts,
huge pages."""
