"""LasF checkpoints (``format: "lasf-ckpt-v1"``): write, read safely, validate, load.

A checkpoint is one safetensors file whose ``__metadata__`` holds the JSON config under
``lasf_config`` (the shipped model also keeps that JSON beside it as ``config.json``). Reading uses
the same safe reader as positional-encoding uploads (``workers.models.checkpoints``): no pickle,
bounded header, every tensor's bytes checked against its shape. Validation checks the format, the
base model and the replaced layer, the sizes, and each tensor's name and shape against them.
"""

from __future__ import annotations

import json
import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workers.core.errors import BadFileError

logger = logging.getLogger(__name__)

FORMAT = "lasf-ckpt-v1"
WEIGHTS_FILE = "lasf.safetensors"
CONFIG_FILE = "config.json"
META_KEY = "lasf_config"
# the base models a LasF layer can replace a layer of: hidden size, layers
BASES: dict[str, dict[str, int]] = {"minilm": {"d_model": 384, "n_layers": 6}}
LIMITS = {"n_fields": 64, "d_q": 256, "d_s": 1024}
_DATA = Path(__file__).resolve().parents[2] / "data"
SHIPPED = {
    "lasf-minilm": _DATA / "lasf_minilm",
    "lasf-minilm-paper": _DATA / "lasf_minilm_paper",
}  # = contracts.LASF_MODELS


class LasFCheckpointError(BadFileError):
    """A file that is not a valid LasF checkpoint for a base model headscope has."""

    code = "bad_lasf_checkpoint"


@dataclass
class LasFCheckpoint:
    """A validated checkpoint: its config and tensors (numpy, by name)."""

    config: dict[str, Any]
    tensors: dict[str, np.ndarray]
    source: str


def expected_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape for a config's sizes, mode and residual path."""
    s = cfg["sizes"]
    ns, di, dq, ds, do = s["n_fields"], s["d_in"], s["d_q"], s["d_s"], s["d_out"]
    out: dict[str, tuple[int, ...]] = {"L": (ns, di, dq), "L_S": (ns, di, ds), "L_Y": (ds, do)}
    if cfg["mode"] == "stable":
        out.update({"b_Y": (do,), "norm.weight": (do,), "norm.bias": (do,)})
        if cfg.get("residual") == "linear":
            out.update({"W_R.weight": (do, di), "W_R.bias": (do,)})
    return out


def validate_config(cfg: Any, *, where: str) -> dict[str, Any]:
    """The config if it describes a LasF layer headscope can run; else LasFCheckpointError."""

    def bad(reason: str) -> LasFCheckpointError:
        return LasFCheckpointError(f"{where}: not a usable LasF checkpoint: {reason}")

    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        raise bad(f'its config lacks format "{FORMAT}"')
    base = cfg.get("base_model")
    if base not in BASES:
        raise bad(
            f"base model {base!r} is not one headscope has a LasF layer for ({', '.join(BASES)})"
        )
    facts = BASES[base]
    if cfg.get("replaced_layer") != facts["n_layers"] - 1:
        raise bad(
            f"replaced layer {cfg.get('replaced_layer')!r}; LasF replaces {base}'s last layer ({facts['n_layers'] - 1})"
        )
    sizes = cfg.get("sizes")
    if not isinstance(sizes, dict):
        raise bad("its config has no sizes")
    for key in ("n_fields", "d_in", "d_q", "d_s", "d_out"):
        v = sizes.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1 or v > LIMITS.get(key, 4096):
            raise bad(f"size {key}={v!r} is not an integer in 1..{LIMITS.get(key, 4096)}")
    if sizes["d_in"] != facts["d_model"] or sizes["d_out"] != facts["d_model"]:
        raise bad(
            f"d_in/d_out {sizes['d_in']}/{sizes['d_out']} do not match {base}'s hidden size {facts['d_model']}"
        )
    if cfg.get("mode") not in ("paper", "stable") or cfg.get("kernel") not in (
        "identity",
        "gaussian",
    ):
        raise bad(f"mode {cfg.get('mode')!r} / kernel {cfg.get('kernel')!r} unknown")
    if cfg.get("residual", "none") not in ("none", "identity", "linear") or (
        cfg["mode"] == "paper" and cfg.get("residual", "none") != "none"
    ):
        raise bad(f"residual {cfg.get('residual')!r} does not fit mode {cfg['mode']!r}")
    return cfg


