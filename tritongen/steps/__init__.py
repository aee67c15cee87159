"""Code that runs inside Triton: the Python-backend steps, copied into each repository as ``model.py``.

They are ordinary modules: importable without Triton (``triton_python_backend_utils`` is
only needed inside the server), unit-tested, and reused at build time so that the parity
check runs exactly the tokenisation and postprocessing code that the server will run.
``backends/`` holds the local server's stand-ins for the container's native backends.
"""
