"""Safe checkpoint reading: every format round-trips, hostile and broken files are refused clearly."""

from __future__ import annotations

import collections
import json
import os
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from workers.core.errors import BadFileError
from workers.models import checkpoints as ck
from workers.models.checkpoints import list_candidates, read_tensor

ROOT = Path(__file__).resolve().parents[1]


class WritesFile:
    """A pickle payload: unpickling it would run ``os.system`` and create ``target``."""

    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


class OpensFile:
    """A payload through ``builtins.open``: unpickling it would create ``target``."""

    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return (open, (str(self.target), "w"))


def test_pt_zip_matches_torch_weights_only(tmp_path: Path) -> None:
    a = torch.randn(6, 5)
    sd = collections.OrderedDict(
        a=a,
        view=a[:, 1:4],  # shares a's storage with an offset
        transposed=a.t(),  # non-contiguous strides
        bf16=torch.randn(4, 3).to(torch.bfloat16),
        half=torch.randn(4, 3).half(),
        param=torch.nn.Parameter(torch.randn(3, 2)),
        ids=torch.arange(7),
    )
    nested = {
        "model": sd,
        "epoch": 3,
        "layers": [torch.randn(2, 2)],
        "pos_embed": torch.randn(1, 8, 4),
    }
    path = tmp_path / "ckpt.pt"
    torch.save(nested, path)
    ref = torch.load(path, weights_only=True)
    for name, tensor in [
        ("model.a", ref["model"]["a"]),
        ("model.view", ref["model"]["view"]),
        ("model.transposed", ref["model"]["transposed"]),
        ("model.bf16", ref["model"]["bf16"]),
        ("model.half", ref["model"]["half"]),
        ("model.param", ref["model"]["param"]),
        ("layers.0", ref["layers"][0]),
        ("pos_embed", ref["pos_embed"][0]),
    ]:
        np.testing.assert_array_equal(read_tensor(path, name), tensor.detach().float().numpy())
    cands = list_candidates(path)
    assert cands[0]["name"] == "pos_embed" and cands[0]["shape"] == [8, 4]  # [1, n, d] -> [n, d]
    assert "model.ids" not in {c["name"] for c in cands}  # 1-D integer, not a PE
    assert {c["dtype"] for c in cands} >= {"bfloat16", "float16", "float32"}


def test_safetensors_own_parser_matches_library(tmp_path: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    path = tmp_path / "m.safetensors"
    save_file(
        {
            "enc.pe": torch.randn(16, 12).to(torch.bfloat16),
            "w": torch.randn(5, 5).double(),
            "n": torch.arange(3),
        },
        str(path),
    )
    with safe_open(str(path), "pt") as f:
        for key in ("enc.pe", "w"):
            np.testing.assert_array_equal(read_tensor(path, key), f.get_tensor(key).float().numpy())
    assert read_tensor(path, "w").dtype == np.float64
    assert [c["name"] for c in list_candidates(path)] == ["enc.pe", "w"]
    np.testing.assert_array_equal(read_tensor(path), read_tensor(path, "enc.pe"))  # None = best


def test_numpy_formats(tmp_path: Path) -> None:
    E = np.random.default_rng(0).normal(size=(10, 4))
    np.save(tmp_path / "e.npy", E.astype(">f8"))  # big-endian comes back native
    np.testing.assert_array_equal(read_tensor(tmp_path / "e.npy"), E)
    np.savez_compressed(tmp_path / "e.npz", wpe=E, ids=np.arange(10), tok=E[:3])
    assert [c["name"] for c in list_candidates(tmp_path / "e.npz")] == ["wpe", "tok"]
    np.testing.assert_array_equal(read_tensor(tmp_path / "e.npz", "wpe"), E)
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(BadFileError, match="object arrays need pickle"):
        list_candidates(tmp_path / "obj.npy")


def test_hugging_face_directories_rank_the_position_embeddings_first(
    catalogue, tiny_model_dirs
) -> None:
    bert = list_candidates(tiny_model_dirs["tiny-bert"])
    assert bert[0]["name"].endswith("position_embeddings.weight") and bert[0]["shape"] == [64, 32]
    gpt2 = list_candidates(tiny_model_dirs["tiny-gpt2"])
    assert gpt2[0]["name"].endswith("wpe.weight") and gpt2[0]["shape"] == [64, 32]
    # the word embeddings (30522 rows) are over MAX_POSITIONS and left out
    assert all(c["shape"][0] <= ck.MAX_POSITIONS for c in bert)
    from transformers import AutoModel

    model = AutoModel.from_pretrained(tiny_model_dirs["tiny-gpt2"])
    np.testing.assert_array_equal(
        read_tensor(tiny_model_dirs["tiny-gpt2"]), model.wpe.weight.detach().numpy()
    )


def test_name_hints() -> None:
    assert ck.name_score("embeddings.position_embeddings.weight") > ck.name_score(
        "embeddings.word_embeddings.weight"
    )
    assert ck.name_score("transformer.wpe.weight") > ck.name_score("transformer.wte.weight")
    assert ck.name_score("pe") > ck.name_score("pe_init") > ck.name_score("blocks.0.qkv.weight") - 3
    assert (
        ck.name_score("posEmbedding") >= 3 and ck.name_score("upper.weight") == 0
    )  # no substring hits


@pytest.mark.parametrize("payload", [WritesFile, OpensFile])
def test_pickle_that_would_run_code_is_refused_and_never_runs(tmp_path: Path, payload) -> None:
    target = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"pe": torch.randn(4, 4), "x": payload(target)}, path)  # a real torch.save zip
    for call in (list_candidates, read_tensor):
        with pytest.raises(
            ck.UnsafePickleError, match=r"refused .* would call (posix\.system|io\.open)"
        ):
            call(path)
    raw = tmp_path / "evil.bin"
    raw.write_bytes(pickle.dumps(payload(target)))  # a bare pickle, as a legacy .bin would be
    with pytest.raises(ck.UnsafePickleError, match="nothing was executed"):
        list_candidates(raw)
    assert not target.exists()
    # control: the payload does write the file when unpickled without restrictions (in a child)
    code = f"import pickle; pickle.loads(open({str(raw)!r}, 'rb').read())"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False, capture_output=True)
    assert target.exists()


