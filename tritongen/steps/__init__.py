"""Code that runs inside Triton: the Python-backend steps, copied into each repository as ``model.py``.

They are ordinary modules: importable without Triton (``triton_python_backend_utils`` is
only needed inside the server), unit-tested, and reused at build time so that the parity
check runs exactly the tokenisation and postprocessing code that the server will run.
A step imports its helpers from ``_tritongen_step`` (:mod:`tritongen.steps.helpers`): in a repository the package
beside its ``model.py``, in process these very modules, through the finder importing this package installs.
"""

from tritongen.steps.helpers import install_finder

install_finder()
