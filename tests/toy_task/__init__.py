"""Task folders that exist only for the tests (``tests/test_toy_task.py``)."""
