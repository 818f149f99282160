"""The repeated-random-tokens probe (Olsson et al. 2022; docs/atlas.md).

S sequences of R token ids drawn uniformly (seeded) from the vocabulary without special tokens, each
followed by itself, after the model's own leading special token if its tokenizer adds one (offset
``o`` = 0 or 1). For a query at ``o + R + t`` (t = 1 .. R-1) of the repeat: induction
``A[R+t, t+1]``, duplicate ``A[R+t, t]``, previous ``A[R+t, R+t-1]`` (positions within the random
part); each sequence's mean over its R - 1 queries. The repeated-half loss is the mean next-token loss
of the tokens ``R+1 .. 2R-1`` (those an induction head can predict), beside the first copy's
``1 .. R-1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workers.analyses.atlas.labels import PROBE_STATS, Items
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress
from workers.models.adapters import watch_attention

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

BATCH_TOKENS = 4096  # tokens per forward of the probe


@dataclass(frozen=True)
class Probe:
    """The probe's token ids [S, o + 2R] and its shape."""

    ids: np.ndarray
    offset: int  # 1 when the model's leading special token comes first
    length: int  # R

    @property
    def n(self) -> int:
        return int(self.ids.shape[0])


def check_probe(*, random_seqs: int, random_len: int) -> None:
    """Refuse settings the probe cannot run (a reason for each)."""
    if random_seqs < 1:
        raise HeadscopeError(
            f"random_seqs must be at least 1 (got {random_seqs}): the probe needs a sequence"
        )
    if random_len < 2:
        raise HeadscopeError(
            f"random_len must be at least 2 (got {random_len}): a repeat of one token has no "
            "token after its earlier copy"
        )


def leading_special(loaded: LoadedModel) -> list[int]:
    """The model's own leading special token ([CLS], <s>, <bos>) if its tokenizer adds one."""
    tok = loaded.tokenizer
    ids = tok("a", add_special_tokens=True)["input_ids"]
    return [int(ids[0])] if ids and int(ids[0]) in set(tok.all_special_ids) else []


def vocabulary(loaded: LoadedModel) -> np.ndarray:
    """The ids the probe draws from: the tokenizer's and the embedding's, without special tokens."""
    tok = loaded.tokenizer
    rows = int(loaded.model.get_input_embeddings().weight.shape[0])
    n = min(len(tok), rows)
    ids = np.setdiff1d(np.arange(n), np.asarray(tok.all_special_ids, dtype=np.int64))
    if len(ids) < 2:
        raise HeadscopeError(f"{loaded.name}'s vocabulary has fewer than 2 ordinary tokens")
    return ids


def make_probe(loaded: LoadedModel, *, random_seqs: int, random_len: int, seed: int) -> Probe:
    check_probe(random_seqs=random_seqs, random_len=random_len)
    prefix = leading_special(loaded)
    if len(prefix) + 2 * random_len > loaded.max_length:
        raise HeadscopeError(
            f"random_len {random_len} is too long for {loaded.name}: 2 x {random_len} tokens"
            f"{' + 1' if prefix else ''} exceed its limit of {loaded.max_length}"
        )
    rng = np.random.default_rng(seed)
    vocab = vocabulary(loaded)
    seqs = vocab[rng.integers(0, len(vocab), size=(random_seqs, random_len))]
    ids = np.concatenate(
        [
            np.full((random_seqs, len(prefix)), prefix[0] if prefix else 0, dtype=np.int64),
            seqs,
            seqs,
        ],
        axis=1,
    )
    return Probe(ids, len(prefix), random_len)


def repeated_scores(weights: torch.Tensor, *, length: int, offset: int) -> dict[str, torch.Tensor]:
    """Each sequence's induction, duplicate and previous score per head, [batch, head], from one
    layer's maps [batch, head, n, n] of probe sequences (the module's definitions)."""
    t = torch.arange(1, length, device=weights.device)
    q = offset + length + t
    keys = {"induction": offset + t + 1, "duplicate": offset + t, "previous": q - 1}
    return {name: weights[:, :, q, k].double().mean(-1) for name, k in keys.items()}


def batch_rows(probe: Probe) -> int:
    return max(1, BATCH_TOKENS // probe.ids.shape[1])


def mask_of(ids: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


LOSS_ROWS = 4  # rows whose logits are made at once (SmolLM2: 4 x 126 x 49152 floats, 100 MB)


def half_losses(
    unembed: Any,
    hidden: torch.Tensor,
    ids: torch.Tensor,
    *,
    length: int,
    offset: int,
    first: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Each sequence's mean next-token loss (nats) over the first copy's tokens 1..R-1 (None without
    ``first``) and over the repeat's tokens R+1..2R-1, from the final hidden states [batch, n, d]:
    the token at p is predicted at p - 1, so only those positions are unembedded, ``LOSS_ROWS``
    rows at a time (autograd goes through)."""
    second_at = torch.arange(offset + length, offset + 2 * length - 1, device=ids.device)
    first_at = torch.arange(offset, offset + length - 1, device=ids.device)
    at = torch.cat([first_at, second_at]) if first else second_at
    out = []
    for r in range(0, ids.shape[0], LOSS_ROWS):
        logits = unembed.logits(hidden[r : r + LOSS_ROWS, at]).float()  # [rows, p, vocabulary]
        target = ids[r : r + LOSS_ROWS, at + 1]
        out.append(
            torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none"
            ).reshape(target.shape)
        )
    losses = torch.cat(out)
    if not first:
        return None, losses.mean(-1)
    k = length - 1
    return losses[:, :k].mean(-1), losses[:, k:].mean(-1)


@torch.inference_mode()
def run_probe(
    loaded: LoadedModel, probe: Probe, *, loss: bool, progress: Progress | None = None
) -> tuple[Items, dict[str, list[float]] | None]:
    """The probe through the model: each sequence's scores of every head (``Items`` of means), and
    with ``loss`` (a decoder with a language-model head) each sequence's first- and repeated-half loss."""
    report = progress or no_progress
    L, H = loaded.n_layers, loaded.n_heads
    sums = {s: np.zeros((probe.n, L, H)) for s in PROBE_STATS}
    halves: dict[str, list[float]] = {"first": [], "repeated": []}
    unembed = None
    if loss:
        from workers.analyses.causal.views import head_of

        unembed = head_of(loaded)
    rows = batch_rows(probe)
    cur = slice(0, 0)

    def sink(layer: int, weights: torch.Tensor) -> None:
        got = repeated_scores(weights, length=probe.length, offset=probe.offset)
        for s in PROBE_STATS:
            sums[s][cur, layer] = got[s].cpu().numpy()

    with watch_attention(loaded, sink):
        for start in range(0, probe.n, rows):
            cur = slice(start, min(start + rows, probe.n))
            ids = torch.as_tensor(probe.ids[cur], device=loaded.device)
            out = loaded.model(**mask_of(ids))
            if unembed is not None:
                first, second = half_losses(
                    unembed, out.last_hidden_state, ids, length=probe.length, offset=probe.offset
                )
                assert first is not None
                halves["first"] += first.cpu().tolist()
                halves["repeated"] += second.cpu().tolist()
            report(cur.stop / probe.n, f"repeated random tokens: {cur.stop}/{probe.n} sequences")
    return Items(sums, None), (halves if loss else None)
