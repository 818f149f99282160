"""The gallery's first row as a static SVG, for a stored result opened from its link.

A stored result reopened in a new browser (``/?analysis=ID``, ``/?share=ID``) waited for Dash's
bundles and plotly.js (~1 s of main thread each on 2 cores) before its first gallery row could be
drawn. The page's HTML (``frontend.app.preview_tag``) now asks the page's server for this picture
while it is parsed (``GET /_headscope/preview``): each head of the first row's layers, its t-SNE
points where the gallery's picture puts them (``frontend.figures.gallery.first_row_points``), a
circle per token coloured by position, shown over the gallery's place until plotly draws the
interactive row, then removed (docs/dashboard.md, "The first row before plotly.js").
"""

from __future__ import annotations

from html import escape
from typing import Any

from frontend.figures.gallery import first_row_points, gallery_page
from frontend.kit.data import ResultStore, int_list, int_or_none
from frontend.kit.sections import gallery_page_section


def first_row_svg(
    result: dict[str, Any], *, layers: list[int] | None = None, page: int = 0
) -> str | None:
    """The SVG of the first row of the gallery page the view shows (None: no computed row)."""
    # a stored result read by section: only the first row's layers (frontend/kit/sections.py)
    sec = gallery_page_section(result, layers, page, first_row=True)
    gp = gallery_page(result, layers=layers, page=page, section=sec)
    if isinstance(gp, str) or not gp.done:
        return None
    pts = first_row_points(gp)
    if not pts["panels"]:
        return None
    r, colours = f"{pts['radius']:g}", pts["colours"]
    body = [
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{d:.1f}" height="{d:.1f}" fill="none" stroke="#ccc"/>'
        for x, y, d in pts["frames"]
    ]
    for layer, head, xs, ys in pts["panels"]:
        circles = "".join(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{colours[i]}"/>'
            for i, (x, y) in enumerate(zip(xs, ys, strict=True))
        )  # later tokens on top, as in the gallery's picture
        body.append(
            f'<g class="preview-panel" data-layer="{layer}" data-head="{head}">{circles}</g>'
        )
    w, h = pts["width"], pts["height"]
    title = escape(
        f"the gallery's first row (layer {pts['panels'][0][0]}), drawn from the stored result"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" viewBox="0 0 {w:.1f} {h:.1f}"'
        f' data-left="{pts["left"]:.1f}" data-top="{pts["top"]:.1f}" role="img">'
        f"<title>{title}</title>{''.join(body)}</svg>"
    )


def stored_preview(store: ResultStore, args: dict[str, str]) -> str | None:
    """The first row's SVG of the stored result named in the link's query (``analysis`` or
    ``share``; ``layers`` and ``gpage`` from the query or the share's view), or None: not finished,
    not a text explorer result, or not there. Reads through ``store``: the page's own read of the
    result (its layout's read ahead, its first poll) waits for this one download, not another."""
    view: dict[str, Any] = {}
    if args.get("share"):
        store.opening(args["share"])  # its result from its analysis' when this server holds it
        st = store.status({"kind": "share", "id": args["share"]})
        view = dict(st.get("view") or {})
        if (view.get("page") or st.get("share_kind") or "text") not in ("text", "analysis"):
            return None
    elif args.get("analysis"):
        if store.opening_analysis(args["analysis"])["status"] != "finished":
            return None
        st = store.status({"kind": "analysis", "id": args["analysis"]})
    else:
        return None
    if st.get("status") != "finished" or not st.get("result"):
        return None
    view.update({k: args[k] for k in ("layers", "gpage") if args.get(k)})
    layers = view.get("layers")
    layers = int_list(layers) if isinstance(layers, str) else layers
    return first_row_svg(st["result"], layers=layers, page=int_or_none(view.get("gpage")) or 0)
