"""Read positional-encoding tensors from uploaded checkpoints, safely and without torch.

Formats (recognised by their bytes, not their names): safetensors, NumPy ``.npy`` / ``.npz``
(``allow_pickle=False``), PyTorch ``.pt`` / ``.bin`` zip archives (what ``torch.save`` writes since
1.6) and Hugging Face model directories (their ``*.safetensors`` or ``*.bin`` files).

PyTorch files are unpickled by ``torch_pickle.RestrictedUnpickler``, the same idea as
``torch.load(weights_only=True)`` with a narrower allowlist (tensors, parameters, dicts, lists,
numbers, strings): any other global — ``os.system``, ``builtins.open``, ``numpy`` scalars — is
refused before it is looked up, so nothing in the file ever runs. The module imports no torch, so
the web backend can list an upload's tensors in-process. Only the chosen tensor's bytes are read.
"""

from __future__ import annotations

import json
import logging
import math
import re
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from workers.core.errors import BadFileError
from workers.models.checkpoint_checks import (  # noqa: F401 (MAX_TENSORS, UnsafePickleError: part of this API)
    MAX_HEADER_BYTES,
    MAX_NDIM,
    MAX_TENSORS,
    NPY_VERSIONS,
    TensorEntry,
    UnsafePickleError,
    check_data_size,
    check_npy_shape,
    check_spans,
    clean_name,
    clean_names,
    decode_floats,
    finite_candidates,
    whole_count,
)

logger = logging.getLogger(__name__)

MAX_CHECKPOINT_BYTES = 256 * 1024**2  # an uploaded file (MiniLM's 90 MB model.safetensors fits)
MAX_POSITIONS = 1024  # rows n of a PE matrix (GPT-2's wpe has 1024)
MIN_POSITIONS = 2
MAX_DIM = 4096  # columns d of a PE matrix

FLOAT_KINDS = ("float64", "float32", "float16", "bfloat16")
_ST_DTYPES = {  # safetensors dtype -> (name, itemsize)
    "F64": ("float64", 8), "F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2),
    "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1),
    "U64": ("uint64", 8), "U32": ("uint32", 4), "U16": ("uint16", 2), "U8": ("uint8", 1),
    "BOOL": ("bool", 1), "F8_E4M3": ("float8_e4m3", 1), "F8_E5M2": ("float8_e5m2", 1),
}  # fmt: skip

_STRONG_HINTS = {"pe", "wpe", "pos", "position", "positions", "positional", "posemb", "pos_emb"}
_EMBED_HINTS = {"emb", "embed", "embeds", "embedding", "embeddings"}
_NOT_PE_HINTS = {"word", "words", "token", "tok", "wte", "vocab", "type", "segment", "lm", "head"}
_AUX_HINTS = {"init", "initial", "optimizer", "optim", "exp", "avg", "sq", "grad", "momentum"}


# ---------------------------------------------------------------------------------------------
# public API


def list_candidates(
    path: str | Path, *, max_bytes: int | None = MAX_CHECKPOINT_BYTES
) -> list[dict]:
    """The 2-D float tensors of a checkpoint that could be a PE, best name match first.

    Each item is ``{"name", "shape": [n, d], "dtype", "score"}``; leading axes of length 1 are
    dropped (a ViT-style ``[1, n, d]`` counts as ``[n, d]``). Tensors outside the limits
    (``MIN_POSITIONS``..``MAX_POSITIONS`` rows, at most ``MAX_DIM`` columns) are left out.

    Raises:
        BadFileError: unreadable or corrupt file, a pickle that would run code, too large, too
            many tensors, or no usable 2-D tensor.
    """
    entries = tensor_entries(path, max_bytes=max_bytes)
    cands, skipped = [], []
    for index, e in enumerate(entries):
        shape2 = _as_matrix_shape(e.shape)
        if e.dtype not in FLOAT_KINDS or shape2 is None:
            continue
        if not _within_limits(shape2):
            skipped.append(f"{e.name} {list(shape2)}")
            continue
        cands.append((-name_score(e.name), index, e, shape2))
    if not cands:
        if skipped:
            raise BadFileError(
                f"no 2-D tensor within the limits ({MIN_POSITIONS}..{MAX_POSITIONS} positions x at most "
                f"{MAX_DIM} dims); too large: {', '.join(skipped[:5])}"
            )
        raise BadFileError(
            "the file holds no 2-D floating-point tensor (a PE is a positions x dims matrix)"
        )
    cands.sort(key=lambda c: (c[0], c[1]))
    return [
        {"name": e.name, "shape": list(s), "dtype": e.dtype, "score": -neg}
        for neg, _, e, s in cands
    ]


