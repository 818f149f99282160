"""Where a notebook view's result comes from (docs/notebook.md): headscope's own (a result dict, a
saved JSON, a share link of a running service, or ``analyze`` run in the kernel), or attention you
bring with its tokens, from which ``workers.engine.external.attention_result`` computes what the
view needs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from workers.analyses.attention.spec import MAX_ATTENTION
from workers.analyses.decomposition.spec import DECOMPOSITION
from workers.analyses.lasf.spec import LASF
from workers.analyses.tsne.spec import ALL_HEADS, HEAD_TSNE
from workers.core.errors import HeadscopeError

RESULT_KEYS = (MAX_ATTENTION, HEAD_TSNE, ALL_HEADS, DECOMPOSITION, "checkpoints", LASF)


def share(
    url: str, share_id: str | None = None, *, token: str | None = None, timeout: float = 30.0
) -> dict[str, Any]:
    """The result behind a share link of a running service: ``share("http://host:8050/?share=ID")``
    or ``share("http://host:8050", "ID")``; fetched over HTTP, never recomputed."""
    from frontend.kit.api_client import ApiClient, ApiError

    parts = urlsplit(url)
    if share_id is None:
        share_id = (parse_qs(parts.query).get("share") or [""])[0]
        if not share_id:
            raise HeadscopeError(
                f"{url} holds no share id: pass a link with ?share=ID or the id as share_id="
            )
    base = f"{parts.scheme}://{parts.netloc}"
    client = ApiClient(base, timeout=timeout, token=token)
    try:
        payload = client.share(share_id)
    except ApiError as exc:
        raise HeadscopeError(f"share {share_id} from {base}: {exc}") from exc
    finally:
        client.close()
    return payload["result"]


def load(source: dict[str, Any] | str | Path) -> dict[str, Any]:
    """headscope's own result from a result dict, a saved JSON file (the result itself, the
    dashboard's Download JSON, the CLI's ``--out`` or a share's payload) or a share link."""
    if isinstance(source, dict):
        if "result" in source and isinstance(source["result"], dict):  # download / share payload
            return load(source["result"])
        if "analysis" in source and source["analysis"] not in source:  # the CLI's flat form
            return {**source, source["analysis"]: source}
        if (
            "distance_matrix" in source and "checkpoints" not in source
        ):  # `headscope pe` on one file
            return {"checkpoints": [source]}
        if not any(k in source for k in RESULT_KEYS):
            raise HeadscopeError(
                f"this dict is no headscope result: none of {', '.join(RESULT_KEYS)} in it"
            )
        return source
    if isinstance(source, str | Path):
        text = str(source)
        if text.startswith(("http://", "https://")):
            return share(text)
        path = Path(text).expanduser()
        if not path.is_file():
            raise HeadscopeError(f"no result file at {path}")
        try:
            return load(json.loads(path.read_text(encoding="utf-8")))
        except ValueError as exc:
            raise HeadscopeError(f"{path} is not a result JSON: {exc}") from exc
    raise HeadscopeError(
        f"cannot read a headscope result from a {type(source).__name__}; pass a result dict, a JSON path, "
        "a share link, or attention maps with their tokens: view(attentions, tokens)"
    )


def result_of(
    source: Any,
    tokens: Sequence[str] | None,
    *,
    analyses: Sequence[str],
    select: dict[str, Any] | None = None,
    byo: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The result to draw: headscope's own (``load``), or computed from attention brought with its
    tokens — only ``analyses`` of only the heads in ``select`` (``layers``/``heads``) the view shows."""
    byo = dict(byo or {})
    if tokens is None:
        if byo:
            raise HeadscopeError(
                f"{', '.join(sorted(byo))}: options of attention you bring; pass its tokens too"
            )
        return load(source)
    from workers.analyses.tsne import TSNEOptions
    from workers.engine.external import attention_result

    if isinstance(byo.get("options"), dict):
        byo["options"] = TSNEOptions(**byo["options"])
    return attention_result(source, tokens, analyses=analyses, **{**(select or {}), **byo})


def attention(attentions: Any, tokens: Sequence[str], **options: Any) -> dict[str, Any]:
    """A result of max-attention and every head's t-SNE from attention you bring (computed once,
    then drawn by any view): see ``workers.engine.external.attention_result`` for the options."""
    return result_of(attentions, tokens, analyses=(MAX_ATTENTION, HEAD_TSNE), byo=options)


def analyze(
    model: str, text: str, analyses: Sequence[str] | None = None, **options: Any
) -> dict[str, Any]:
    """headscope's own result: ``pipeline.analyze`` on a catalogue model (``minilm``, …) and a text;
    ``analyses`` default to max-attention and every head's t-SNE (``lasf`` for a shipped LasF model,
    ``lasf-minilm``); ``options`` as the CLI's (``drop_special=True``, ``n_iter=300``, …)."""
    from workers.analyses.lasf.checkpoint import shipped_path
    from workers.engine.pipeline import analyze as run
    from workers.models import load_model

    lasf, path = None, shipped_path(model)
    if path is not None:
        from workers.analyses.lasf.fields import load_lasf

        lasf = load_lasf(path, name=model)
        model = str(lasf.config["base_model"])
    kinds = list(analyses or ([LASF] if lasf is not None else [MAX_ATTENTION, HEAD_TSNE]))
    return run(load_model(model), text, kinds, options, lasf=lasf)


def own_result(source: Any, key: str, view: str) -> dict[str, Any]:
    """headscope's own result holding ``key``: these views need more than attention maps."""
    result = load(source)
    if key not in result:
        raise HeadscopeError(
            f"{view}() needs a result with {key!r} (headscope's own analysis); this one has "
            f"{', '.join(k for k in result if k in RESULT_KEYS) or 'none of the views'}"
        )
    return result
