"""A toy model-step runtime, registered from the tests: ``tests/test_toy_runtime.py``."""
