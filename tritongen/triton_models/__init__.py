"""Python-backend models copied into each generated repository as ``model.py``.

They are ordinary modules: importable without Triton (``triton_python_backend_utils`` is
only needed inside the server), unit-tested, and reused at build time so that the parity
check runs exactly the tokenisation and postprocessing code that the server will run.
"""
