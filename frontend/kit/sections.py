"""A finished result read by section (docs/api.md, "Sections of a finished result").

The page's server reads a stored result's small keys first (``?sections=``, a few kB) and each large
section when something reads it: ``StoredResult`` is that result as a dict whose sections download on
first access (once, under its lock; then held), so every page reads ``status(source)["result"]`` as
before. Reading everything (``items()``, ``values()``, ``dict(result)``, ``json.dumps``) downloads what
is missing, in one request. A gallery's layers are read a few at a time (``layer_section``): the
picture of a reopened link's first row needs one or two layers, not 5 MB of every head
(docs/dashboard.md, "The first row before plotly.js").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, KeysView
from typing import Any

from frontend.kit.api_client import ApiError
from workers.core.partials import fold, parse_part_key, part_key

logger = logging.getLogger(__name__)

Load = Callable[[list[str]], dict[str, Any]]  # names -> {name: value} (a ?sections= read)


class StoredResult(dict):
    """The small keys of a finished result, and its other sections (``names``, from the API's
    ``sections``) read by ``load`` when first asked for. Read it, never change it."""

    def __init__(self, small: dict[str, Any], names: Iterable[str], load: Load):
        super().__init__(small)
        names = list(names)
        self._sections = [n for n in names if parse_part_key(n) is None and n not in small]
        self._layer_parts = {n for n in names if parse_part_key(n) is not None}
        self._keys = [*small, *self._sections]
        self._known = set(self._keys)
        self._load = load
        self._lock = threading.Lock()
        self._parts: dict[str, Any] = {}  # layer parts read (layer_section)
        self._reading: dict[str, threading.Event] = {}  # names being read, set once read
        self._ahead: threading.Thread | None = None  # read_ahead's thread, once started

    # ------------------------------------------------------------------ the mapping, sections on demand
    def fetch(self, names: Iterable[str]) -> None:
        """Read those of ``names`` not held yet, in one request (a section another call is reading
        is waited for, not read again; two different ones are read side by side)."""
        self._read(
            [n for n in names if n in self._known],
            lambda n: dict.__contains__(self, n),
            lambda n, v: dict.__setitem__(self, n, v),
        )

    def _read(
        self, names: list[str], has: Callable[[str], bool], put: Callable[[str, Any], None]
    ) -> None:
        while True:
            with self._lock:
                missing = [n for n in names if not has(n)]
                mine = [n for n in missing if n not in self._reading]
                waits = {id(e): e for n in missing if (e := self._reading.get(n))}
                done = threading.Event()
                self._reading.update({n: done for n in mine})
            if not missing:
                return
            if mine:
                try:
                    got = self._load(mine)
                    with self._lock:
                        for n in mine:
                            if n in got:
                                put(n, got[n])
                except ApiError as exc:  # the page reads None (no section) and may ask again
                    logger.warning("reading %s of a stored result failed: %s", mine, exc)
                    return
                finally:
                    with self._lock:
                        for n in mine:
                            self._reading.pop(n, None)
                    done.set()
            for e in waits.values():
                e.wait()
            if not waits:
                return

    def read_ahead(self, groups: Iterable[Iterable[str]]) -> threading.Thread | None:
        """Read ``groups`` of sections, one request a group in their order, in a thread: what the
        page will draw next read while the browser draws what it has (docs/dashboard.md, "A stored
        result read ahead"). Once per result (None after the first call); a section read or being
        read by a callback meanwhile is not read again (``fetch``)."""
        todo = [[n for n in g if n in self._known] for g in groups]
        with self._lock:
            if self._ahead is not None:
                return None
            self._ahead = threading.Thread(
                target=self._read_groups, args=([g for g in todo if g],), name="read-ahead"
            )
            self._ahead.daemon = True
        self._ahead.start()
        return self._ahead

    def _read_groups(self, groups: list[list[str]]) -> None:
        for names in groups:
            try:
                self.fetch(names)
            except Exception:  # the callbacks read it themselves, as before
                logger.exception("reading %s of a stored result ahead failed", names)
                return

    def loaded(self, key: str) -> bool:
        """Whether ``key``'s value is here (no download to read it)."""
        return dict.__contains__(self, key)

    def whole(self) -> dict[str, Any]:
        """Every key, as a plain dict (all that is missing read first)."""
        self.fetch(self._sections)
        return {k: dict.get(self, k) for k in self._keys}

    def __missing__(self, key: str) -> Any:
        if key not in self._known:
            raise KeyError(key)
        self.fetch([key])
        return dict.get(self, key)  # None: it could not be read

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return self[key] if key in self._known else default

    def __contains__(self, key: object) -> bool:
        return key in self._known

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> KeysView[str]:  # type: ignore[override]
        return KeysView(self)

    def items(self):  # type: ignore[no-untyped-def,override]
        return self.whole().items()

    def values(self):  # type: ignore[no-untyped-def,override]
        return self.whole().values()

    def copy(self) -> dict[str, Any]:  # type: ignore[override]
        return self.whole()

    def __or__(self, other: Any) -> dict[str, Any]:  # type: ignore[override]
        return {**self.whole(), **other}

    def __ror__(self, other: Any) -> dict[str, Any]:  # type: ignore[override]
        return {**other, **self.whole()}

    def __eq__(self, other: object) -> bool:
        return self.whole() == other

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> Any:  # copies and pickles are plain dicts
        return (dict, (self.whole(),))

    # ------------------------------------------------------------------ a gallery's layers
    def planned_layers(self, section: str) -> list[int]:
        """The layers of ``section`` kept as layer parts (none: not kept so, or held whole)."""
        if self.loaded(section):
            return []
        return sorted(
            p[1] for n in self._layer_parts if (p := parse_part_key(n)) and p[0] == section
        )

    def layer_section(self, section: str, layers: Iterable[int]) -> dict[str, Any] | None:
        """``section`` with only ``layers`` (those it holds), folded from their layer parts
        (``workers.core.partials``; ``partial`` names every layer it holds), each part read once.
        The whole section when it is held already; None when it is not kept as layer parts."""
        if self.loaded(section):
            return dict.__getitem__(self, section)
        keys = [part_key(section, la) for la in layers]
        keys = [k for k in keys if k in self._layer_parts]
        if not keys:
            return None
        self._read(keys, lambda k: k in self._parts, self._parts.__setitem__)
        with self._lock:
            held = {k: self._parts[k] for k in keys if k in self._parts}
        return fold(held).get(section) if held else None


def gallery_page_section(
    result: dict[str, Any], layers: list[int] | None, page: int, *, first_row: bool = False
) -> dict[str, Any] | None:
    """The gallery's section with only the layers of the page shown (``first_row``: of its first
    row) read, for a ``StoredResult`` whose gallery is kept as layer parts; None otherwise (the
    caller reads the section as before). One layer is read first for the heads, when the page's
    layers depend on how many there are (a page after the first, or a choice of layers)."""
    from frontend.figures.gallery import MAX_PANELS, gallery_pages, per_row
    from frontend.kit.heads import GALLERY_KEYS

    if not isinstance(result, StoredResult):
        return None
    key = next((k for k in GALLERY_KEYS if k in result), None)
    planned = result.planned_layers(key) if key else []
    if key is None or not planned:
        return None
    chosen = [la for la in (layers or planned) if la in planned]
    if not chosen:
        return None
    one = result.layer_section(key, [chosen[0]])
    if one is None:
        return None
    heads = len(one["heads"])
    pages = gallery_pages(chosen, heads, max_panels=MAX_PANELS)
    shown = pages[min(max(0, int(page or 0)), len(pages) - 1)]
    sec = result.layer_section(key, shown[: per_row(heads)] if first_row else shown)
    if sec is None:
        return None
    # finished: every layer is done, the page's read (``GalleryPage.complete``)
    of = list((sec.get("partial") or {}).get("layers") or planned)
    return {**sec, "partial": {"layers_done": len(of), "layers": of}}
