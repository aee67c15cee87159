"""The local Python-based stand-in for the container's native openvino backend (its ``model.py``)."""
