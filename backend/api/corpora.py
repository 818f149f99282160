"""Corpora and corpus analyses (docs/corpus.md, docs/api.md).

``POST /api/corpora`` takes a paste (``text``: one text per line) or an upload (``file``: ``.txt``,
``.jsonl`` with ``field``, ``.csv``, ``.parquet`` or a packed ``datasets`` directory with ``field``
naming the column), checks it completely as it streams past (``workers.inputs.corpora``: encoding, size,
number of texts, empty rows, a missing field or column, named by line or row) and only then stores
it in chunks, content-addressed (``cp-`` + SHA-256), with its owners for quotas and expiry as an
uploaded checkpoint. A refused corpus gets a 422 naming the problem and nothing of it is kept.
``/api/corpus-analyses`` queue, report and cancel the statistics of every head; ``/api/corpus-joint``
one head's joint query–key map (the job routes, ``backend.api.jobs``).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path

from fastapi import APIRouter, File, Form, HTTPException, UploadFile

from backend import quota
from backend.api.checkpoints import safe_filename
from backend.api.common import not_found
from backend.api.jobs import job_routes
from backend.api.models import check_model
from backend.clients import ClientDep
from backend.deps import SettingsDep, StoreDep, WriteAccess
from backend.errors import error_responses
from backend.queue import JobQueue
from backend.store import Store
from workers.core.contracts import CorpusRequest, JointMapRequest
from workers.core.errors import HeadscopeError
from workers.inputs.corpora import Limits, format_of, shipped_corpus, shipped_list, stage_corpus
from workers.inputs.task_sets import KIND as TASK_SET

logger = logging.getLogger(__name__)
router = APIRouter(tags=["corpus"])

PUBLIC = ("id", "name", "n_texts", "size", "format", "field", "uploaded_at", "preview")


def _public(meta: dict) -> dict:
    return {k: meta[k] for k in PUBLIC if k in meta}


UPLOAD_TYPES = (
    ".txt, .jsonl, .csv or .parquet, or a datasets directory (save_to_disk) as .zip or .tar.gz"
)


@router.post(
    "/api/corpora", status_code=201, dependencies=[WriteAccess], responses=error_responses(413, 415)
)
def upload_corpus(
    store: StoreDep,
    settings: SettingsDep,
    client: ClientDep,
    file: UploadFile | None = File(None, description=f"a corpus file: {UPLOAD_TYPES}"),  # noqa: B008
    text: str | None = Form(None, description="pasted texts, one per line"),
    field: str | None = Form(
        None,
        max_length=200,
        description="the JSONL field or CSV, Parquet or datasets column (default: text)",
    ),
    name: str | None = Form(None, max_length=200, description="a display name"),
) -> dict:
    """Check a corpus completely, then store it; ``{"id", "name", "n_texts", ...}``."""
    if (file is None) == (text is None):
        raise HTTPException(422, "give either a file or pasted text (one text per line)")
    limits = Limits.from_settings(settings, max_bytes=settings.max_upload_bytes)
    upload: Path | None = None
    if file is not None:
        filename = safe_filename(file.filename)
        fmt = format_of(filename)
        if fmt is None:
            raise HTTPException(415, f"{filename}: unsupported file type; upload {UPLOAD_TYPES}")
        if fmt == "txt" and field is not None:
            raise HTTPException(
                422,
                f"{filename}: field applies to .jsonl, .csv, .parquet and datasets corpora, "
                "not to .txt",
            )
        upload = _receive(file, store=store, filename=filename, limit=limits.max_bytes)
        source: Path | str = upload
    else:
        filename, fmt, source = "pasted text", "txt", text or ""
        if field is not None:
            raise HTTPException(422, "field applies to uploaded files, not to pasted text")
    try:
        staged = stage_corpus(
            source, fmt=fmt, name=filename, field=field, limits=limits, spool_dir=store.tmp_dir
        )
    except HeadscopeError as exc:
        raise HTTPException(422, str(exc)) from None
    finally:
        if upload is not None:
            upload.unlink(missing_ok=True)
    try:
        existing = store.add_corpus_owner(staged.id, client.owner)
        if existing is not None:
            return _public(existing)
        quota.check_upload(
            store, settings, owner=client.owner, size=staged.stored_bytes, filename=filename
        )
        meta = {
            "id": staged.id,
            "name": (name or filename)[:200],
            "n_texts": staged.n_texts,
            "size": staged.size,
            "format": fmt,
            "field": (field or "text") if fmt != "txt" else None,
            "uploaded_at": time.time(),
            "owners": [client.owner],
            "preview": staged.preview,
        }
        if not store.put_corpus_chunks(
            staged.id,
            staged.chunks(),
            n_texts=staged.n_texts,
            size=staged.size,
            meta=meta,
            owner=client.owner,
        ):
            meta = (
                store.add_corpus_owner(staged.id, client.owner) or meta
            )  # the same texts, stored just now
        return _public(meta)
    finally:
        staged.discard()


def _receive(file: UploadFile, *, store: Store, filename: str, limit: int) -> Path:
    """The upload copied to a private file under the store's tmp dir, a block at a time; 413 over ``limit``."""
    fd, tmp = tempfile.mkstemp(prefix="corpus-upload-", dir=store.tmp_dir)
    path = Path(tmp)
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            while block := file.file.read(2**20):
                size += len(block)
                if size > limit:
                    raise HTTPException(
                        413, f"{filename} is larger than the {limit:,}-byte limit for a corpus"
                    )
                out.write(block)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