def test_corrupt_and_oversized_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"hello, not a checkpoint at all")
    with pytest.raises(BadFileError, match="unrecognised file format"):
        list_candidates(junk)
    # a safetensors header that points past the end of the file
    header = json.dumps(
        {"pe": {"dtype": "F32", "shape": [16, 8], "data_offsets": [0, 512]}}
    ).encode()
    short = tmp_path / "short.safetensors"
    short.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 100)
    with pytest.raises(BadFileError, match="outside the file"):
        list_candidates(short)
    # a truncated zip
    good = tmp_path / "good.pt"
    torch.save({"pe": torch.randn(8, 4)}, good)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[:300])
    with pytest.raises(BadFileError):
        list_candidates(cut)
    # a zip whose storage member is missing
    broken = tmp_path / "broken.pt"
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(broken, "w") as zout:
        for item in zin.infolist():
            if "/data/" not in item.filename:
                zout.writestr(item, zin.read(item))
    with pytest.raises(BadFileError, match="storage of 'pe' missing"):
        list_candidates(broken)
    # no 2-D tensor, too large, too many tensors, a name that does not exist
    torch.save({"v": torch.randn(5)}, tmp_path / "vec.pt")
    with pytest.raises(BadFileError, match="no 2-D floating-point tensor"):
        list_candidates(tmp_path / "vec.pt")
    np.save(tmp_path / "wide.npy", np.zeros((ck.MAX_POSITIONS + 1, 4), dtype=np.float32))
    with pytest.raises(BadFileError, match=f"{ck.MAX_POSITIONS} positions"):
        list_candidates(tmp_path / "wide.npy")
    with pytest.raises(BadFileError, match="no tensor named 'nope'"):
        read_tensor(good, "nope")
    monkeypatch.setattr(ck, "MAX_TENSORS", 3)
    np.savez(tmp_path / "many.npz", **{f"t{i}": np.zeros((4, 4)) for i in range(5)})
    with pytest.raises(BadFileError, match="the limit is 3"):
        list_candidates(tmp_path / "many.npz")
    with pytest.raises(BadFileError, match=r"MiB; the limit is"):
        list_candidates(good, max_bytes=100)
    nan = tmp_path / "nan.npy"
    np.save(nan, np.full((4, 4), np.nan))
    with pytest.raises(BadFileError, match="NaN"):
        read_tensor(nan)


def test_checkpoint_module_does_not_import_torch(tmp_path: Path) -> None:
    """The backend can list an upload's tensors in-process (the file itself, not the package
    ``workers.models``, whose __init__ loads the model code)."""
    code = (
        "import sys, importlib.util, pathlib\n"
        "spec = importlib.util.spec_from_file_location('ck', 'workers/models/checkpoints.py')\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['ck'] = m; spec.loader.exec_module(m)\n"
        f"import numpy as np; np.save({str(tmp_path / 'pe.npy')!r}, np.ones((4, 3)))\n"
        f"assert m.read_tensor({str(tmp_path / 'pe.npy')!r}).shape == (4, 3)\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_mutated_files_fail_only_with_bad_file_error(tmp_path: Path) -> None:
    """Truncated or byte-flipped checkpoints either still read or raise BadFileError, nothing else."""
    import random

    from safetensors.numpy import save_file

    torch.save({"pe": torch.randn(16, 8), "x": [torch.randn(3, 3)]}, tmp_path / "a.pt")
    np.savez_compressed(tmp_path / "a.npz", pe=np.random.default_rng(0).normal(size=(16, 8)))
    np.save(tmp_path / "a.npy", np.ones((16, 8)))
    save_file({"pe": np.ones((16, 8), dtype=np.float32)}, str(tmp_path / "a.safetensors"))
    rng = random.Random(0)
    refused = 0
    for name in ("a.pt", "a.npz", "a.npy", "a.safetensors"):
        data = (tmp_path / name).read_bytes()
        for trial in range(60):
            mutated = bytearray(data)
            if trial % 3 == 0:
                mutated = mutated[: rng.randrange(1, len(mutated))]
            else:
                for _ in range(rng.randint(1, 4)):
                    mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            path = tmp_path / f"m-{name}"
            path.write_bytes(bytes(mutated))
            try:
                for cand in list_candidates(path):
                    read_tensor(path, cand["name"])
            except BadFileError as exc:
                assert str(exc)
                refused += 1
    assert refused > 60  # most mutations break the file; every break is a BadFileError
