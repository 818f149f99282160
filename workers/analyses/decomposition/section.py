"""The decomposition section (docs/decomposition.md, keys in docs/results.md)."""

from __future__ import annotations

import time
from typing import Any

from workers.analyses.decomposition.spec import DecompositionOptions
from workers.analyses.decomposition.stats import decomposition_section
from workers.analyses.decomposition.terms import decompose_encoded
from workers.analyses.tsne import select_indices
from workers.models import Catalogue, load_model


def decomposition(ctx: Any, options: DecompositionOptions) -> dict[str, Any]:
    """Term importances in the precision ``dtype`` asks for (the model loaded again in it when the
    job's copy is in another); ``layer``: the state of the per-head view."""
    loaded = ctx.loaded
    model = loaded
    if str(loaded.dtype).removeprefix("torch.") != options.dtype:
        own = Catalogue(specs={loaded.name: loaded.spec}, allow_hub=True)  # already allowed once
        model = load_model(loaded.name, dtype=options.dtype, device=loaded.device, catalogue=own)
    states = (
        select_indices(options.layer, loaded.n_layers + 1, "state")
        if options.layer != "all"
        else [None]
    )
    start = time.perf_counter()
    dec = decompose_encoded(
        model, [ctx.encoded], [ctx.text], keep_components=False, progress=ctx.progress
    )[0]
    out = decomposition_section(dec, drop_special=bool(options.drop_special), head_state=states[0])
    out["timings"] = {"decomposition_s": time.perf_counter() - start}
    return out
