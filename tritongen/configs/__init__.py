"""Triton's config.pbtxt files: typed sections, the four step configs of an ensemble, rendering and validation."""
