"""The ONNX floor that the importer (engine.convert) and the runtime (engine.runtime) both stand on:
the graph builder, the external-data writer, constant folding, the GPU variant, reading a graph
without the `onnx` package, and float16 casting.

This package imports nothing at load: a generating process that only scans a graph
(graph_scan) never loads `onnx` itself.
"""
