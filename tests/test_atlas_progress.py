"""The atlas' progress (docs/atlas.md, "Progress"): one bar that never goes down, in words that name
what it computes — the corpus' texts, the random sequences, the bootstrap, the ablations done of N —
as the job's status line shows it (the /heads page polls it as every page does)."""

from __future__ import annotations

import re

import pytest

from workers.analyses.atlas.spec import ATLAS, ATLAS_TEXT
from workers.core.progress import DONE, Monotone
from workers.engine.pipeline import analyze
from workers.models import load_model

pytestmark = pytest.mark.usefixtures("one_torch_thread", "catalogue")


def test_the_atlas_reports_monotone_progress_naming_its_steps() -> None:
    from frontend.kit.page import poll_view

    seen: list[tuple[float, str]] = []
    options = {
        "max_texts": 7,
        "random_seqs": 5,
        "random_len": 8,
        "resamples": 20,
        "evidence_seqs": 2,
        "thresholds": {"induction": 0.0},  # every head clears: every head is ablated exactly
    }
    loaded = load_model("tiny-gpt2", device="cpu")
    analyze(loaded, ATLAS_TEXT, [ATLAS], options, progress=lambda f, m: seen.append((f, m)))
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    words = [m for _, m in seen]
    assert words[-1] == DONE and words.count(DONE) == 1

    def first(pattern: str) -> int:
        return next(i for i, m in enumerate(words) if re.fullmatch(pattern, m))

    steps = [
        first(r"corpus builtin-english: 7/7 texts, .* texts/s"),
        first(r"repeated random tokens: 5/5 sequences"),
        first(r"bootstrap: 20 resamples of 7 texts and 5 sequences"),
        first(r"ablations: attribution patching estimates all 8 heads"),
        first(r"ablations: 0/8 labelled heads, each alone"),
        first(r"ablations: 8/8 labelled heads, each alone"),
    ]
    assert steps == sorted(steps), words  # in the order they are computed
    done = [m for m in words if m.startswith("ablations: ") and "/" in m]
    counts = [int(m.split()[1].split("/")[0]) for m in done]
    assert counts == sorted(counts)  # ablations done, counting up
    # the job's bar (the queue's reporter) and the status line every page shows, mid-run
    bar = Monotone()
    fraction, message = bar(*seen[steps[1]])
    view = poll_view([{"status": "started", "progress": fraction, "message": message}])
    assert "repeated random tokens: 5/5 sequences" in view["text"] and not view["disabled"]
