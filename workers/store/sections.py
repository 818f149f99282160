"""A finished result kept in sections (docs/api.md, "Sections of a finished result").

A text explorer result of every head is megabytes of JSON (12 MB for SmolLM2 at 452 tokens), of which
a page opened from its link first needs a few kilobytes: the small keys and the gallery's first row.
So the store keeps a result's large top-level values (``SECTION_BYTES`` of JSON or more) apart, each
compressed on its own (``result_parts``), and the small keys in the result's body. A grid section
(``workers.core.partials``: the gallery of every head) is kept as its layer parts, named as the
partial keys the job published (``head-tsne-all@L3``), plus what is not per layer (a ``grid`` row).

Reading the whole result splices the parts' text into the body's, parsing nothing but the small
``grid`` rows' neighbours: each layer part records where its per-layer values lie in its text
(``spans``), so the section's ``embedding`` is ``[`` + the layers' embedding texts + ``]``.
Results stored before (one body, no parts) read as they always did.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import select

from workers.core.jsonable import dumps
from workers.core.partials import LAYER_FIELDS, join_base64, parse_part_key, part_key, split
from workers.store.schema import result_parts, results

# zlib's fastest level: far less CPU on the worker of every job than level 6 for a few more bytes
# (measured: docs/dashboard.md, "What the page server and the job's publishing cost"); reading costs
# the same
COMPRESSION_LEVEL = 1
SECTION_BYTES = 64 * 1024  # a top-level value with this much JSON or more is kept apart

SECTION, GRID, LAYER = "section", "grid", "layer"  # result_parts.role


@dataclass
class Part:
    """One row of ``result_parts``: its name, role, order and JSON text (``spans``: layers only)."""

    name: str
    role: str
    seq: int
    text: str
    spans: dict[str, list[int]] | None = None


def _with_spans(part: dict[str, Any]) -> tuple[str, dict[str, list[int]]]:
    """``part`` as compact JSON, and where each per-layer value's text lies in it (a string's
    without its quotes)."""
    pieces, spans, pos = [], {}, 1
    for i, (k, v) in enumerate(part.items()):
        head = ("," if i else "") + json.dumps(k) + ":"
        value = dumps(v)
        pos += len(head)
        if k in LAYER_FIELDS:
            quoted = isinstance(v, str)
            spans[k] = [pos + quoted, pos + len(value) - quoted]
        pieces.append(head + value)
        pos += len(value)
    return "{" + "".join(pieces) + "}", spans


def split_result(raw: str) -> tuple[str, list[Part]] | None:
    """(the body: the small keys' JSON, the parts) of a result's raw JSON, or None when nothing in
    it is large (then it is stored whole, as before). One parse of ``raw`` and one serialisation of
    its values (docs/api.md gives what it costs)."""
    try:
        result = orjson.loads(raw)  # a third of json.loads' time on a gallery's floats
    except orjson.JSONDecodeError:
        return None
    if not isinstance(result, dict):
        return None
    small: list[str] = []
    parts: list[Part] = []
    for seq, (key, value) in enumerate(result.items()):
        text = dumps(value)
        if len(text) < SECTION_BYTES:
            small.append(f"{json.dumps(key)}:{text}")
            continue
        grid = split(value) if parse_part_key(key) is None else None
        if grid is None:
            parts.append(Part(key, SECTION, seq, text))
            continue
        rest, layers = grid
        parts.append(Part(key, GRID, seq, dumps(rest)))
        for i, layer in enumerate(layers):
            ltext, spans = _with_spans(layer)
            parts.append(Part(part_key(key, layer["layer"]), LAYER, i, ltext, spans))
    if not parts:
        return None
    return "{" + ",".join(small) + "}", parts


def _grid_pieces(rest: str, layers: list[Part]) -> list[str]:
    """The whole grid section's JSON, in pieces to join, from its ``grid`` row and its layer rows
    (in order)."""
    fields: list[list[str]] = [[rest[1:-1]]] if rest[1:-1] else []
    for f in LAYER_FIELDS:
        texts = [p.text[p.spans[f][0] : p.spans[f][1]] for p in layers if p.spans and f in p.spans]
        if len(texts) != len(layers) or not texts:
            continue
        if f != "attention_u8":
            fields.append([f'"{f}":[', *_joined(texts, ","), "]"])
        else:
            fields.append([f'"{f}":"', join_base64(texts), '"'])
    return ["{", *_joined(fields, ","), "}"]


def _joined(items: list[Any], sep: str) -> list[Any]:
    """``items`` with ``sep`` between them, each a string or a list of pieces (flattened)."""
    out: list[Any] = []
    for i, item in enumerate(items):
        if i:
            out.append(sep)
        out.extend(item if isinstance(item, list) else [item])
    return out


def splice(body: str, parts: list[Part], *, names: set[str] | None = None) -> str:
    """The result's JSON: the body's keys, then its sections in their order (``names``: only those,
    a grid section's layer part by its own name). Joined once: 12 MB copied once, not per piece."""
    tops = sorted((p for p in parts if p.role != LAYER), key=lambda p: p.seq)
    layers: dict[str, list[Part]] = {}
    for p in parts:
        if p.role == LAYER:
            parsed = parse_part_key(p.name)
            if parsed:
                layers.setdefault(parsed[0], []).append(p)
    items: list[list[str]] = [[body[1:-1]]] if body[1:-1] else []
    for p in tops:
        if names is not None and p.name not in names:
            continue
        if p.role == GRID:
            grid = sorted(layers.get(p.name, []), key=lambda x: x.seq)
            items.append([f"{json.dumps(p.name)}:", *_grid_pieces(p.text, grid)])
        else:
            items.append([f"{json.dumps(p.name)}:", p.text])
    if names is not None:
        items += [
            [f"{json.dumps(p.name)}:", p.text]
            for ps in layers.values()
            for p in ps
            if p.name in names
        ]
    return "".join(["{", *_joined(items, ","), "}"])


def needed(rows: list[tuple[str, str]], asked: list[str]) -> tuple[list[str], set[str]]:
    """Of a result's ``(name, role)`` rows: the names whose data ``asked`` needs (a grid section
    needs its layers) and the names asked that it holds."""
    roles = dict(rows)
    held = {n for n in asked if n in roles}
    want = set(held)
    for n in held:
        if roles[n] == GRID:
            want |= {
                r for r, role in rows if role == LAYER and (parse_part_key(r) or ("",))[0] == n
            }
    return sorted(want), held


class ResultSections:
    """Writing and reading finished results, in sections, for ``Store`` (a mixin: it uses the
    store's connection helpers)."""

    def read_result(
        self, job_id: str, *, sections: list[str] | None = None
    ) -> tuple[dict[str, Any], str] | None:
        """(meta ``{id, kind, request, finished_at, sections}``, the result's raw JSON) or None.

        ``sections``: only the small keys and these sections (a grid section's layer part by its
        own name, ``head-tsne-all@L3``; unknown names left out). ``meta["sections"]`` names every
        section kept apart, with the layer parts (None: a result kept whole, whose JSON is all of
        it whatever was asked; docs/api.md, "Sections of a finished result")."""
        self._check_job_id(job_id)
        cols = (results.c.kind, results.c.request, results.c.body, results.c.created_at)
        with self._conn() as conn:
            row = conn.execute(select(*cols).where(results.c.id == job_id)).first()
            if row is None:
                return None
            rows = [tuple(r) for r in conn.execute(
                select(result_parts.c.name, result_parts.c.role)
                .where(result_parts.c.result_id == job_id)
            )]  # fmt: skip
            want = [n for n, _ in rows] if sections is None else needed(rows, sections)[0]
            got = conn.execute(
                select(result_parts).where(
                    (result_parts.c.result_id == job_id) & result_parts.c.name.in_(want)
                )
            ).all() if want else []  # fmt: skip
        meta = {
            "id": job_id,
            "kind": row.kind,
            "request": json.loads(row.request),
            "finished_at": row.created_at,
            "sections": sorted(n for n, _ in rows) if rows else None,
        }
        body = zlib.decompress(row.body).decode()
        if not rows:
            return meta, body
        parts = [
            Part(r.name, r.role, r.seq, zlib.decompress(r.data).decode(),
                 json.loads(r.spans) if r.spans else None)
            for r in got
        ]  # fmt: skip
        return meta, splice(body, parts, names=None if sections is None else set(sections))

    def write_result(
        self,
        job_id: str,
        *,
        kind: str,
        request: dict[str, Any],
        result_raw: str,
        owner: str | None = None,
        expires_at: float | None = None,
    ) -> bool:
        """Store a finished result (compressed); the first write of an id wins. True if stored now.

        ``expires_at``: default now + ``result_ttl_s`` (a share keeps it past that).
        """
        self._check_job_id(job_id)
        if self.has_result(job_id):  # written already: no split (one parse) for nothing
            return False
        raw = result_raw.encode()
        now = time.time()
        kept = split_result(result_raw)  # its large sections apart (workers/store/sections.py)
        body = kept[0].encode() if kept else raw
        values = {
            "id": job_id,
            "kind": kind,
            "request": dumps(request),
            "body": zlib.compress(body, COMPRESSION_LEVEL),
            "encoding": "zlib",
            "size": len(raw),
            "owner": owner,
            "created_at": now,
            "expires_at": expires_at
            if expires_at is not None
            else now + self.settings.result_ttl_s,
        }
        with self._conn(write=True) as conn:
            if not self._insert_ignore(conn, results, values):
                return False
            if kept:
                conn.execute(result_parts.insert(), [
                    {"result_id": job_id, "name": p.name, "role": p.role, "seq": p.seq,
                     "size": len(p.text), "data": zlib.compress(p.text.encode(), COMPRESSION_LEVEL),
                     "spans": json.dumps(p.spans) if p.spans else None}
                    for p in kept[1]
                ])  # fmt: skip
            return True
