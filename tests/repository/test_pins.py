"""The serving version recorded in a repository's configs: written as a roll-out leaves them, read as package does."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from tritongen.configs.model_config import VersionPolicy
from tritongen.configs.parser import read_config
from tritongen.configs.render import parse_config, validate_ensemble
from tritongen.errors import RepositoryError
from tritongen.repository.pins import configured_version, loaded_versions, pin

GOLDEN = Path(__file__).parents[1] / "assets" / "golden"
STEPS = {"sentiment": "ensemble", "sentiment_tokenizer": "tokenizer", "sentiment_model": "model"}
STEPS["sentiment_postprocess"] = "postprocess"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The golden configs as a repository with versions 1 and 2 of every model, as two builds leave it."""
    for model, golden in STEPS.items():
        for version in (1, 2):
            (tmp_path / model / str(version)).mkdir(parents=True)
        shutil.copyfile(GOLDEN / f"{golden}.pbtxt", tmp_path / model / "config.pbtxt")
    return tmp_path


def _configs(repo: Path) -> dict:
    return {model: read_config(repo / model / "config.pbtxt") for model in STEPS}


def test_configured_version_is_the_newest_when_a_build_left_the_configs(repo):
    assert configured_version(repo, "sentiment") == 2


def test_pin_writes_configs_that_serve_one_version_and_keep_everything_else(repo):
    before = _configs(repo)
    pin(repo, before, 1)
    assert configured_version(repo, "sentiment") == 1
    after = _configs(repo)
    for model, config in after.items():
        assert config.version_policy == VersionPolicy(specific=(1,))
        assert all(step.model_version == 1 for step in config.steps)
        unpinned = tuple(dataclasses.replace(step, model_version=-1) for step in config.steps)
        assert dataclasses.replace(config, version_policy=None, steps=unpinned) == dataclasses.replace(
            before[model], version_policy=None
        ), model  # only the pins differ
        text = (repo / model / "config.pbtxt").read_text()
        assert text.splitlines()[0] == (GOLDEN / f"{STEPS[model]}.pbtxt").read_text().splitlines()[0]
    parsed = {m: parse_config((repo / m / "config.pbtxt").read_text(), m) for m in STEPS}
    validate_ensemble(parsed["sentiment"], parsed)
    assert sorted(p.name for p in repo.iterdir()) == sorted(STEPS)  # no temporary file left


def test_pin_keeps_an_explicit_zero_max_batch_size(repo):
    config = dataclasses.replace(read_config(repo / "sentiment_tokenizer" / "config.pbtxt"), max_batch_size=0)
    pin(repo, {"sentiment_tokenizer": config}, 2)
    assert "max_batch_size: 0" in (repo / "sentiment_tokenizer" / "config.pbtxt").read_text()


def test_loaded_versions_follow_triton_policies_when_given_built_versions():
    assert loaded_versions(read_config(GOLDEN / "tokenizer.pbtxt"), [1, 2, 3]) == [3]  # no policy: the newest
    config = read_config(GOLDEN / "model.pbtxt")
    assert loaded_versions(config, [1, 2, 3]) == [2, 3]  # latest 2
    config = dataclasses.replace(config, version_policy=VersionPolicy(all=True))
    assert loaded_versions(config, [1, 2, 3]) == [1, 2, 3]
    config = dataclasses.replace(config, version_policy=VersionPolicy(specific=(1, 5)))
    assert loaded_versions(config, [1, 2, 3]) == [1]
    config = dataclasses.replace(config, version_policy=VersionPolicy(latest=0))
    assert loaded_versions(config, [1, 2, 3]) == []


def test_configured_version_refuses_when_a_step_does_not_load_the_pinned_version(repo):
    configs = _configs(repo)
    pin(repo, {"sentiment": configs["sentiment"]}, 1)  # the ensemble calls 1; the steps load their newest, 2
    with pytest.raises(RepositoryError, match="does not load version 1, which `sentiment` calls; roll `sentiment`"):
        configured_version(repo, "sentiment")
