"""A corpus of bad uploads and bad requests, each with the exact status the API must answer.

Used by tests/test_fuzz_inputs.py (in-process app on a real Redis). Every case is one thing a
probe found accepted, or mis-answered, before issue 13.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import zipfile

import numpy as np


def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def st(header: dict, data: bytes) -> bytes:
    """A safetensors file from a raw header (whatever it claims) and raw data."""
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


PE = np.random.default_rng(0).normal(size=(16, 8)).astype(np.float32)  # [position, dim]
GOOD_NPY = npy(PE)
F32 = PE.tobytes()


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def _torch_zip_with(payload: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", payload)
        zf.writestr("archive/version", "3\n")
    return buf.getvalue()


def _npy_version(major: int, minor: int) -> bytes:
    raw = bytearray(GOOD_NPY)
    raw[6], raw[7] = major, minor
    return bytes(raw)


def _nan_npz() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, pos_embed=np.full((16, 8), np.nan, np.float32))
    return buf.getvalue()


# (case id, filename, bytes, status, words the detail must contain)
BAD_UPLOADS: list[tuple[str, str, bytes, int, list[str]]] = [
    ("empty", "pe.npy", b"", 422, ["empty"]),
    ("not-a-checkpoint-type", "pe.txt", b"hello", 415, [".safetensors"]),
    ("random-bytes", "pe.bin", bytes(range(256)) * 4, 422, ["unrecognised file format"]),
    ("npy-truncated", "pe.npy", GOOD_NPY[:-10], 422, ["truncated"]),
    ("npy-trailing-bytes", "pe.npy", GOOD_NPY + b"\0" * 64, 422, ["unexpected bytes"]),
    (
        "npy-header-shape-larger-than-data",
        "pe.npy",
        GOOD_NPY.replace(b"(16, 8)", b"(32, 8)", 1),
        422,
        ["truncated", "[32, 8]"],
    ),
    ("npy-version-9.9", "pe.npy", _npy_version(9, 9), 422, ["version 9.9"]),
    ("npy-object-array", "pe.npy", npy(np.array([{"a": 1}], dtype=object)), 422, ["pickle"]),
    ("npy-nan", "pe.npy", npy(np.full((16, 8), np.nan, np.float32)), 422, ["NaN or infinite"]),
    ("npy-inf", "pe.npy", npy(np.full((16, 8), np.inf, np.float32)), 422, ["NaN or infinite"]),
    ("npz-nan", "pe.npz", _nan_npz(), 422, ["NaN or infinite"]),
    ("st-header-not-json", "pe.safetensors", b"\x08\0\0\0\0\0\0\0{not jso", 422, ["not JSON"]),
    (
        "st-header-longer-than-file",
        "pe.safetensors",
        struct.pack("<Q", 10**6) + b"{}",
        422,
        ["header"],
    ),
    (
        "st-float-shape",
        "pe.safetensors",
        st({"pos": {"dtype": "F32", "shape": [16.5, 8], "data_offsets": [0, len(F32)]}}, F32),
        422,
        ["shape"],
    ),
    (
        "st-string-shape",
        "pe.safetensors",
        st({"pos": {"dtype": "F32", "shape": ["16", "8"], "data_offsets": [0, len(F32)]}}, F32),
        422,
        ["shape"],
    ),
    (
        "st-bool-shape",
        "pe.safetensors",
        st({"pos": {"dtype": "F32", "shape": [True, 8], "data_offsets": [0, 32]}}, F32[:32]),
        422,
        ["shape"],
    ),
    (
        "st-negative-shape",
        "pe.safetensors",
        st({"pos": {"dtype": "F32", "shape": [-16, 8], "data_offsets": [0, len(F32)]}}, F32),
        422,
        ["shape"],
    ),
    (
        "st-unknown-dtype",
        "pe.safetensors",
        st({"pos": {"dtype": "F99", "shape": [16, 8], "data_offsets": [0, len(F32)]}}, F32),
        422,
        ["dtype"],
    ),
    (
        "st-overlapping-offsets",
        "pe.safetensors",
        st(
            {
                "a": {"dtype": "F32", "shape": [16, 8], "data_offsets": [0, len(F32)]},
                "b": {"dtype": "F32", "shape": [16, 8], "data_offsets": [0, len(F32)]},
            },
            F32,
        ),
        422,
        ["overlaps"],
    ),
    (
        "st-offsets-outside-file",
        "pe.safetensors",
        st({"pos": {"dtype": "F32", "shape": [16, 8], "data_offsets": [64, 64 + len(F32)]}}, F32),
        422,
        ["outside"],
    ),
    (
        "st-hidden-trailing-data",
        "pe.safetensors",
        st(
            {"pos": {"dtype": "F32", "shape": [16, 8], "data_offsets": [0, len(F32)]}},
            F32 + b"\0" * 40,
        ),
        422,
        ["data bytes"],
    ),
    (
        "st-size-mismatch",
        "pe.safetensors",
        st({"pos": {"dtype": "F32", "shape": [16, 9], "data_offsets": [0, len(F32)]}}, F32),
        422,
        ["bytes for shape"],
    ),
    (
        "st-nan",
        "pe.safetensors",
        st(
            {"pos": {"dtype": "F32", "shape": [16, 8], "data_offsets": [0, len(F32)]}},
            np.full((16, 8), np.nan, np.float32).tobytes(),
        ),
        422,
        ["NaN or infinite"],
    ),
    ("pickle-runs-code", "evil.pt", pickle.dumps(_RunsCode()), 422, ["refused", "pickle"]),
    (
        "torch-zip-pickle-runs-code",
        "evil.pt",
        _torch_zip_with(pickle.dumps(_RunsCode())),
        422,
        ["refused"],
    ),
    ("zip-neither-npz-nor-torch", "pe.npz", b"PK\x05\x06" + b"\0" * 18, 422, ["neither"]),
    ("no-2d-tensor", "pe.npy", npy(np.arange(5.0)), 422, ["2-D"]),
]

# (case id, path, JSON body, status, words the detail must contain)
BAD_REQUESTS: list[tuple[str, str, object, int, list[str]]] = [
    (
        "layer-true",
        "/api/analyses",
        {"text": "hi", "options": {"layer": True}},
        422,
        ["options.layer", "whole number"],
    ),
    (
        "layer-string",
        "/api/analyses",
        {"text": "hi", "options": {"layer": "3"}},
        422,
        ["options.layer"],
    ),
    (
        "layer-float",
        "/api/analyses",
        {"text": "hi", "options": {"layer": 2.0}},
        422,
        ["options.layer"],
    ),
    (
        "truncate-yes",
        "/api/analyses",
        {"text": "hi", "options": {"truncate": "yes"}},
        422,
        ["true or false"],
    ),
    (
        "truncate-1",
        "/api/analyses",
        {"text": "hi", "options": {"truncate": 1}},
        422,
        ["true or false"],
    ),
    (
        "seed-string",
        "/api/analyses",
        {"text": "hi", "options": {"seed": "7"}},
        422,
        ["options.seed"],
    ),
    (
        "perplexity-bool",
        "/api/analyses",
        {"text": "hi", "options": {"perplexity": True}},
        422,
        ["number"],
    ),
    ("text-number", "/api/analyses", {"text": 5}, 422, ["text", "string"]),
    ("text-zero-width", "/api/analyses", {"text": "\u200b\u200c\u200d\ufeff"}, 422, ["empty"]),
    ("text-nul", "/api/analyses", {"text": "\x00\x00\x00"}, 422, ["empty"]),
    ("text-controls-and-spaces", "/api/analyses", {"text": "\u2028 \t\x07\u00a0"}, 422, ["empty"]),
    (
        "hidden-layer-out-of-range",
        "/api/analyses",
        {"text": "hi", "options": {"hidden_layer": 99}},
        422,
        ["hidden_layer 99", "0-6"],
    ),
    (
        "hidden-layer-negative",
        "/api/analyses",
        {"text": "hi", "options": {"hidden_layer": -1}},
        422,
        ["hidden_layer"],
    ),
    (
        "layer-out-of-range",
        "/api/analyses",
        {"text": "hi", "options": {"layer": 6}},
        422,
        ["layer 6"],
    ),
    ("head-negative", "/api/analyses", {"text": "hi", "options": {"head": -1}}, 422, ["head -1"]),
    ("no-analyses", "/api/analyses", {"text": "hi", "analyses": []}, 422, ["analyses"]),
    (
        "options-a-list",
        "/api/analyses",
        {"text": "hi", "options": [1, 2]},
        422,
        ["options", "object"],
    ),
    ("body-a-list", "/api/analyses", [1, 2], 422, ["object"]),
    (
        "pe-grid-bool",
        "/api/pe-analyses",
        {"checkpoints": [{"id": "demo-x"}], "reference": {"kind": "2d-fixed", "grid": [True, 4]}},
        422,
        ["grid"],
    ),
    (
        "pe-bad-id",
        "/api/pe-analyses",
        {"checkpoints": [{"id": "../../etc/passwd"}]},
        422,
        ["checkpoints.0.id"],
    ),
    (
        "pe-unknown-checkpoint",
        "/api/pe-analyses",
        {"checkpoints": [{"id": "ck-" + "0" * 32}]},
        404,
        ["upload it first"],
    ),
    (
        "lasf-unknown-checkpoint",
        "/api/analyses",
        {"model": "ck-" + "0" * 32, "text": "hi", "analyses": ["lasf"]},
        404,
        ["no checkpoint with id", "upload the LasF checkpoint first"],
    ),
    (
        "share-both-ids",
        "/api/shares",
        {"analysis_id": "a" * 32, "pe_analysis_id": "b" * 32},
        422,
        ["exactly one"],
    ),
    ("share-unknown", "/api/shares", {"analysis_id": "a" * 32}, 404, ["a" * 32]),
]
