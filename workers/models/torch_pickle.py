"""PyTorch checkpoints without torch: a restricted unpickler for ``torch.save`` zip archives.

Only ``collections.OrderedDict``, ``torch._utils._rebuild_tensor(_v2)``,
``torch._utils._rebuild_parameter(_with_state)`` and the ``torch.*Storage`` dtype markers may be
looked up; any other global raises :class:`~workers.models.checkpoints.UnsafePickleError` before it
is imported, so nothing in the file runs. Tensors come back as lazy references; only the chosen
one's bytes are read, and its geometry is checked against its storage first.
"""

from __future__ import annotations

import io
import logging
import math
import pickle
import pickletools
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workers.core.errors import BadFileError
from workers.models.checkpoint_checks import (
    MAX_HEADER_BYTES,
    MAX_TENSORS,
    TensorEntry,
    UnsafePickleError,
    decode_floats,
)

logger = logging.getLogger(__name__)

_TORCH_STORAGES = {  # torch.<Name>Storage -> (dtype name, itemsize)
    "DoubleStorage": ("float64", 8), "FloatStorage": ("float32", 4), "HalfStorage": ("float16", 2),
    "BFloat16Storage": ("bfloat16", 2), "LongStorage": ("int64", 8), "IntStorage": ("int32", 4),
    "ShortStorage": ("int16", 2), "CharStorage": ("int8", 1), "ByteStorage": ("uint8", 1),
    "BoolStorage": ("bool", 1),
}  # fmt: skip


@dataclass
class _StorageRef:
    key: str
    dtype: str
    itemsize: int
    numel: int


@dataclass
class _TensorRef:
    storage: _StorageRef
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> _TensorRef:
    if not isinstance(storage, _StorageRef):
        raise pickle.UnpicklingError("tensor without a storage")
    shape = tuple(int(s) for s in size)
    strides = tuple(int(s) for s in stride)
    if len(shape) != len(strides) or any(s < 0 for s in shape + strides) or int(offset) < 0:
        raise pickle.UnpicklingError("bad tensor geometry")
    if (
        math.prod(shape)
        and int(offset) + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
        >= storage.numel
    ):
        raise pickle.UnpicklingError("tensor reaches outside its storage")
    return _TensorRef(storage, int(offset), shape, strides)


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    return data


class _StorageType:
    def __init__(self, name: str):
        self.dtype, self.itemsize = _TORCH_STORAGES[name]


_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    **{("torch", name): _StorageType(name) for name in _TORCH_STORAGES},
}


class RestrictedUnpickler(pickle.Unpickler):
    """Builds containers and tensor references only; refuses every other global."""

    def __init__(self, data: bytes, filename: str):
        super().__init__(io.BytesIO(data))
        self.filename = filename

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        raise UnsafePickleError(self.filename, f"{module}.{name}")

    def persistent_load(self, pid: Any) -> _StorageRef:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unexpected persistent id {str(pid)[:80]}")
        _, stype, key, _location, numel = pid
        if (
            not isinstance(stype, _StorageType)
            or not isinstance(key, str)
            or not isinstance(numel, int)
        ):
            raise pickle.UnpicklingError("bad storage reference")
        return _StorageRef(key, stype.dtype, stype.itemsize, numel)


def scan_torch_zip(path: Path, zf: zipfile.ZipFile, pkl_name: str) -> list[TensorEntry]:
    prefix = pkl_name.rsplit("/", 1)[0]
    info = zf.getinfo(pkl_name)
    if info.file_size > MAX_HEADER_BYTES:
        raise BadFileError(
            f"{path.name}: its pickle is {info.file_size} bytes; the limit is {MAX_HEADER_BYTES}"
        )
    try:
        order = "<"
        if (
            f"{prefix}/byteorder" in zf.namelist()
            and zf.read(f"{prefix}/byteorder").strip() == b"big"
        ):
            order = ">"
        obj = RestrictedUnpickler(zf.read(pkl_name), path.name).load()
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError,
            KeyError, RecursionError, MemoryError, OSError, zlib.error, zipfile.BadZipFile) as exc:  # fmt: skip
        logger.info("%s: unreadable pickle: %r", path.name, exc)
        raise BadFileError(
            f"{path.name}: corrupt PyTorch checkpoint (its pickle cannot be read)"
        ) from None
    found: list[tuple[str, _TensorRef]] = []
    _collect(obj, "", found)
    if not found:
        raise BadFileError(f"{path.name}: the PyTorch checkpoint holds no tensors")
    sizes = {i.filename: i.file_size for i in zf.infolist()}
    entries = []
    for name, ref in found:
        member = f"{prefix}/data/{ref.storage.key}"
        if sizes.get(member) != ref.storage.numel * ref.storage.itemsize:
            raise BadFileError(
                f"{path.name}: corrupt PyTorch checkpoint (storage of {name!r} missing or wrong size)"
            )
        entries.append(
            TensorEntry(name, ref.shape, ref.storage.dtype, _torch_reader(path, member, ref, order))
        )
    return entries


def _collect(obj: Any, prefix: str, out: list[tuple[str, _TensorRef]], depth: int = 0) -> None:
    """Dotted names for every tensor in nested dicts / lists (``model.pe``, ``layers.0.w``)."""
    if depth > 20 or len(out) > MAX_TENSORS:
        return
    if isinstance(obj, _TensorRef):
        out.append((prefix or "tensor", obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _collect(v, f"{prefix}.{k}" if prefix else str(k), out, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _collect(v, f"{prefix}.{i}" if prefix else str(i), out, depth + 1)


def _torch_reader(path: Path, member: str, ref: _TensorRef, order: str) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        st = ref.storage
        try:
            with zipfile.ZipFile(path) as z, z.open(member) as fp:
                raw = fp.read(st.numel * st.itemsize)
        except (OSError, zlib.error, zipfile.BadZipFile) as exc:
            logger.info("%s: unreadable tensor data: %r", path.name, exc)
            raise BadFileError(
                f"{path.name}: cannot read the data of a tensor (corrupt archive)"
            ) from None
        flat = decode_floats(raw, st.dtype, order)
        view = np.lib.stride_tricks.as_strided(
            flat[ref.offset :], shape=ref.shape, strides=[s * flat.itemsize for s in ref.stride]
        )
        return np.array(view)  # a copy: as_strided views must not outlive their checks

    return load


def refuse_raw_pickle(path: Path) -> None:
    """A bare pickle (legacy ``torch.save`` or ``pickle.dump``): name a dangerous global, never load."""
    with open(path, "rb") as f:
        data = f.read(MAX_HEADER_BYTES)
    strings: list[str] = []
    try:
        for op, arg, _pos in pickletools.genops(data):
            if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
                strings.append(str(arg))
            elif op.name in ("GLOBAL", "INST"):
                module, name = str(arg).split(" ", 1)
                if (module, name) not in _ALLOWED:
                    raise UnsafePickleError(path.name, f"{module}.{name}")
            elif op.name == "STACK_GLOBAL":
                target = ".".join(strings[-2:]) if len(strings) >= 2 else "an unknown global"
                if tuple(strings[-2:]) not in _ALLOWED:
                    raise UnsafePickleError(path.name, target)
            elif op.name == "STOP":
                break
    except UnsafePickleError:
        raise
    except (ValueError, IndexError):
        raise BadFileError(f"{path.name}: corrupt pickle") from None
    raise BadFileError(
        f"{path.name}: a bare pickle or a legacy (pre-1.6) PyTorch file is not accepted; "
        f"re-save it with torch.save (zip format) or as safetensors"
    )
