"""Structural checks of an uploaded checkpoint, before any of it is trusted or stored.

The reader (``checkpoints.py``) calls these on what a file says about itself: whole, in-range
shapes; data sizes that match the header exactly (no truncation, nothing hidden behind);
safetensors data offsets that tile the data region without overlap; supported ``.npy`` versions;
tensor names without control characters and of bounded length. ``finite_candidates`` then reads
each candidate PE and keeps only those whose values are all finite.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from workers.core.errors import BadFileError

MAX_TENSORS = 4096  # entries in one file
MAX_HEADER_BYTES = 16 * 1024**2  # safetensors JSON header, a PyTorch archive's data.pkl


@dataclass
class TensorEntry:
    """One tensor found in a file: its name, stored shape and dtype, and how to read it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    load: Callable[[], np.ndarray]


class UnsafePickleError(BadFileError):
    """The file's pickle would import something other than tensors and containers."""

    def __init__(self, filename: str, target: str):
        self.target = target
        super().__init__(
            f"{filename}: refused — its pickle would call {target}, which could run code on the server; "
            f"only tensors, dicts, lists and numbers are accepted (nothing was executed). "
            f"Save a state_dict with torch.save, or use safetensors"
        )


def decode_floats(raw: bytes, dtype: str, order: str) -> np.ndarray:
    """Little/big-endian bytes -> a native float array (bfloat16 widened to float32)."""
    if dtype == "bfloat16":
        half = np.frombuffer(raw, dtype=f"{order}u2").astype(np.uint32)
        return (half << 16).view(np.float32)
    arr = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder(">" if order == ">" else "<"))
    return arr.astype(np.float64 if dtype == "float64" else np.float32)


MAX_NDIM = 8
MAX_DIM_SIZE = 2**40  # one axis; the byte checks bound the product
MAX_NAME_CHARS = 200
NPY_VERSIONS = ((1, 0), (2, 0), (3, 0))


def whole_count(value: Any) -> bool:
    """A JSON whole number >= 0 (not a bool, a float or a string)."""
    return type(value) is int and 0 <= value <= MAX_DIM_SIZE


def check_npy_shape(shape: Any, label: str) -> None:
    if not (
        isinstance(shape, tuple) and len(shape) <= MAX_NDIM and all(whole_count(s) for s in shape)
    ):
        raise BadFileError(f"{label}: the .npy shape must be at most {MAX_NDIM} whole numbers >= 0")


def check_data_size(have: int, need: int, label: str, shape: Any) -> None:
    """The bytes after a header must be exactly what its shape and dtype need."""
    if have < need:
        raise BadFileError(
            f"{label}: truncated — {have:,} data bytes for shape {list(shape)}, which needs {need:,}"
        )
    if have > need:
        raise BadFileError(
            f"{label}: {have - need:,} unexpected bytes after the data of shape {list(shape)}"
        )


def check_spans(spans: list[tuple[int, int, str]], *, data_size: int, bad: str) -> None:
    """safetensors: the tensors' [begin, end) offsets tile the data region, without overlap or gap."""
    at = 0
    for begin, end, name in sorted(spans):
        if begin < at:
            raise BadFileError(
                f"{bad} (the data of tensor {clean_name(name)!r} overlaps another tensor's)"
            )
        if begin > at:
            raise BadFileError(
                f"{bad} ({begin - at:,} bytes before tensor {clean_name(name)!r} belong to no tensor)"
            )
        at = end
    if at != data_size:
        raise BadFileError(
            f"{bad} (the header describes {at:,} data bytes but the file holds {data_size:,})"
        )


def clean_name(name: Any) -> str:
    """A tensor name fit to show: control and format characters replaced, at most 200 characters."""
    text = "".join("?" if unicodedata.category(ch)[0] == "C" else ch for ch in str(name))
    text = text.strip() or "tensor"
    return text if len(text) <= MAX_NAME_CHARS else text[: MAX_NAME_CHARS - 1] + "…"


def clean_names(entries: list[Any]) -> list[Any]:
    """Entries renamed with :func:`clean_name`; a clash gets ``~2``, ``~3`` appended."""
    seen: set[str] = set()
    for e in entries:
        base = name = clean_name(e.name)
        k = 2
        while name in seen:
            name, k = f"{base[: MAX_NAME_CHARS - 6]}~{k}", k + 1
        seen.add(name)
        e.name = name
    return entries


def finite_candidates(path: Any, candidates: list[dict], read: Any) -> list[dict]:
    """The candidates whose values are all finite (each read in full, one at a time).

    Raises:
        BadFileError: every candidate holds NaN or infinity.
    """
    keep, dropped = [], []
    for cand in candidates:
        try:
            read(path, cand["name"])
        except BadFileError as exc:
            if "NaN or infinite" not in str(exc):
                raise
            dropped.append(cand["name"])
            continue
        keep.append(cand)
    if not keep and dropped:
        raise BadFileError(
            f"every candidate tensor contains NaN or infinite values ({', '.join(repr(n) for n in dropped[:5])})"
        )
    return keep
