"""The model itself: loading a checkpoint, the facts it states, ONNX export, folding the postprocess in."""
