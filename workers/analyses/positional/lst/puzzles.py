"""Latin Square Task puzzles (docs/positional.md, paper section 2.1).

A puzzle is a 4 x 4 Latin square with some cells shown, the rest blank, and one probe cell whose
symbol the model must name. Cells are tokens in row-major order (t = 4·r + c) with values
``0..3`` (symbols), ``BLANK`` and ``PROBE``.

Complexity — the number of "vectors" — is the fewest rows/columns whose Latin constraints alone
pin the probe's symbol: 1 (its row or column shows the other three symbols), 2 (e.g. its row and
column together), 3 (a third line is needed). Computed exactly: each line's possible
permutations, pruned by arc consistency along shared cells, which is exact here because up to
three lines never form a cycle.

Validation puzzles have Jaccard dissimilarity > 0.8 to every training puzzle, puzzles seen as
sets of (cell, token) pairs over the non-blank cells (shown symbols and the probe); see
:func:`make_dataset` for how that is achieved.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from workers.core.errors import HeadscopeError

logger = logging.getLogger(__name__)

SIZE = 4
N_CELLS = SIZE * SIZE
N_SYMBOLS = 4
BLANK = 4
PROBE = 5
VOCAB = 6
MAX_JACCARD_SIMILARITY = 0.2  # validation vs training: dissimilarity > 0.8

PERMS = np.array(list(itertools.permutations(range(SIZE))), dtype=np.int64)  # [24, 4]
LINES = np.array(
    [[r * SIZE + c for c in range(SIZE)] for r in range(SIZE)]
    + [[r * SIZE + c for r in range(SIZE)] for c in range(SIZE)]
)  # [8 lines, 4 cells]: rows 0-3, then columns 0-3


_ONEHOT = np.eye(N_SYMBOLS, dtype=np.float32)[PERMS]  # [24 perms, 4 cells, 4 symbols]


@dataclass
class Puzzles:
    """A batch of puzzles. # tokens [n, 16], probe [n], answer [n], vectors [n], solution [n, 16]"""

    tokens: np.ndarray
    probe: np.ndarray
    answer: np.ndarray
    vectors: np.ndarray
    solution: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)

    def subset(self, index: np.ndarray) -> Puzzles:
        return Puzzles(
            *(a[index] for a in (self.tokens, self.probe, self.answer, self.vectors, self.solution))
        )

    @staticmethod
    def concat(parts: list[Puzzles]) -> Puzzles:
        return Puzzles(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                         ("tokens", "probe", "answer", "vectors", "solution")))  # fmt: skip


@lru_cache(maxsize=1)
def latin_squares() -> np.ndarray:
    """All 576 Latin squares of order 4, flattened row-major. # [576, 16]"""
    partial = PERMS[:, None, :]  # [m, rows so far, 4]
    for _ in range(SIZE - 1):
        clash = (partial[:, None, :, :] == PERMS[None, :, None, :]).any(axis=(2, 3))  # [m, 24]
        m, p = np.nonzero(~clash)
        partial = np.concatenate([partial[m], PERMS[p][:, None, :]], axis=1)
    return partial.reshape(len(partial), N_CELLS)


def _line_domains(visible: np.ndarray) -> np.ndarray:
    """Which permutations each line may take given the shown cells. # [n, 8, 24] bool"""
    shown = visible[:, LINES]  # [n, 8, 4]
    ok = (shown[:, :, None, :] < 0) | (
        shown[:, :, None, :] == PERMS[None, None, :, :]
    )  # [n, 8, 24, 4]
    return ok.all(axis=-1)


def _values(dom: np.ndarray, index: int) -> np.ndarray:
    """Symbols a line's cell ``index`` can hold under its permitted permutations. # [n, 4] bool"""
    return (dom.astype(np.float32) @ _ONEHOT[:, index, :]) > 0


