"""The capability check that replaced the list of supported model types: remote code only when trusted, and
dynamic axes. (Unknown model types, missing heads and unfilled weights are refused in test_bad_input.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tritongen.cli import main
from tritongen.errors import ExportError
from tritongen.model.export import export_onnx

# The checkpoint's own modelling code: a BERT whose class only this file defines, so the build can only load
# it by running the file (transformers imports it from the checkpoint folder; nothing is downloaded).
REMOTE_MODULE = '''
from transformers import BertModel


class TinyRemoteBert(BertModel):
    """A BERT shipped as code with the checkpoint."""
'''


@pytest.fixture
def remote_code_checkpoint(tiny_factory, tmp_path) -> Path:
    path = tmp_path / "remote"
    shutil.copytree(tiny_factory("bert", "embedding"), path)
    (path / "modeling_tiny_remote.py").write_text(REMOTE_MODULE, encoding="utf-8")
    config = json.loads((path / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_tiny_remote.TinyRemoteBert"}
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return path


def test_build_runs_shipped_code_and_card_records_it_when_remote_code_trusted(remote_code_checkpoint, tmp_path):
    repo = tmp_path / "repo"
    argv = ["build", "--model", str(remote_code_checkpoint), "--name", "remote", "--repository", str(repo)]
    assert main([*argv, "--no-container-check"]) == 2  # refused without the opt-in
    assert main([*argv, "--no-container-check", "--trust-remote-code"]) == 0
    card = (repo / "remote" / "1" / "model_card.md").read_text(encoding="utf-8")
    assert (
        "- remote code: TRUSTED (trust_remote_code); config.json's auto_map: "
        "AutoModel -> `modeling_tiny_remote.TinyRemoteBert`" in card
    )
    assert "Parity against PyTorch: **PASSED**" in card


def test_card_says_no_remote_code_when_checkpoint_ships_none(tiny_factory, builds):
    card = builds(tiny_factory("bert", "embedding"), "bert_emb").card()  # as tests/builder/test_build.py builds it
    assert "- remote code: none (transformers' own classes)" in card


def test_export_refuses_a_model_whose_sequence_axis_is_fixed(tmp_path):
    class FixedLength(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return (input_ids * attention_mask).float().reshape(-1, 8).sum(dim=1)  # only 8 tokens a row

    sample = {"input_ids": np.ones((2, 8), dtype=np.int64), "attention_mask": np.ones((2, 8), dtype=np.int64)}
    with pytest.raises(ExportError) as caught:
        export_onnx(FixedLength(), sample, "score", tmp_path / "m.onnx")
    assert caught.value.stage == "export"
    assert "does not run at batch 3 and sequence 5" in str(caught.value)
    assert not (tmp_path / "m.onnx").exists()


def test_load_module_uses_the_shipped_class_only_when_trusted(remote_code_checkpoint):
    from tritongen.errors import CapabilityError
    from tritongen.model.checkpoint import inspect_checkpoint
    from tritongen.tasks import get_task

    with pytest.raises(CapabilityError) as refused:
        inspect_checkpoint(remote_code_checkpoint)
    assert refused.value.stage == "remote code"
    module = get_task("embedding").load_module(inspect_checkpoint(remote_code_checkpoint, trust_remote_code=True))
    assert type(module.model).__name__ == "TinyRemoteBert"
    # Its auto_map has no classifier; transformers' own BERT classifier would leave its head at random.
    with pytest.raises(CapabilityError) as headless:
        get_task("classification").load_module(inspect_checkpoint(remote_code_checkpoint, trust_remote_code=True))
    assert headless.value.stage == "weights"