def read_tensor(
    path: str | Path, name: str | None = None, *, max_bytes: int | None = MAX_CHECKPOINT_BYTES
) -> np.ndarray:
    """The PE matrix ``name`` (None = the best candidate) as float32/float64. # [position, dim]

    Raises:
        BadFileError: as :func:`list_candidates`, or ``name`` is missing, not 2-D, or too large.
    """
    path = Path(path)
    if name is None:
        name = list_candidates(path, max_bytes=max_bytes)[0]["name"]
    entries = {e.name: e for e in tensor_entries(path, max_bytes=max_bytes)}
    if name not in entries:
        close = [n for n in entries if name.lower() in n.lower()][:5]
        hint = f"; similar names: {', '.join(close)}" if close else ""
        raise BadFileError(f"no tensor named {name!r} in the checkpoint{hint}")
    e = entries[name]
    shape2 = _as_matrix_shape(e.shape)
    if shape2 is None:
        raise BadFileError(
            f"tensor {name!r} has shape {list(e.shape)}; a PE must be 2-D (positions x dims)"
        )
    if e.dtype not in FLOAT_KINDS:
        raise BadFileError(f"tensor {name!r} is {e.dtype}; a PE must be floating point")
    if not _within_limits(shape2):
        raise BadFileError(
            f"tensor {name!r} has shape {list(shape2)}; the limit is {MIN_POSITIONS}..{MAX_POSITIONS} "
            f"positions x at most {MAX_DIM} dims"
        )
    arr = load_entry(path, e).reshape(shape2)
    if not np.all(np.isfinite(arr)):
        raise BadFileError(f"tensor {name!r} contains NaN or infinite values")
    return arr


def tensor_entries(
    path: str | Path, *, max_bytes: int | None = MAX_CHECKPOINT_BYTES
) -> list[TensorEntry]:
    """Every tensor of a checkpoint file or model directory (name, stored shape and dtype, and how
    to load it), read from headers only: no tensor data is read yet.

    Raises:
        BadFileError: as :func:`list_candidates`; whatever a hostile or broken file makes a parser
            raise becomes one (the library's words go to the log).
    """
    path = Path(path)
    return _guard(path, lambda: _scan(path, max_bytes=max_bytes))


def load_entry(path: str | Path, entry: TensorEntry) -> np.ndarray:
    """The values of ``entry`` (one of ``tensor_entries(path)``), as float32 or float64.

    Raises:
        BadFileError: the data is truncated or corrupt.
    """
    return _guard(Path(path), entry.load)


def name_score(name: str) -> float:
    """How much a tensor name looks like a positional encoding (higher = more)."""
    words = set(_words(name))
    score = 0.0
    if words & _STRONG_HINTS or "position" in name.lower():
        score += 3.0
    if words & _EMBED_HINTS:
        score += 1.0
    if words & _NOT_PE_HINTS:
        score -= 2.0
    if words & _AUX_HINTS:
        score -= 2.0
    return score


# ---------------------------------------------------------------------------------------------
# helpers


def _guard(path: Path, work: Callable[[], Any]) -> Any:
    """Run ``work``; whatever a hostile or broken file makes a parser raise becomes BadFileError."""
    try:
        return work()
    except BadFileError:
        raise
    except MemoryError:
        raise BadFileError(f"{path.name}: the file asks for more memory than allowed") from None
    except Exception as exc:
        logger.info("checkpoint %s rejected: %r", path, exc)  # the library's words stay in the log
        raise BadFileError(f"{path.name}: corrupt or unsupported file") from None


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)  # camelCase -> camel Case
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def _as_matrix_shape(shape: tuple[int, ...]) -> tuple[int, int] | None:
    dims = list(shape)
    while len(dims) > 2 and dims[0] == 1:
        dims.pop(0)
    return (dims[0], dims[1]) if len(dims) == 2 else None


def _within_limits(shape2: tuple[int, int]) -> bool:
    n, d = shape2
    return MIN_POSITIONS <= n <= MAX_POSITIONS and 1 <= d <= MAX_DIM


def _check_size(path: Path, max_bytes: int | None) -> int:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise BadFileError(f"cannot read checkpoint {path.name}: {exc.strerror}") from None
    if max_bytes is not None and size > max_bytes:
        raise BadFileError(
            f"checkpoint {path.name} is {size / 1024**2:.1f} MiB; the limit is {max_bytes / 1024**2:.0f} MiB "
            f"(save just the PE tensor, e.g. with safetensors)"
        )
    return size


