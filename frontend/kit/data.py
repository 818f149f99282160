"""Where a page's result comes from, and a small cache of finished results.

A *source* is a JSON-able dict kept in a ``dcc.Store``: ``{"kind": "analysis" | "pe" | "share",
"id": str}`` (plus ``request`` for analyses submitted from this page). Finished results never change,
so they are cached in-process; running jobs are asked for each time, but each of their sections is
downloaded once (``ResultStore``). Pages keep only ids in the browser; the figures are built on the
server from the cached JSON.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any
from urllib.parse import parse_qs, urlencode

from frontend.kit.api_client import ApiClient, ApiError
from frontend.kit.sections import StoredResult
from workers.analyses.attention.spec import MAX_ATTENTION
from workers.analyses.tsne.spec import ALL_HEADS, HEAD_TSNE, HIDDEN_TSNE

logger = logging.getLogger(__name__)

DONE = ("finished", "failed")


def parse_query(search: str | None) -> dict[str, str]:
    """``?a=1&b=x`` -> ``{"a": "1", "b": "x"}`` (last value wins)."""
    q = parse_qs((search or "").lstrip("?"), keep_blank_values=False)
    return {k: v[-1] for k, v in q.items()}


def query_string(params: dict[str, Any]) -> str:
    """The inverse of ``parse_query``; None values are left out, booleans become 1/0."""
    clean = {}
    for k, v in params.items():
        if v is None or v == "":
            continue
        if isinstance(v, bool):
            v = int(v)
        elif isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        clean[k] = v
    return "?" + urlencode(clean) if clean else ""


def source_query(source: dict[str, Any], view: dict[str, Any]) -> str:
    """The URL query of a page showing ``source`` (a share or an analysis id) with ``view``."""
    key = "share" if source.get("kind") == "share" else "analysis"
    return query_string({key: source["id"], **view})


def int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def int_list(value: str | None) -> list[int] | None:
    """``"0,2,5"`` -> ``[0, 2, 5]``; None for missing or malformed."""
    if not value:
        return None
    try:
        return [int(x) for x in value.split(",") if x != ""]
    except ValueError:
        return None


class ResultStore:
    """Job status and results by source, with finished results and shares cached (LRU).

    A running job's sections are read once each: every call asks the API for the status and the
    names of the partial keys only (``?partial=none``) and downloads just the keys it has not read
    yet (``?partial=a,b``); a section never changes once written. An all-heads job's gallery
    section is tens of MB: every callback of every poll downloading and decoding the whole partial
    result again kept the page's server busy (docs/dashboard.md, "Measured costs the code points
    to"). Calls for the same job wait for each other, so callbacks fired together share one download.
    """

    def __init__(self, client: ApiClient, *, size: int = 48, running: int = 8):
        self.client = client
        self._size = size
        self._running = running
        self._cache: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        self._partials: OrderedDict[tuple[str, str], dict[str, Any]] = (
            OrderedDict()
        )  # running jobs' keys read
        self._folded: dict[
            tuple[str, str], tuple[tuple[str, ...], dict[str, Any]]
        ] = {}  # their layer parts folded
        self._requests: dict[tuple[str, str], dict[str, Any]] = {}  # running jobs' requests
        self._recent: OrderedDict[tuple[str, str], dict[str, Any]] = (
            OrderedDict()
        )  # running jobs' last status
        self._lock = threading.Lock()
        self._job_locks = [threading.Lock() for _ in range(16)]  # by job: one download at a time
        self._models: tuple[float, dict[str, Any]] | None = None

    def _get_cached(self, key: tuple[str, str]) -> dict[str, Any] | None:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
            return hit

    def _put(self, key: tuple[str, str], value: dict[str, Any]) -> None:
        with self._lock:
            self._cache[key] = value
            self._cache.move_to_end(key)
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
            self._partials.pop(key, None)
            self._requests.pop(key, None)
            self._recent.pop(key, None)

    def _job_lock(self, key: tuple[str, str]) -> threading.Lock:
        return self._job_locks[hash(key) % len(self._job_locks)]

    def models(self, *, ttl: float = 60.0) -> dict[str, Any]:
        """``GET /api/models``, cached for ``ttl`` seconds (raises ApiError)."""
        with self._lock:
            hit = self._models
        if hit is not None and time.monotonic() - hit[0] < ttl:
            return hit[1]
        body = self.client.models()
        with self._lock:
            self._models = (time.monotonic(), body)
        return body

    def share(self, share_id: str) -> dict[str, Any]:
        """``GET /api/shares/{id}`` (cached: a share never changes). Calls for the same share wait for
        each other: one download of its result (``opening``'s read ahead and the page's first poll)."""
        key = ("share", share_id)
        hit = self._get_cached(key)
        if hit is None:
            with self._job_lock(key):
                hit = self._get_cached(key)
                if hit is None:
                    hit = self.client.share(share_id, sections="")  # the small keys, then on demand
                    hit["result"] = self._sectioned(hit, lambda names: self.client.share(
                        share_id, sections=",".join(names))["result"])  # fmt: skip
                    if hit.get("kind") != "analysis" and isinstance(hit["result"], StoredResult):
                        hit["result"] = hit["result"].whole()  # other pages: as before
                    self._put(key, hit)
        return hit

    @staticmethod
    def _sectioned(raw: dict[str, Any], load: Callable[[list[str]], dict[str, Any]]) -> Any:
        """A finished result read by section (``?sections=``: its small keys, ``sections`` naming the
        rest) as a ``StoredResult`` that reads each section when first asked for; any other as it is."""
        result, names = raw.get("result"), raw.get("sections")
        if isinstance(result, dict) and isinstance(names, list):
            return StoredResult(result, names, load)
        return result

    def opening(self, share_id: str) -> dict[str, Any]:
        """A share without its result (``?result=none``: id, kind, view, request), for the layout of
        the page it opens, and its result read ahead in a thread meanwhile, for the page's first
        poll. The layout waited for the whole result (12 MB for SmolLM2 at 452 tokens, 0.7–2.3 s on
        2 loaded cores), and the browser loads plotly.js only once that layout has mounted a graph
        (docs/dashboard.md, "The gallery first"). The whole share when it is cached already, or
        when its analysis' finished result is (the share's result is that one)."""
        hit = self._get_cached(("share", share_id))
        if hit is not None:
            return hit
        light = self.client.share(share_id, result="none")
        shown = self._get_cached(("analysis", str(light.get("target") or "")))
        if light.get("kind") == "analysis" and shown is not None and shown.get("result"):
            # the share's result is its analysis' stored result, which this server holds already
            # (the page shared from, its link opened): no download of the same megabytes again
            whole = {**light, "result": shown["result"]}
            self._put(("share", share_id), whole)
            return whole

        def ahead() -> None:
            try:
                self.share(share_id)
            except ApiError as exc:  # the page's poll reads it again and says why
                logger.info("reading share %s ahead failed: %s", share_id, exc)

        threading.Thread(target=ahead, name=f"share-{share_id}", daemon=True).start()
        return light

    def opening_analysis(self, analysis_id: str) -> dict[str, Any]:
        """An analysis' status and request without its result or sections (``?result=none``), for the
        layout of a page opened from its link; a finished result is read ahead in a thread meanwhile,
        for the page's first poll, which waits for that one download (``opening``). ``status``'s
        answer when it is cached already, or when the service cannot be asked."""
        source = {"kind": "analysis", "id": analysis_id}
        hit = self._get_cached(("analysis", analysis_id))
        if hit is not None:
            return hit
        try:
            raw = self.client.analysis(analysis_id, partial="none", result="none")
        except ApiError:
            return self.status(source)  # its failure, in status' words
        st = {
            "status": raw.get("status", "queued"),
            "error": raw.get("error"),
            "request": raw.get("request"),
            "result": {},
        }
        if st["status"] == "finished":
            threading.Thread(
                target=self.status, args=(source,), name=f"read-{analysis_id}", daemon=True
            ).start()
        return st

    def status(
        self, source: dict[str, Any] | None, *, seen: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """A JobStatus-like dict for any source; errors become ``status == "failed"``.

        Keys: ``status``, ``progress``, ``message``, ``error``, ``result`` (finished) or the
        partial sections merged into one dict, ``request``, ``view`` (shares only).
        The result is shared between callers: read it, never change it.

        ``seen``: what the page's poll saw of its jobs (``{prefix}-job`` or ``{prefix}-job-sections``: ``[{"id",
        "status", "sections"}]``), for a callback that the poll's change set off. When the last status read for
        the job already holds all of it, that status is the answer, with no request: the poll has just
        read it, and a newer change sets the callback off again (at 452 tokens on SmolLM2 a quarter
        of the page server's requests to the API were these second reads).
        """
        if not source or not source.get("id"):
            return {"status": "none", "progress": 0.0, "message": "", "error": None, "result": {}}
        kind, sid = source.get("kind", "analysis"), str(source["id"])
        try:
            if kind == "share":
                share = self.share(sid)
                return {
                    "status": "finished",
                    "progress": 1.0,
                    "message": "shared result",
                    "error": None,
                    "result": share.get("result") or {},
                    "request": share.get("request"),
                    "view": share.get("view") or {},
                    "share_kind": share.get("kind"),
                }
            key = (kind, sid)
            hit = self._get_cached(key)
            if hit is not None:
                return hit
            saw = seen_job(seen, source)
            if saw is not None:
                with self._lock:
                    last = self._recent.get(key)
                if (
                    last is not None
                    and last["status"] == saw.get("status")
                    and set(saw.get("sections") or []) <= set(sections_of(last))
                ):
                    return last
            with self._job_lock(key):
                hit = self._get_cached(
                    key
                )  # finished while this call waited for another's download
                if hit is not None:
                    return hit
                raw, partial = self._read(key)
        except ApiError as exc:
            gone = exc.status == 404
            message = (
                "this result is no longer stored; run the analysis again" if gone else str(exc)
            )
            return {
                "status": "failed",
                "progress": 0.0,
                "message": message,
                "error": message,
                "result": {},
            }
        out = {
            "status": raw.get("status", "queued"),
            "progress": float(raw.get("progress") or 0.0),
            "message": raw.get("message") or "",
            "error": raw.get("error"),
            "request": raw.get("request") or source.get("request"),
        }
        if out["status"] == "finished" and raw.get("result") is not None:
            out["result"] = self._sectioned(raw, lambda names: self.client.analysis(
                sid, partial="none", sections=",".join(names))["result"])  # fmt: skip
            out["progress"] = 1.0
            if raw.get("assembled"):
                out["assembled"] = True
            self._put(key, out)
        else:
            out["result"] = self._fold(key, partial)
            with self._lock:
                self._recent[key] = out
                self._recent.move_to_end(key)
                while len(self._recent) > self._running:
                    self._recent.popitem(last=False)
        return out

    def stored_result(self, source: dict[str, Any] | None) -> dict[str, Any]:
        """The result as the service stores it (for a download): ``status(source)["result"]``, unless
        that was put together from the sections read while the job ran (``finished_from_parts``)."""
        st = self.status(source)
        if isinstance(st["result"], StoredResult):
            return st["result"].whole()
        if not st.get("assembled"):
            return st["result"]
        raw = self.client.analysis(str((source or {})["id"]), partial="none")
        return raw.get("result") or st["result"]

    def _fold(self, key: tuple[str, str], partial: dict[str, Any]) -> dict[str, Any]:
        """The partial result with its layer parts folded into sections (``workers.core.partials``),
        folded once per set of keys: the callbacks of one poll share it."""
        from workers.core.partials import fold, parse_part_key

        if not any(parse_part_key(k) for k in partial):
            return partial
        names = tuple(sorted(partial))
        with self._lock:
            hit = self._folded.get(key)
        if hit is not None and hit[0] == names:
            return hit[1]
        folded = fold(partial)
        with self._lock:
            self._folded[key] = (names, folded)
            while len(self._folded) > self._running:
                self._folded.pop(next(iter(self._folded)))
        return folded

    def _analysis(self, sid: str, *, partial: str) -> dict[str, Any]:
        """An analysis' status; finished, its small keys and the names of its sections (``status``
        reads each when a page asks for it, docs/api.md, "Sections of a finished result")."""
        return self.client.analysis(sid, partial=partial, sections="")

    def _read(self, key: tuple[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(JobStatus, the partial result so far), downloading only the partial keys not read before."""
        kind, sid = key
        fetch = {
            "pe": self.client.pe_analysis,
            "corpus": self.client.corpus_analysis,
            "corpus-joint": self.client.corpus_joint,
            "compare": self.client.compare,
        }.get(kind, self._analysis)
        with self._lock:
            followed = kind == "analysis" and key in self._partials
        raw = (
            self.client.analysis(sid, partial="none", result="none")
            if followed
            else fetch(sid, partial="none")
        )
        if raw.get("status") == "finished":
            if raw.get("result") is not None:
                return raw, {}
            with self._lock:
                have, request = self._partials.get(key) or {}, self._requests.get(key)
            whole = finished_from_parts(raw.get("request") or request, have)
            if (
                whole is not None
            ):  # every section was read while the job ran: no need of the result's megabytes
                return {
                    **raw,
                    "result": whole,
                    "request": raw.get("request") or request,
                    "assembled": True,
                }, {}
            return fetch(sid, partial="none"), {}
        with self._lock:
            have = self._partials.get(key) or {}
            if raw.get("request"):
                self._requests[key] = raw["request"]
        missing = wanted_keys(raw.get("partial_keys") or [], have)
        if missing:
            raw = fetch(sid, partial=",".join(missing))
            if raw.get("status") == "finished" and raw.get("result") is not None:
                return raw, {}
            have = {**have, **(raw.get("partial") or {})}
            with self._lock:
                self._partials[key] = have
                self._partials.move_to_end(key)
                while len(self._partials) > self._running:
                    self._requests.pop(self._partials.popitem(last=False)[0], None)
        # a retried job starts its partial result again: show only the keys it has now
        return raw, {k: have[k] for k in raw.get("partial_keys") or [] if k in have}