def complexity(tokens: np.ndarray) -> np.ndarray:
    """Vectors needed per puzzle: 1, 2 or 3; 0 when three lines do not pin the probe. # [n]"""
    tokens = np.atleast_2d(tokens)
    probe = (tokens == PROBE).argmax(axis=1)  # [n]
    visible = np.where(tokens < N_SYMBOLS, tokens, -1)
    dom0 = _line_domains(visible)  # [n, 8, 24]
    out = np.zeros(len(tokens), dtype=np.int64)
    for k in (1, 2, 3):
        for subset in itertools.combinations(range(len(LINES)), k):
            on = np.isin(probe, LINES[list(subset)])
            todo = on & (out == 0)
            if not todo.any():
                continue
            dom = dom0[todo][:, list(subset)].copy()  # [m, k, 24]
            edges = [
                (a, b) for a in range(k) for b in range(k) if subset[a] < SIZE <= subset[b]
            ]  # fmt: skip  (row a meets column b)
            for _ in range(2):
                for a, b in edges:
                    r, c = subset[a], subset[b] - SIZE
                    dom[:, b] &= _values(dom[:, a], c)[:, PERMS[:, r]]
                    dom[:, a] &= _values(dom[:, b], r)[:, PERMS[:, c]]
            pinned = np.zeros(int(todo.sum()), dtype=bool)
            p = probe[todo]
            for a, line in enumerate(subset):
                cells = LINES[line]
                for index in range(SIZE):
                    here = p == cells[index]
                    if here.any():
                        pinned |= here & (_values(dom[:, a], index).sum(axis=1) == 1)
            idx = np.flatnonzero(todo)[pinned]
            out[idx] = k
    return out


