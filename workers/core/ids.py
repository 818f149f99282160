"""The ids the service hands out, and the checkpoint files it takes (docs/api.md).

Plain patterns, shared by the backend (a malformed id is a 404 before any lookup), the store (it
keeps only well-formed ids) and the queue service::

    JOB_ID.fullmatch("0123456789abcdef0123456789abcdef")         # a request hash: a job's id
    CHECKPOINT_ID.fullmatch("ck-0123456789abcdef0123456789abcdef")  # an upload's content hash
"""

from __future__ import annotations

import re

JOB_ID = re.compile(r"[0-9a-f]{32}")  # a request hash
CHECKPOINT_ID = re.compile(r"ck-[0-9a-f]{32}")  # an upload's content hash
# a corpus: an upload's content hash (cp-) or a shipped one (builtin-...), docs/corpus.md
CORPUS_REF_PATTERN = r"^(cp-[0-9a-f]{32}|builtin-[a-z0-9-]{1,40})$"
CHECKPOINT_EXTS = (".safetensors", ".npy", ".npz", ".pt", ".pth", ".bin")
