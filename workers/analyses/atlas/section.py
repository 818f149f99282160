"""The atlas section (docs/atlas.md, keys in docs/results.md, its atlas section)."""

from __future__ import annotations

from typing import Any

from workers.analyses.atlas.run import AtlasSettings, atlas
from workers.analyses.atlas.spec import AtlasOptions
from workers.core.errors import HeadscopeError


def settings_of(options: AtlasOptions) -> AtlasSettings:
    return AtlasSettings(
        corpus=options.corpus,
        max_texts=options.max_texts,
        random_seqs=options.random_seqs,
        random_len=options.random_len,
        seed=options.seed,
        bootstrap=options.resamples,
        thresholds=dict(options.thresholds or {}),
        rule=options.rule,
        loss=options.loss,
        evidence=not options.skip_evidence,
        evidence_seqs=options.evidence_seqs,
        evidence_exact_all=options.evidence_exact_all,
    )


def atlas_section(ctx: Any, options: AtlasOptions) -> dict[str, Any]:
    """An uploaded corpus (``cp-...``) is read through ``ctx.corpora``: the job's runner reads its
    store (the analyses import no store or queue), the CLI the store it is configured with."""
    texts = None
    if not options.corpus.startswith("builtin-"):
        if ctx.corpora is None:
            raise HeadscopeError(
                f"corpus {options.corpus} is an uploaded one, and this run reads no store"
            )
        texts = ctx.corpora(options.corpus, options.max_texts)
    return atlas(ctx.loaded, settings_of(options), texts=texts, progress=ctx.progress)
