"""Python-based Triton backends installed into the local server's backend directory."""