def symbol_split(seed: int) -> np.ndarray:
    """Which (cell, symbol) pairs training puzzles may show: two symbols per cell. # [16, 4] bool

    Validation puzzles show only the other two, so no shown (cell, symbol) pair is shared.
    """
    rng = np.random.default_rng([seed, 7919])
    split = np.zeros((N_CELLS, N_SYMBOLS), dtype=bool)
    for cell in range(N_CELLS):
        split[cell, rng.permutation(N_SYMBOLS)[: N_SYMBOLS // 2]] = True
    return split


def _candidates(
    rng: np.random.Generator, n: int, *, shown: tuple[int, int], allowed: np.ndarray | None
) -> Puzzles:
    squares = latin_squares()
    solution = squares[rng.integers(len(squares), size=n)]  # [n, 16]
    # relabel symbols and transpose at random so every square and symbol is equally likely
    relabel = np.argsort(rng.random((n, N_SYMBOLS)), axis=1)
    solution = np.take_along_axis(relabel, solution, axis=1)
    flip = rng.random(n) < 0.5
    solution[flip] = solution[flip].reshape(-1, SIZE, SIZE).transpose(0, 2, 1).reshape(-1, N_CELLS)
    probe = rng.integers(N_CELLS, size=n)
    cells = np.arange(N_CELLS)
    eligible = cells[None, :] != probe[:, None]  # [n, 16]
    if allowed is not None:
        eligible &= allowed[cells[None, :], solution]
    n_shown = rng.integers(shown[0], shown[1] + 1, size=n)
    order = np.argsort(rng.random((n, N_CELLS)) + 2.0 * ~eligible, axis=1)  # eligible cells first
    rank = np.argsort(order, axis=1)
    show = (rank < n_shown[:, None]) & eligible
    tokens = np.where(show, solution, BLANK)
    tokens[np.arange(n), probe] = PROBE
    answer = solution[np.arange(n), probe]
    return Puzzles(tokens, probe, answer, complexity(tokens), solution)


# shown-cell ranges that make each complexity common
_SHOWN = {1: (3, 7), 2: (4, 8), 3: (5, 8)}


def generate(
    n: int,
    *,
    vectors: int,
    rng: np.random.Generator,
    allowed: np.ndarray | None = None,
    max_rounds: int = 500,
) -> Puzzles:
    """``n`` random puzzles that need exactly ``vectors`` rows/columns (1, 2 or 3), showing only
    (cell, symbol) pairs that ``allowed`` permits (``[16, 4]`` bool; None = all)."""
    if vectors not in _SHOWN:
        raise HeadscopeError(f"puzzles need 1, 2 or 3 vectors, got {vectors}")
    quota = np.array(
        [n // N_SYMBOLS + (a < n % N_SYMBOLS) for a in range(N_SYMBOLS)]
    )  # balanced answers
    have = np.zeros(N_SYMBOLS, dtype=np.int64)
    parts = []
    for _ in range(max_rounds):
        if (have >= quota).all():
            break
        cand = _candidates(
            rng, max(256, 4 * int((quota - have).sum())), shown=_SHOWN[vectors], allowed=allowed
        )
        for a in range(N_SYMBOLS):
            pick = np.flatnonzero((cand.vectors == vectors) & (cand.answer == a))[
                : quota[a] - have[a]
            ]
            parts.append(cand.subset(pick))
            have[a] += len(pick)
    if (have < quota).any():
        raise RuntimeError(f"could not generate {n} {vectors}-vector puzzles")
    both = Puzzles.concat(parts)
    return both.subset(rng.permutation(len(both)))


def items(tokens: np.ndarray) -> np.ndarray:
    """Each puzzle as a set of (cell, token) pairs over non-blank cells, one-hot. # [n, 16 * 5]"""
    tokens = np.atleast_2d(tokens)
    code = np.where(tokens == PROBE, N_SYMBOLS, tokens)  # [n, 16] values 0..4, blanks = 4 too
    hot = np.zeros((len(tokens), N_CELLS, N_SYMBOLS + 1), dtype=np.float32)
    cells = np.arange(N_CELLS)
    for i in range(len(tokens)):
        keep = tokens[i] != BLANK
        hot[i, cells[keep], code[i, keep]] = 1.0
    return hot.reshape(len(tokens), -1)


def max_similarity(a: np.ndarray, b: np.ndarray, *, chunk: int = 4096) -> np.ndarray:
    """For each puzzle of ``a``, its largest Jaccard similarity to any puzzle of ``b``. # [len(a)]"""
    ia, ib = items(a), items(b)
    sb = ib.sum(axis=1)
    best = np.zeros(len(ia))
    for start in range(0, len(ia), chunk):
        part = ia[start : start + chunk]
        inter = part @ ib.T  # [chunk, len(b)]
        union = part.sum(axis=1)[:, None] + sb[None, :] - inter
        best[start : start + chunk] = (inter / union).max(axis=1)
    return best


def make_dataset(
    *,
    n_train: int,
    n_val: int,
    seed: int = 0,
    mix: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3),
) -> tuple[Puzzles, Puzzles]:
    """Training and validation puzzles in the given 1/2/3-vector mix.

    Every validation puzzle has Jaccard dissimilarity > 0.8 to every training puzzle: the two sets
    show disjoint (cell, symbol) pairs (:func:`symbol_split`), so they can share at most the probe
    cell. Random puzzles share about one pair on average, so rejection sampling against thousands
    of training puzzles never finds a far-enough validation puzzle.
    """
    rng = np.random.default_rng(seed)
    split = symbol_split(seed)

    def counts(total: int) -> list[int]:
        first = [int(round(total * m)) for m in mix[:2]]
        return [*first, total - sum(first)]

    def build(total: int, allowed: np.ndarray) -> Puzzles:
        parts = [
            generate(c, vectors=k + 1, rng=rng, allowed=allowed)
            for k, c in enumerate(counts(total))
            if c
        ]
        both = Puzzles.concat(parts)
        return both.subset(rng.permutation(len(both)))

    train, val = build(n_train, split), build(n_val, ~split)
    worst = (
        float(max_similarity(val.tokens, train.tokens).max()) if len(val) and len(train) else 0.0
    )
    if worst >= MAX_JACCARD_SIMILARITY:  # cannot happen with disjoint pairs; checked all the same
        raise RuntimeError(
            f"validation puzzle with Jaccard similarity {worst:.2f} to a training puzzle"
        )
    logger.info("LST dataset: %d training, %d validation puzzles (seed %d, max similarity %.2f)",
                len(train), len(val), seed, worst)  # fmt: skip
    return train, val
