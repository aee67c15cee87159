"""What a build must pass before it is written: parity with PyTorch, accuracy, the containers' runtimes."""