TEXT_EXPLORER_KINDS = {MAX_ATTENTION, HEAD_TSNE, HIDDEN_TSNE}


def finished_from_parts(
    request: dict[str, Any] | None, held: dict[str, Any]
) -> dict[str, Any] | None:
    """The finished result of a text explorer job (its analyses among ``TEXT_EXPLORER_KINDS``) from the
    partial keys read while it ran, when they hold every section it asked for, else None.

    It differs from the stored result only in what no figure reads (``timings``, the gallery section's
    engine notes); ``ResultStore.stored_result`` reads the stored one for downloads. The stored
    result is tens of MB: read and parsed again at the job's end, it kept the page's server busy
    (docs/dashboard.md, "Measured costs the code points to").
    """
    from workers.core.partials import fold

    analyses = set((request or {}).get("analyses") or [])
    if not analyses or not analyses <= TEXT_EXPLORER_KINDS:
        return None
    o = (request or {}).get("options") or {}
    want = set(analyses)
    if (
        o.get("all_heads")
        and HEAD_TSNE in analyses
        and not (o.get("layer") == "all" and o.get("head") == "all")
    ):
        want.add(ALL_HEADS)
    whole = fold(held)
    if not want <= set(whole) or "tokens" not in whole:
        return None
    for k in want:
        progress = whole[k].get("partial") if isinstance(whole[k], dict) else None
        if progress:
            if progress.get("layers_done", 0) < len(progress.get("layers") or []):
                return None
            whole[k] = {f: v for f, v in whole[k].items() if f != "partial"}
    return whole