def _scan(path: Path, *, max_bytes: int | None) -> list[TensorEntry]:
    if path.is_dir():
        return _scan_directory(path, max_bytes=max_bytes)
    size = _check_size(path, max_bytes)
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as exc:
        raise BadFileError(f"cannot read checkpoint {path.name}: {exc.strerror}") from None
    if head.startswith(b"\x93NUMPY"):
        entries = [_npy_entry(path, "array")]
    elif head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        entries = _scan_zip(path)
    elif head[:1] == b"\x80":
        from workers.models.torch_pickle import refuse_raw_pickle

        refuse_raw_pickle(path)
        entries = []
    elif len(head) >= 9 and head[8:9] == b"{":
        entries = _scan_safetensors(path, size)
    else:
        raise BadFileError(
            f"{path.name}: unrecognised file format; expected safetensors, .npy, .npz or a PyTorch .pt/.bin"
        )
    if len(entries) > MAX_TENSORS:
        raise BadFileError(f"{path.name} holds {len(entries)} tensors; the limit is {MAX_TENSORS}")
    return clean_names(entries)


def _scan_directory(path: Path, *, max_bytes: int | None) -> list[TensorEntry]:
    """A Hugging Face model directory: its safetensors shards, else its PyTorch ``.bin`` files."""
    files = (
        sorted(path.glob("*.safetensors"))
        or sorted(path.glob("*.bin"))
        or sorted(path.glob("*.pt"))
    )
    if not files:
        raise BadFileError(f"{path.name}: no *.safetensors, *.bin or *.pt weights in the directory")
    entries: dict[str, TensorEntry] = {}
    for file in files:
        for e in _scan(file, max_bytes=max_bytes):
            entries.setdefault(e.name, e)
    return list(entries.values())


# --- safetensors ------------------------------------------------------------------------------


