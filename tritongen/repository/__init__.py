"""A model repository on disk: its layout, atomic versioned writes, the canary record and version pins."""
