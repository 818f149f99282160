"""The project's docs pages inside the dashboard: ``docs/*.md`` rendered at ``/help/<page>``.

``/docs`` is the API's interactive documentation, so the docs live under ``HELP``. Each page is
rendered on the server by markdown-it-py (CommonMark plus GitHub's tables and strikethrough), its
headings carry GitHub's anchors (``/help/analyses#quantile-equidistant-rescaling`` lands where
``docs/analyses.md#quantile-equidistant-rescaling`` does on GitHub), links between docs pages go to
their ``/help`` page, and images come from ``/help/img/`` (``docs/img/``): nothing leaves the
server, so the docs work offline. Where the docs are looked for: ``HEADSCOPE_DOCS_DIR``, else the
checkout's ``docs/``, else ``./docs`` (the Docker image copies them to ``/app/docs``).

    >>> slug("Quantile-equidistant rescaling"), slug("How fast the gallery arrives (issue 34, measured)")
    ('quantile-equidistant-rescaling', 'how-fast-the-gallery-arrives-issue-34-measured')
"""

from __future__ import annotations

import html
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

HELP = "/help"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_SLUG_DROP = re.compile(r"[^\w\- ]", re.UNICODE)


def docs_dir() -> Path | None:
    """The folder of the docs pages, or None when this installation has none."""
    from workers.core.settings import get_settings

    given = get_settings().docs_dir
    candidates = [given] if given else []
    candidates += [Path(__file__).resolve().parents[2] / "docs", Path.cwd() / "docs"]
    return next((c for c in candidates if (c / "dashboard.md").is_file()), None)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces as ``-``."""
    return _SLUG_DROP.sub("", heading.strip().lower()).replace(" ", "-")


def help_url(topic: str) -> str:
    """``"analyses.md#kl"`` or ``"analyses#kl"`` -> ``/help/analyses#kl``."""
    page, _, anchor = topic.partition("#")
    page = page.removesuffix(".md")
    return f"{HELP}/{page}" + (f"#{anchor}" if anchor else "")


def _href(href: str) -> str:
    """A link of a docs page as the dashboard serves it: ``x.md#a`` -> ``/help/x#a``,
    ``img/p.png`` -> ``/help/img/p.png``, ``../README.md`` -> ``/help/README``; others unchanged."""
    if re.match(r"^[a-z]+:|^/|^#", href):
        return href
    path, _, anchor = href.partition("#")
    path = path.removeprefix("./").removeprefix("../docs/").removeprefix("docs/")
    if path.endswith(".md"):
        return help_url(Path(path).name + (f"#{anchor}" if anchor else ""))
    if path.startswith("img/"):
        return f"{HELP}/{path}"
    return href


@lru_cache(maxsize=1)
def _renderer() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])

    def heading_ids(state: Any) -> None:
        seen: dict[str, int] = {}
        tokens = state.tokens
        for i, tok in enumerate(tokens):
            if tok.type == "heading_open" and i + 1 < len(tokens):
                base = slug(tokens[i + 1].content)
                n = seen.get(base, 0)
                seen[base] = n + 1
                tok.attrSet("id", base if n == 0 else f"{base}-{n}")
            if tok.type == "inline":
                for child in tok.children or []:
                    if child.type == "link_open":
                        child.attrSet("href", _href(str(child.attrGet("href") or "")))
                    elif child.type == "image":
                        child.attrSet("src", _href(str(child.attrGet("src") or "")))
                        child.attrSet("loading", "lazy")

    md.core.ruler.push("headscope_ids", heading_ids)
    return md


def render(text: str) -> str:
    """Markdown -> HTML (no raw HTML passes through)."""
    return str(_renderer().render(text))


def page_names() -> list[str]:
    """The docs pages there are (``docs/*.md``, stems), README first."""
    folder = docs_dir()
    if folder is None:
        return []
    names = sorted(p.stem for p in folder.glob("*.md"))
    return (["README"] if (folder.parent / "README.md").is_file() else []) + names


def page_source(name: str) -> str | None:
    """The Markdown of docs page ``name`` (``README``: the project's README), or None."""
    folder = docs_dir()
    if folder is None or not _NAME.fullmatch(name):
        return None
    path = folder.parent / "README.md" if name == "README" else folder / f"{name}.md"
    return path.read_text(encoding="utf-8") if path.is_file() else None


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
       color: #1a1a1a; background: #fafafa; }
.top { background: #1b2433; color: #fff; padding: 10px 24px; display: flex; gap: 18px;
       align-items: baseline; }
.top a { color: #dfe7f3; text-decoration: none; } .top .brand { font-weight: 700; color: #fff; }
main { max-width: 980px; margin: 0 auto; padding: 16px 28px 60px; background: #fff; line-height: 1.55; }
pre { background: #f4f5f7; padding: 10px; overflow-x: auto; } code { font-size: 0.92em; }
table { border-collapse: collapse; margin: 10px 0; font-size: 0.92em; display: block; overflow-x: auto; }
th, td { border: 1px solid #d8dce3; padding: 4px 8px; vertical-align: top; }
img { max-width: 100%; border: 1px solid #e3e6eb; }
h2, h3 { scroll-margin-top: 10px; } :target { background: #fff6d6; }
.pages { columns: 3; } .pages li { margin: 2px 0; }
"""


def html_page(title: str, body: str) -> str:
    """A whole HTML page around ``body``: a bar back to the dashboard and to the docs index."""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)} — headscope docs</title><style>{STYLE}</style></head><body>"
        "<div class='top'><a class='brand' href='/'>headscope</a>"
        f"<a href='{HELP}'>docs</a><a href='/'>back to the dashboard</a></div>"
        f"<main id='help-page'>{body}</main></body></html>"
    )


def index_html() -> str:
    names = page_names()
    if not names:
        return html_page("docs", "<p>This installation has no docs folder.</p>")
    items = "".join(f"<li><a href='{HELP}/{n}'>{n}</a></li>" for n in names)
    return html_page(
        "docs",
        "<h1>headscope docs</h1><p>One page per topic; the glossary explains the terms the "
        f"dashboard uses: <a href='{HELP}/glossary'>glossary</a>.</p><ul class='pages'>{items}</ul>",
    )


def register_routes(server: Any) -> None:
    """``/help`` (the index), ``/help/<page>`` and ``/help/img/<file>`` on the dashboard's server."""
    from flask import abort, send_from_directory

    @server.route(HELP)
    @server.route(HELP + "/")
    def _help_index() -> Any:
        return index_html()

    @server.route(HELP + "/<name>")
    def _help_page(name: str) -> Any:
        source = page_source(name.removesuffix(".md"))
        if source is None:
            abort(404)
        return html_page(name, render(source))

    @server.route(HELP + "/img/<path:filename>")
    def _help_image(filename: str) -> Any:
        folder = docs_dir()
        if folder is None:
            abort(404)
        return send_from_directory(folder / "img", filename, max_age=3600)
