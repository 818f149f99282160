"""The store's tables (SQLAlchemy Core). Changing them needs a migration in ``migrations/versions``.

Times are Unix seconds (float). ``owner`` and ``expires_at`` are for quotas and expiry: NULL means
"nobody in particular" and "never" (a shared result is kept while a share references it).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

# constraint names fixed, so migrations can refer to them on every database
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

results = Table(
    "results",
    metadata,
    Column("id", String(64), primary_key=True),  # the request hash (= job id)
    Column("kind", String(32), nullable=False),  # analysis | pe | ...
    Column("request", Text, nullable=False),  # the normalised request, JSON
    Column("body", LargeBinary, nullable=False),  # the result JSON, compressed (``encoding``)
    Column("encoding", String(16), nullable=False, server_default="zlib"),
    Column("size", BigInteger, nullable=False),  # bytes of the uncompressed JSON
    Column("owner", String(128), nullable=True, index=True),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=True, index=True),
    Column("used_at", Float, nullable=True),  # last read through a share or touch; NULL: created_at
)

result_parts = Table(
    "result_parts",
    metadata,
    # a finished result's large sections, each compressed apart (workers/store/sections.py); no
    # foreign key: the store deletes a result's parts with it
    Column("result_id", String(64), primary_key=True),
    Column("name", String(160), primary_key=True),  # the result's key, or a layer part's (``x@L3``)
    Column("role", String(16), nullable=False),  # section | grid | layer
    Column("seq", Integer, nullable=False),  # order among the result's keys, or the grid's layers
    Column("data", LargeBinary, nullable=False),  # its JSON, zlib-compressed
    Column("spans", Text, nullable=True),  # a layer part: where its per-layer values lie, JSON
    Column("size", BigInteger, nullable=False),  # bytes of its uncompressed JSON
)

shares = Table(
    "shares",
    metadata,
    Column("id", String(64), primary_key=True),  # 192 random bits, URL-safe base64
    Column("kind", String(32), nullable=False),
    Column("target", String(64), nullable=False, index=True),  # a results.id (may have expired)
    Column("view", Text, nullable=False),  # JSON
    Column("owner", String(128), nullable=True, index=True),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=True),
)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("id", String(64), primary_key=True),  # ck- + the first 32 hex digits of the SHA-256
    Column("filename", String(255), nullable=False),  # display only
    Column("ext", String(16), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("state", String(16), nullable=False),  # staged (being inspected) | ready
    Column("meta", Text, nullable=True),  # JSON: candidates, default, ... (set when ready)
    Column(
        "blob_path", String(512), nullable=True
    ),  # file name in HEADSCOPE_BLOB_DIR; NULL: chunks
    Column("owner", String(128), nullable=True, index=True),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=True),
    Column("used_at", Float, nullable=True),  # last use (analysis, new owner); NULL: created_at
)

checkpoint_chunks = Table(
    "checkpoint_chunks",
    metadata,
    Column(
        "checkpoint_id",
        String(64),
        ForeignKey("checkpoints.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("seq", Integer, primary_key=True),
    Column("data", LargeBinary, nullable=False),
)

fingerprints = Table(
    "fingerprints",
    metadata,
    Column("id", String(64), primary_key=True),  # the request hash: one row per distinct request
    Column("kind", String(32), nullable=False),
    Column("request", Text, nullable=False),  # JSON
    Column("owner", String(128), nullable=True, index=True),
    Column("created_at", Float, nullable=False),
    Column("submissions", Integer, nullable=False, server_default="1"),  # times it was enqueued
    Column("expires_at", Float, nullable=True),
)

corpora = Table(
    "corpora",
    metadata,
    Column(
        "id", String(64), primary_key=True
    ),  # cp- + the first 32 hex digits of the SHA-256 of the texts
    Column("name", String(255), nullable=False),  # display only
    Column("n_texts", Integer, nullable=False),
    Column("size", BigInteger, nullable=False),  # bytes of the uncompressed JSON list of texts
    Column("meta", Text, nullable=False),  # JSON: id, name, n_texts, format, field, owners, ...
    Column("owner", String(128), nullable=True, index=True),  # the first uploader
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=True),
    Column(
        "used_at", Float, nullable=True
    ),  # last use (an analysis, a new owner); NULL: created_at
)

corpus_chunks = Table(
    "corpus_chunks",
    metadata,
    # no foreign key: the store deletes a corpus' chunks with it (and migration 0004 could then drop
    # corpora.body on SQLite, whose table rebuild would otherwise cascade into this table)
    Column("corpus_id", String(64), primary_key=True),
    Column("first_text", Integer, primary_key=True),  # index of its first text in the corpus
    Column("n_texts", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),  # its texts as a JSON list, zlib-compressed
)
