"""A toy model-step runtime, registered from the tests: ``tests/runtimes/test_toy_runtime.py``."""
