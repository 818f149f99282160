"""The word-maps section (docs/compare.md, keys in docs/results.md)."""

from __future__ import annotations

from typing import Any

from workers.analyses.compare.spec import WordMapsOptions
from workers.analyses.compare.word_maps import (
    WordMapper,
    check_words,
    token_words,
    word_maps_section,
)


def plan(ctx: Any, options: WordMapsOptions) -> dict[str, Any]:
    spans = check_words(ctx.text)
    member = token_words(ctx.encoded.offsets, ctx.encoded.special, spans)
    return {"words": WordMapper(ctx.loaded.n_layers, ctx.loaded.n_heads, member)}


def word_maps(ctx: Any, options: WordMapsOptions) -> dict[str, Any]:
    mapper = ctx.consumers["words"]
    assert isinstance(mapper, WordMapper)
    ctx.run  # noqa: B018 - the streamed pass fills the consumer
    enc = ctx.encoded
    return word_maps_section(
        text=ctx.text, offsets=enc.offsets, special=enc.special, maps=mapper.maps,
        member=mapper.member,
    )  # fmt: skip
