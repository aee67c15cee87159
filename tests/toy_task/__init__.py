"""Task folders that exist only for the tests (``tests/tasks/test_toy_task.py``)."""