@router.get("/api/corpora")
def list_corpora(store: StoreDep, client: ClientDep) -> dict:
    """This client's corpora (no one else's) and the shipped ones (ids ``builtin-...``)."""
    mine = [
        _public(m)
        for m in store.list_corpora()
        if client.owner in m.get("owners", []) and m.get("kind") != TASK_SET
    ]  # task sets are listed by /api/task-sets
    return {"corpora": mine, "shipped": shipped_list()}


@router.get("/api/corpora/{corpus_id}", responses=error_responses(404))
def get_corpus(corpus_id: str, store: StoreDep) -> dict:
    if corpus_id.startswith("builtin-"):
        found = next((c for c in shipped_list() if c["id"] == corpus_id), None)
        if found is None:
            raise not_found("corpus", corpus_id)
        return found
    meta = store.corpus(corpus_id)
    if meta is None or meta.get("kind") == TASK_SET:  # a task set is read at /api/task-sets/{id}
        raise not_found("corpus", corpus_id)
    return _public(meta)


def check_corpus(corpus: str, store: Store) -> None:
    """A shipped corpus that exists, or a stored one (its expiry clock restarts); 404 otherwise."""
    if corpus.startswith("builtin-"):
        if shipped_corpus(corpus) is None:
            raise HTTPException(404, f"no shipped corpus {corpus!r}")
    elif (meta := store.corpus(corpus)) is None:
        raise HTTPException(404, f"no corpus with id {corpus!r}; upload it first")
    elif meta.get("kind") == TASK_SET:
        raise HTTPException(422, f"{corpus} is a task set (circuits on a set), not a corpus")
    else:
        store.touch_corpus(corpus)


def check_corpus_job(req: CorpusRequest | JointMapRequest, queue: JobQueue, store: Store) -> None:
    """The model (and a joint map's head, in the model's range) and the corpus of a corpus job."""
    head = (req.layer, req.head) if isinstance(req, JointMapRequest) else (None, None)
    check_model(req.model, layer=head[0], head=head[1])
    check_corpus(req.corpus, store)


job_routes(
    router,
    path="/api/corpus-analyses",
    kind="corpus",
    request_model=CorpusRequest,
    check=check_corpus_job,
    what="corpus analysis",
    names=("submit_corpus", "get_corpus_analysis", "cancel_corpus_analysis"),
    docs=(
        """Queue the statistics of every head over a corpus; identical requests share one job.""",
        """Status, progress (texts/s), the statistics so far while running, the result when finished.""",
        """Cancel a queued or running corpus analysis (a finished one is left as it is).""",
    ),
)
job_routes(
    router,
    path="/api/corpus-joint",
    kind="corpus-joint",
    request_model=JointMapRequest,
    check=check_corpus_job,
    what="joint map",
    names=("submit_joint", "get_joint", "cancel_joint"),
    docs=("""Queue one head's joint query–key map over a corpus (docs/corpus.md).""", None, None),
)
