"""The distillation corpus, built offline from what every Python installation carries.

Sources: the help topics of ``pydoc_data.topics`` and the docstrings of the standard library's
``.py`` files (read with ``ast``, never imported). Texts are split into sentences, cleaned, and
split into train / validation / test by sentence with a fixed seed. Nothing is downloaded.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import random
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

SKIP_DIRS = {
    "test",
    "tests",
    "idlelib",
    "lib2to3",
    "site-packages",
    "dist-packages",
    "__pycache__",
    "turtledemo",
}
_SENT_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_WORD = re.compile(r"[A-Za-z]{2,}")


@dataclass(frozen=True)
class Corpus:
    """Sentences per split, and a fingerprint of the whole (same fingerprint = same corpus)."""

    train: list[str]
    val: list[str]
    test: list[str]

    @property
    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for split in (self.train, self.val, self.test):
            h.update("\n".join(split).encode())
            h.update(b"\x00")
        return h.hexdigest()[:16]


def _stdlib_docstrings() -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if SKIP_DIRS & set(path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    out.append(doc)
    return out


def _topics() -> list[str]:
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def split_sentences(text: str, *, min_words: int = 5, max_words: int = 40) -> list[str]:
    """Prose sentences of ``text``: paragraphs joined, code-like and very short or long ones dropped."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in para.splitlines()]
        if any(ln.startswith((">>>", "...", "$", "|", "+-", "==", "--")) for ln in lines):
            continue
        flat = " ".join(ln for ln in lines if ln)
        for sent in _SENT_END.split(flat):
            sent = sent.strip()
            words = sent.split()
            if not min_words <= len(words) <= max_words or not sent[:1].isupper():
                continue
            if len(_WORD.findall(sent)) < 0.7 * len(words) or sent[-1] not in ".!?":
                continue
            out.append(sent)
    return out


def build_corpus(
    *,
    seed: int = 0,
    max_sentences: int | None = 12_000,
    fractions: tuple[float, float] = (0.1, 0.1),
) -> Corpus:
    """Unique sentences from pydoc topics and stdlib docstrings, shuffled with ``seed`` and split.

    Args:
        max_sentences: keep this many after shuffling (None: all).
        fractions: validation and test shares.
    """
    seen: set[str] = set()
    sentences: list[str] = []
    for text in _topics() + _stdlib_docstrings():
        for s in split_sentences(text):
            if s not in seen:
                seen.add(s)
                sentences.append(s)
    random.Random(seed).shuffle(sentences)
    if max_sentences is not None:
        sentences = sentences[:max_sentences]
    n = len(sentences)
    n_val, n_test = int(n * fractions[0]), int(n * fractions[1])
    corpus = Corpus(
        train=sentences[n_val + n_test :],
        val=sentences[:n_val],
        test=sentences[n_val : n_val + n_test],
    )
    logger.info(
        "corpus: %d sentences (%d train, %d val, %d test)", n, len(corpus.train), n_val, n_test
    )
    return corpus
