"""The model step's runtimes (ONNX Runtime, OpenVINO, TensorRT)."""