def _scan_safetensors(path: Path, size: int) -> list[TensorEntry]:
    bad = f"{path.name}: corrupt safetensors file"
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise BadFileError(f"{bad} (header of {n} bytes in a {size}-byte file)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, ValueError):
            raise BadFileError(f"{bad} (the header is not JSON)") from None
    if not isinstance(header, dict):
        raise BadFileError(f"{bad} (the header is not a JSON object)")
    base = 8 + n
    entries, spans = [], []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        label = f"{bad} (tensor {clean_name(name)!r}"
        if not isinstance(info, dict) or info.get("dtype") not in _ST_DTYPES:
            raise BadFileError(f"{label}: missing or unknown dtype)")
        dtype, itemsize = _ST_DTYPES[info["dtype"]]
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if not (
            isinstance(shape, list)
            and len(shape) <= MAX_NDIM
            and all(whole_count(s) for s in shape)
        ):
            raise BadFileError(
                f"{label}: the shape must be a list of at most {MAX_NDIM} whole numbers >= 0)"
            )
        if not (
            isinstance(offsets, list) and len(offsets) == 2 and all(whole_count(o) for o in offsets)
        ):
            raise BadFileError(f"{label}: data_offsets must be two whole numbers >= 0)")
        begin, end = offsets
        if begin > end or base + end > size:
            raise BadFileError(f"{label} lies outside the file)")
        if end - begin != math.prod(shape) * itemsize:
            raise BadFileError(
                f"{label}: {end - begin} bytes for shape {shape} of {info['dtype']})"
            )
        spans.append((begin, end, name))
        entries.append(
            TensorEntry(name, tuple(shape), dtype, _reader(path, base + begin, dtype, tuple(shape)))
        )
    check_spans(spans, data_size=size - base, bad=bad)
    return entries


def _reader(
    path: Path, offset: int, dtype: str, shape: tuple[int, ...]
) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        count = math.prod(shape)
        with open(path, "rb") as f:
            f.seek(offset)
            raw = f.read(count * _itemsize(dtype))
        return decode_floats(raw, dtype, "<").reshape(shape)

    return load


def _itemsize(dtype: str) -> int:
    return 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize


# --- NumPy --------------------------------------------------------------------------------------


def _npy_header(fp: Any, label: str) -> tuple[tuple[int, ...], np.dtype]:
    try:
        version = np.lib.format.read_magic(fp)
    except (ValueError, OSError, EOFError) as exc:
        logger.info("%s: bad .npy magic: %r", label, exc)
        raise BadFileError(f"{label}: corrupt .npy header") from None
    if version not in NPY_VERSIONS:
        raise BadFileError(
            f"{label}: .npy format version {version[0]}.{version[1]} is not supported (1.0, 2.0 or 3.0)"
        )
    read = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    try:
        shape, _fortran, dtype = read(fp, max_header_size=10_000)
    except (ValueError, OSError, SyntaxError, EOFError, TypeError) as exc:
        logger.info("%s: bad .npy header: %r", label, exc)
        raise BadFileError(f"{label}: corrupt .npy header") from None
    check_npy_shape(shape, label)
    return tuple(shape), dtype


def _np_dtype_name(dtype: np.dtype, label: str) -> str:
    if dtype.hasobject:
        raise BadFileError(
            f"{label}: object arrays need pickle, which is refused; save a float array"
        )
    return dtype.name if dtype.kind in "fiub" else f"unsupported ({dtype.str})"


def _npy_entry(path: Path, name: str) -> TensorEntry:
    with open(path, "rb") as f:
        shape, dtype = _npy_header(f, path.name)
        header_end = f.tell()
    kind = _np_dtype_name(dtype, path.name)
    check_data_size(
        path.stat().st_size - header_end, math.prod(shape) * dtype.itemsize, path.name, shape
    )

    def load() -> np.ndarray:
        try:
            arr = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            logger.info("%s: unreadable .npy: %r", path.name, exc)
            raise BadFileError(f"{path.name}: corrupt .npy file") from None
        return _native_float(arr)

    return TensorEntry(name, shape, kind, load)


def _native_float(arr: np.ndarray) -> np.ndarray:
    return np.asarray(arr, dtype=np.float64 if arr.dtype.itemsize == 8 else np.float32)


def _scan_zip(path: Path) -> list[TensorEntry]:
    try:
        zf = zipfile.ZipFile(path)
        infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        logger.info("%s: unreadable zip: %r", path.name, exc)
        raise BadFileError(f"{path.name}: corrupt zip archive") from None
    with zf:
        names = [i.filename for i in infos]
        pkl = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
        if pkl:
            from workers.models.torch_pickle import scan_torch_zip

            return scan_torch_zip(path, zf, pkl[0])
        if names and all(n.endswith(".npy") for n in names):
            return _scan_npz(path, zf)
    raise BadFileError(f"{path.name}: a zip archive that is neither .npz nor a PyTorch checkpoint")


def _scan_npz(path: Path, zf: zipfile.ZipFile) -> list[TensorEntry]:
    if len(zf.infolist()) > MAX_TENSORS:
        raise BadFileError(
            f"{path.name} holds {len(zf.infolist())} arrays; the limit is {MAX_TENSORS}"
        )
    entries = []
    for info in zf.infolist():
        name = info.filename[: -len(".npy")]
        try:
            with zf.open(info) as fp:
                shape, dtype = _npy_header(fp, f"{path.name}:{name}")
                header_end = fp.tell()
        except (OSError, zlib.error, zipfile.BadZipFile) as exc:
            logger.info("%s: unreadable .npz member: %r", path.name, exc)
            raise BadFileError(f"{path.name}: corrupt .npz archive") from None
        kind = _np_dtype_name(dtype, f"{path.name}:{name}")
        need = math.prod(shape) * dtype.itemsize
        check_data_size(info.file_size - header_end, need, f"{path.name}:{name}", shape)

        def load(member: str = info.filename) -> np.ndarray:
            try:
                with zipfile.ZipFile(path) as z, z.open(member) as fp:
                    return _native_float(np.lib.format.read_array(fp, allow_pickle=False))
            except (ValueError, OSError, EOFError, zlib.error, zipfile.BadZipFile) as exc:
                logger.info("%s:%s: unreadable array: %r", path.name, member, exc)
                raise BadFileError(f"{path.name}:{member}: corrupt array") from None

        entries.append(TensorEntry(name, shape, kind, load))
    return entries


def inspect_file(path: Any, *, max_bytes: int | None = None) -> list[dict]:
    """Everything the service checks before it keeps an upload: the structure (while listing),
    then each candidate's values. Returns the usable candidates, best first.

    Raises:
        BadFileError: naming the first problem found.
    """
    cands = list_candidates(path, max_bytes=max_bytes)
    return finite_candidates(path, cands, lambda p, name: read_tensor(p, name, max_bytes=max_bytes))
