"""The atlas section (docs/atlas.md, keys in docs/results.md, its atlas section)."""

from __future__ import annotations

from typing import Any

from workers.analyses.atlas.run import AtlasSettings, atlas
from workers.analyses.atlas.spec import AtlasOptions


def settings_of(options: AtlasOptions) -> AtlasSettings:
    return AtlasSettings(
        corpus=options.corpus,
        max_texts=options.max_texts,
        random_seqs=options.random_seqs,
        random_len=options.random_len,
        seed=options.seed,
        bootstrap=options.resamples,
        thresholds=dict(options.thresholds or {}),
        loss=options.loss,
        evidence=not options.skip_evidence,
        evidence_seqs=options.evidence_seqs,
        evidence_exact_all=options.evidence_exact_all,
    )


def atlas_section(ctx: Any, options: AtlasOptions) -> dict[str, Any]:
    return atlas(ctx.loaded, settings_of(options), progress=ctx.progress)
