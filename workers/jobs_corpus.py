"""Queue jobs of the corpus analysis (docs/corpus.md): statistics of every head, and one head's joint
query–key map, over a stored (``cp-...``) or shipped (``builtin-...``) corpus.

As ``workers.jobs``: the request is parsed, the model comes from this process' cache, progress goes to
``job.meta`` and partial statistics to ``hs:partial:{id}`` as batches finish, and the result to the
store in one transaction. A running job stops between batches once the API sets ``hs:cancel:{id}``;
a cancelled or failed job clears its partial results, so nothing half-written is left.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis import Redis

from workers import protocol
from workers.analysis.texts import TextSource
from workers.contracts import CorpusRequest, JointMapRequest
from workers.corpus_source import open_corpus
from workers.errors import HeadscopeError
from workers.jobs import Reporter, _current, _store

logger = logging.getLogger(__name__)
PARTIAL_EVERY_S = 1.0


def corpus_texts(corpus: str, *, store: Any = None) -> list[str]:
    """Every text of a shipped (``builtin-...``) or stored (``cp-...``) corpus in one list (the joint
    map and comparisons); the statistics read theirs in batches through ``open_corpus``."""
    source = open_corpus(corpus, store=store if store is not None or corpus.startswith("builtin-") else _store())
    return [t for b in source.batches(batch=4096) for t in b]


def compute_corpus(req: CorpusRequest, *, texts: Sequence[str] | TextSource, progress: Callable[[float, str], None],
                   on_partial: Callable[[dict[str, Any]], None],
                   should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The result of a corpus request (docs/results.md, "corpus"); no queue needed (the CLI calls it).
    ``texts``: a list or a ``TextSource`` (``workers.corpus_source.open_corpus``), read in windows."""
    from workers.analysis.corpus import CorpusOptions, corpus_statistics
    from workers.models import load_model

    progress(0.0, f"loading model {req.model}")
    loaded = load_model(req.model, dtype=req.options.dtype)
    o = req.options
    options = CorpusOptions(max_tokens=o.max_tokens, keep_special=o.keep_special, statistics=tuple(o.statistics),
                            top_k=o.top_k, exclude_sink_self=o.exclude_sink_self)
    last = [0.0]

    def partial(so_far: dict[str, Any]) -> None:
        now = time.monotonic()
        if now - last[0] >= PARTIAL_EVERY_S:
            last[0] = now
            on_partial(so_far)

    result = corpus_statistics(loaded, texts, options=options, progress=progress, on_batch=partial,
                               should_stop=should_stop)
    return {**result, "corpus": req.corpus, "dtype": o.dtype}


def compute_joint(req: JointMapRequest, *, texts: Sequence[str] | TextSource, progress: Callable[[float, str], None],
                  should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The joint query–key map of one head (docs/results.md, "corpus joint map")."""
    from workers.analysis.joint_qk import joint_map
    from workers.models import load_model

    progress(0.0, f"loading model {req.model}")
    loaded = load_model(req.model)
    if req.layer >= loaded.n_layers or req.head >= loaded.n_heads:
        raise HeadscopeError(f"head ({req.layer}, {req.head}) is out of range: {req.model} has "
                             f"{loaded.n_layers} layers of {loaded.n_heads} heads")
    out = joint_map(loaded, texts, layer=req.layer, head=req.head, max_tokens=req.max_tokens,
                    keep_special=req.keep_special, max_points=req.max_points, method=req.method, seed=req.seed,
                    progress=progress, should_stop=should_stop)
    return {**out, "model": req.model, "corpus": req.corpus}


def _stopper(conn: Redis, job_id: str) -> Callable[[], bool]:
    return lambda: bool(conn.exists(protocol.cancel_key(job_id)))


def _run(rep: Reporter, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``work``; on a user error or cancel, or any failure, clear the partial results first."""
    try:
        result = work()
    except HeadscopeError as exc:
        rep.conn.delete(protocol.partial_key(rep.job.id))
        return rep.fail(exc)
    except BaseException:
        rep.conn.delete(protocol.partial_key(rep.job.id))
        raise
    return {"bytes": rep.finish(result)}


def run_corpus(request: dict[str, Any]) -> dict[str, Any]:
    """RQ job: a corpus analysis (``CorpusRequest``)."""
    rep = _current()
    rep.start()

    def work() -> dict[str, Any]:
        req = CorpusRequest.model_validate(request)
        source = open_corpus(req.corpus, store=_store())  # read in windows, never whole (docs/scaling.md)
        return compute_corpus(req, texts=source, progress=rep.progress, on_partial=rep.partial,
                              should_stop=_stopper(rep.conn, rep.job.id))

    return _run(rep, work)


def run_corpus_joint(request: dict[str, Any]) -> dict[str, Any]:
    """RQ job: one head's joint query–key map (``JointMapRequest``)."""
    rep = _current()
    rep.start()

    def work() -> dict[str, Any]:
        req = JointMapRequest.model_validate(request)
        return compute_joint(req, texts=open_corpus(req.corpus, store=_store()), progress=rep.progress,
                             should_stop=_stopper(rep.conn, rep.job.id))

    return _run(rep, work)
