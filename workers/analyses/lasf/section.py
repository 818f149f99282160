"""The lasf section (docs/lasf.md): the fields of a LasF layer on this text, and the specialisation
table."""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.analyses.lasf.fields import lasf_section, specialisation
from workers.analyses.lasf.spec import LasFOptions
from workers.analyses.tsne.section import tsne_options
from workers.core.errors import HeadscopeError
from workers.core.progress import scaled
from workers.models.streaming import HeadKeeper


def plan(ctx: Any, options: LasFOptions) -> dict[str, Any]:
    """The replaced layer's heads, kept for ``field_vs_head``."""
    if ctx.lasf is None:
        return {}
    replaced = int(ctx.lasf.config["replaced_layer"])
    return {"heads": HeadKeeper([(replaced, h) for h in range(ctx.loaded.n_heads)])}


def lasf(ctx: Any, options: LasFOptions) -> dict[str, Any]:
    if ctx.lasf is None:
        raise HeadscopeError(
            "the lasf analysis needs a LasF model: lasf-minilm or an uploaded LasF checkpoint"
        )
    keeper = ctx.consumers["heads"]
    assert isinstance(keeper, HeadKeeper)
    replaced = int(ctx.lasf.config["replaced_layer"])
    attention = np.stack(
        [keeper.maps[(replaced, h)] for h in range(ctx.loaded.n_heads)]
    )  # [head, n, n]
    out = lasf_section(
        ctx.run, ctx.lasf, keep=ctx.keep, tsne=tsne_options(options),
        perplexity=float(options.perplexity), progress=scaled(ctx.progress, 0.0, 0.8),
        attention=attention,
    )  # fmt: skip
    ctx.progress(0.8, "specialisation test")
    out["specialisation"] = specialisation(ctx.loaded, ctx.lasf)
    return out