def wanted_keys(names: list[str], have: dict[str, Any]) -> list[str]:
    """The partial keys to download, of ``names``, when ``have`` is held already.

    A section published layer by layer (``workers.core.partials``) and then whole is read either way,
    not both: with every layer's part held, the whole section (tens of MB for a gallery) is folded
    from them; without, it is read whole and the parts it makes are not.
    """
    from workers.core.partials import parse_part_key

    parts: dict[str, list[str]] = {}
    for k in names:
        parsed = parse_part_key(k)
        if parsed:
            parts.setdefault(parsed[0], []).append(k)
    out = []
    for k in names:
        if k in have:
            continue
        parsed = parse_part_key(k)
        if parsed and parsed[0] in names:  # the whole section is published: read it, not its parts
            continue
        if k in parts and all(p in have for p in parts[k]) and _covers(k, parts[k], have):
            continue
        out.append(k)
    return out


def _covers(section: str, part_keys: list[str], have: dict[str, Any]) -> bool:
    """Whether the parts held are every layer the section holds (``of_layers`` of a part)."""
    from workers.core.partials import parse_part_key

    layers = {parse_part_key(k)[1] for k in part_keys}  # type: ignore[index]
    planned = (have.get(part_keys[0]) or {}).get("of_layers") or []
    return bool(planned) and set(planned) <= layers


