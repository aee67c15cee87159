"""Turn a Hugging Face encoder checkpoint into a validated NVIDIA Triton ensemble repository."""