def _metadata(path: Path) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file (the header was bounds-checked by the scan)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    meta = header.get("__metadata__") or {}
    return meta if isinstance(meta, dict) else {}


def is_lasf_file(path: str | Path) -> bool:
    """Whether a file is a safetensors file that declares itself a LasF checkpoint (no validation)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(16)
        if not (len(head) >= 9 and head[8:9] == b"{"):
            return False
        return META_KEY in _metadata(path)
    except (OSError, ValueError, struct.error):
        return False


def read_checkpoint(path: str | Path) -> LasFCheckpoint:
    """Read and validate a LasF checkpoint: a safetensors file, or a directory holding one.

    Raises:
        LasFCheckpointError: not safetensors, no LasF config, wrong base model, layer, sizes or
            tensor shapes, non-finite values.
    """
    from workers.models.checkpoints import load_entry, tensor_entries

    path = Path(path)
    if path.is_dir():
        path = path / WEIGHTS_FILE
    name = path.name
    if not is_lasf_file(path):
        raise LasFCheckpointError(
            f"{name}: not a LasF checkpoint (expected a safetensors file with a {FORMAT} config in its metadata)"
        )
    entries = {e.name: e for e in tensor_entries(path)}
    try:
        cfg = json.loads(_metadata(path)[META_KEY])
    except ValueError:
        raise LasFCheckpointError(f"{name}: its {META_KEY} metadata is not JSON") from None
    cfg = validate_config(cfg, where=name)
    want = expected_shapes(cfg)
    missing = sorted(set(want) - set(entries))
    extra = sorted(set(entries) - set(want))
    if missing or extra:
        raise LasFCheckpointError(
            f"{name}: tensors do not match the config: missing {missing}, unexpected {extra}"
        )
    tensors = {}
    for key, shape in want.items():
        e = entries[key]
        if tuple(e.shape) != shape:
            raise LasFCheckpointError(
                f"{name}: tensor {key} has shape {list(e.shape)}, the config needs {list(shape)}"
            )
        if e.dtype not in ("float32", "float64", "float16", "bfloat16"):
            raise LasFCheckpointError(f"{name}: tensor {key} is {e.dtype}; expected floating point")
        arr = load_entry(path, e)
        if not np.all(np.isfinite(arr)):
            raise LasFCheckpointError(f"{name}: tensor {key} contains NaN or infinite values")
        tensors[key] = np.asarray(arr, dtype=np.float32)
    return LasFCheckpoint(cfg, tensors, str(path))


def describe(ck: LasFCheckpoint) -> dict[str, Any]:
    """What the API stores about an uploaded LasF checkpoint (no tensors)."""
    c = ck.config
    keys = (
        "format",
        "base_model",
        "replaced_layer",
        "sizes",
        "mode",
        "kernel",
        "residual",
        "seed",
        "parameters",
    )
    return {k: c[k] for k in keys if k in c}


def save_checkpoint(module: Any, config: dict[str, Any], out_dir: str | Path) -> Path:
    """Write ``lasf.safetensors`` (config in its metadata) and ``config.json`` into ``out_dir``."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    validate_config(config, where=str(out))
    tensors = {k: v.detach().float().contiguous().cpu() for k, v in module.state_dict().items()}
    blob = json.dumps(config, sort_keys=True)
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={META_KEY: blob})
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    return out / WEIGHTS_FILE


def build_module(ck: LasFCheckpoint) -> Any:
    """The torch LasF module of a validated checkpoint, in eval mode."""
    import torch

    from workers.analyses.lasf.module import LasF

    c, s = ck.config, ck.config["sizes"]
    module = LasF(
        s["n_fields"], s["d_in"], s["d_q"], s["d_s"], s["d_out"], mode=c["mode"], kernel=c["kernel"],
        causal=bool(c.get("causal", False)), residual=c.get("residual", "none"),
    )  # fmt: skip
    module.load_state_dict({k: torch.from_numpy(v) for k, v in ck.tensors.items()})
    return module.eval()


def shipped_path(name: str) -> Path | None:
    """The directory of a shipped LasF model (``lasf-minilm``, ``lasf-minilm-paper``), None for other names."""
    return SHIPPED.get(name)
