"""``headscope migrate --import-files DIR``: copy a file store into the database.

The file store (before the database) kept, under its data dir::

    results/{id}.meta.json + {id}.result.json   (meta written last: a result without it never finished)
    shares/{share id}.json
    checkpoints/{ck-id}/blob.EXT + meta.json     (no meta: an upload never committed)

Import is idempotent — every row is inserted under its original id unless that id is present —
and loses nothing: files are only read; whatever cannot be imported is reported with the reason.
Ages are kept: a result expires ``result_ttl_s`` after its meta file's modification time.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from workers.core.ids import CHECKPOINT_EXTS, CHECKPOINT_ID, JOB_ID
from workers.core.jsonable import dumps
from workers.store.core import SHARE_ID, Store
from workers.store.schema import shares

logger = logging.getLogger(__name__)


def import_file_store(store: Store, source: Path) -> dict[str, Any]:
    """Import results, shares and checkpoints under ``source``; counts and problems."""
    source = Path(source)
    if not source.is_dir():
        raise FileNotFoundError(f"{source} is not a directory")
    report: dict[str, Any] = {
        k: {"imported": 0, "present": 0} for k in ("results", "shares", "checkpoints")
    }
    problems: list[str] = []
    for meta_path in sorted((source / "results").glob("*.meta.json")):
        job_id = meta_path.name.split(".", 1)[0]
        try:
            meta = json.loads(meta_path.read_text())
            raw = (source / "results" / f"{job_id}.result.json").read_text()
            json.loads(raw)  # a valid JSON document, not a torn file
            if not JOB_ID.fullmatch(job_id):
                raise ValueError("not a result id")
        except (OSError, ValueError) as exc:
            problems.append(f"result {meta_path.name}: {exc}")
            continue
        expires = meta_path.stat().st_mtime + store.settings.result_ttl_s
        done = store.write_result(
            job_id,
            kind=str(meta.get("kind", "analysis")),
            request=meta.get("request") or {},
            result_raw=raw,
            expires_at=expires,
        )
        report["results"]["imported" if done else "present"] += 1
    for path in sorted((source / "shares").glob("*.json")):
        try:
            share = json.loads(path.read_text())
            if not SHARE_ID.fullmatch(str(share["id"])) or not JOB_ID.fullmatch(
                str(share["target"])
            ):
                raise ValueError("malformed share")
            row = {
                "id": share["id"],
                "kind": str(share["kind"]),
                "target": share["target"],
                "view": dumps(share.get("view") or {}),
                "created_at": float(share.get("created_at") or time.time()),
            }
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"share {path.name}: {exc}")
            continue
        with store._conn(write=True) as conn:
            done = store._insert_ignore(conn, shares, row)
        report["shares"]["imported" if done else "present"] += 1
    for meta_path in sorted((source / "checkpoints").glob("ck-*/meta.json")):
        ck_dir = meta_path.parent
        try:
            meta = json.loads(meta_path.read_text())
            blobs = [p for p in sorted(ck_dir.glob("blob.*")) if p.suffix in CHECKPOINT_EXTS]
            if not CHECKPOINT_ID.fullmatch(ck_dir.name) or not blobs:
                raise ValueError("no blob file or a malformed id")
        except (OSError, ValueError) as exc:
            problems.append(f"checkpoint {ck_dir.name}: {exc}")
            continue
        if store.checkpoint(ck_dir.name) is not None:
            report["checkpoints"]["present"] += 1
            continue
        copy = store.new_upload_path()
        shutil.copyfile(blobs[0], copy)  # staging consumes its input: the source stays untouched
        store.stage_checkpoint(
            ck_dir.name, copy, ext=blobs[0].suffix, filename=meta.get("filename")
        )
        store.commit_checkpoint(ck_dir.name, meta)
        report["checkpoints"]["imported"] += 1
    report["problems"] = problems
    for line in problems:
        logger.warning("import: %s", line)
    return report