class Built:
    """A few values (figures) by key, each built once: a caller asking for a key being built waits
    for that build instead of running its own beside it.

    Two sections arriving a few tenths of a second apart (max attention, then the head's t-SNE) make
    two polls redraw the same heatmaps; two builds at once on the page's server take twice as long
    each (docs/dashboard.md, "Measured costs the code points to").
    """

    def __init__(self, size: int = 4):
        self._size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._building: dict[Hashable, threading.Event] = {}

    def get(self, key: Hashable, build: Callable[[], Any]) -> Any:
        while True:
            with self._lock:
                if key in self._items:
                    self._items.move_to_end(key)
                    return self._items[key]
                done = self._building.get(key)
                if done is None:
                    done = self._building[key] = threading.Event()
                    break
            done.wait()  # another caller's build; its value (or, if it failed, this caller's build) next
        try:
            value = build()
            with self._lock:
                self._items[key] = value
                while len(self._items) > self._size:
                    self._items.popitem(last=False)
            return value
        finally:
            with self._lock:
                del self._building[key]
            done.set()


def seen_job(
    jobs: list[dict[str, Any]] | None, source: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The poll's entry (``{prefix}-job`` or ``{prefix}-job-sections``) of ``source``'s job, or None."""
    sid = (source or {}).get("id")
    return next((j for j in jobs or [] if sid is not None and j.get("id") == sid), None)


def sections_of(status: dict[str, Any]) -> list[str]:
    """Names of the analysis sections (and PE reports) present in a status' result; a section still
    filling in layer by layer as ``name:layers done`` (so each new layer is a change)."""
    result = status.get("result") or {}
    out = []
    for k in result:
        if isinstance(result, StoredResult) and not result.loaded(k):
            out.append(k)  # a finished section not read yet (a large value: an object or a list)
            continue
        v = result[k]
        if isinstance(v, (dict, list)):
            done = (v.get("partial") or {}).get("layers_done") if isinstance(v, dict) else None
            out.append(f"{k}:{done}" if done is not None else k)
    return sorted(out)
