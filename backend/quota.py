"""Storage quotas and expiry for uploads and results (the policy; the Store only keeps books).

- Each client's uploads may take ``upload_quota_bytes`` in all; an upload past it gets 413.
- Results and uploads together may take ``storage_quota_bytes``; when they would pass it, the
  least recently used ones that no share needs are deleted first; if that is not enough the upload
  gets 413.
- Unshared results expire after ``result_ttl_s`` (``Store.sweep``), unshared uploads unused for
  ``upload_ttl_s``. A share keeps what it needs: its result, and the checkpoints, corpora and
  task sets that result's request names.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from backend.config import Settings
from backend.store import Store
from workers.core import registry
from workers.core.errors import TooLargeError

logger = logging.getLogger(__name__)


def _checkpoint_ids(request: dict[str, Any] | None) -> set[str]:
    if not request:
        return set()
    refs = list(request.get("checkpoints") or [])
    ref = (request.get("reference") or {}).get("checkpoint")
    if ref:
        refs.append(ref)
    ids = {r["id"] for r in refs if isinstance(r, dict) and isinstance(r.get("id"), str)}
    if isinstance(request.get("corpus"), str):  # a corpus analysis' corpus
        ids.add(request["corpus"])
    probe = (request.get("options") or {}).get("corpus")  # the atlas' corpus probe (docs/atlas.md)
    if isinstance(probe, str) and registry.reads_corpus(request.get("analyses") or ()):
        ids.add(probe)
    text = request.get("text")
    if "circuits-set" in (request.get("analyses") or ()) and isinstance(text, str):
        ids.add(text.strip())  # a stored task set's id (docs/circuits.md), or a set's own text
    return ids


def protected(store: Store) -> set[str]:
    """Ids no quota or expiry may delete: shared results and the checkpoints they were made from."""
    keep = set(store.shared_targets())
    for target in list(keep):
        keep |= _checkpoint_ids(store.result_request(target))
    return keep


def _delete(store: Store, item: dict[str, Any]) -> None:
    if item["kind"] == "result":
        store.delete_result(item["id"])
    elif item["kind"] == "corpus":
        store.delete_corpus(item["id"])
    else:
        store.delete_checkpoint(item["id"])


def enforce(
    store: Store, settings: Settings, *, need: int = 0, now: float | None = None
) -> list[str]:
    """Expire unshared uploads past ``upload_ttl_s``; then, while results + uploads + ``need``
    exceed the storage quota, delete the least recently used unprotected items. Returns their ids."""
    now = time.time() if now is None else now
    keep = protected(store)
    items = store.stored_items()
    removed: list[str] = []
    for item in items:
        if (
            item["kind"] in ("checkpoint", "corpus")
            and item["id"] not in keep
            and now - item["used_at"] > settings.upload_ttl_s
        ):
            _delete(store, item)
            removed.append(item["id"])
    items = [i for i in items if i["id"] not in removed]
    total = sum(i["bytes"] for i in items)
    if settings.storage_quota_bytes and total + need > settings.storage_quota_bytes:
        for item in sorted((i for i in items if i["id"] not in keep), key=lambda i: i["used_at"]):
            if total + need <= settings.storage_quota_bytes:
                break
            _delete(store, item)
            removed.append(item["id"])
            total -= item["bytes"]
    if removed:
        logger.info("storage: removed %d unshared results/uploads (expiry or quota)", len(removed))
    return removed


def sweep(store: Store, settings: Settings) -> list[str]:
    """The periodic clean-up: expired results (``Store.sweep``), then :func:`enforce`."""
    return store.sweep() + enforce(store, settings)


def check_upload(store: Store, settings: Settings, *, owner: str, size: int, filename: str) -> None:
    """413 unless ``size`` more bytes fit the client's upload quota and the storage quota."""
    items = store.stored_items()
    mine = sum(
        i["bytes"]
        for i in items
        if i["kind"] in ("checkpoint", "corpus") and owner in i.get("owners", [])
    )
    quota = settings.upload_quota_bytes
    if quota and mine + size > quota:
        raise TooLargeError(
            f"{filename} ({size:,} bytes) does not fit your upload quota: your uploads take {mine:,} "
            f"of {quota:,} bytes; unused uploads expire after {settings.upload_ttl_s // 86400} day(s)",
        )
    total = sum(i["bytes"] for i in items)
    limit = settings.storage_quota_bytes
    if limit and total + size > limit:
        enforce(store, settings, need=size)
        total = sum(i["bytes"] for i in store.stored_items())
        if total + size > limit:
            raise TooLargeError(
                f"the server's storage is full ({total:,} of {limit:,} bytes are kept for shares); "
                "try again later or ask the operator",
            )
