"""A Python-based ``onnxruntime`` backend for servers that lack the native one."""
