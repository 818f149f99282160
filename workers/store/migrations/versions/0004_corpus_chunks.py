"""Corpora in chunks (docs/scaling.md, "Streamed corpora"): a corpus' texts move from one compressed
body into rows of up to 1,000 texts each (``corpus_chunks``), so a corpus of a million texts is
written and read a chunk at a time (``Store.iter_corpus_texts``), never whole. Existing corpora are
moved over; ``corpora.body`` goes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

import json
import zlib

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

CHUNK_TEXTS = 1000  # as workers.store.corpora.CHUNK_TEXTS when written (a migration is frozen)

_corpora = sa.table("corpora", sa.column("id", sa.String), sa.column("body", sa.LargeBinary))
_chunks = sa.table(
    "corpus_chunks",
    sa.column("corpus_id", sa.String),
    sa.column("first_text", sa.Integer),
    sa.column("n_texts", sa.Integer),
    sa.column("data", sa.LargeBinary),
)


def upgrade() -> None:
    op.create_table(
        "corpus_chunks",
        sa.Column("corpus_id", sa.String(64), nullable=False),
        sa.Column("first_text", sa.Integer, nullable=False),
        sa.Column("n_texts", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("corpus_id", "first_text", name=op.f("pk_corpus_chunks")),
    )
    bind = op.get_bind()
    ids = list(bind.execute(sa.select(_corpora.c.id)).scalars())
    for cid in ids:  # one corpus in memory at a time (before this revision, at most 20,000 texts)
        body = bind.execute(sa.select(_corpora.c.body).where(_corpora.c.id == cid)).scalar_one()
        texts = json.loads(zlib.decompress(body))
        for first in range(0, len(texts), CHUNK_TEXTS):
            part = texts[first : first + CHUNK_TEXTS]
            data = zlib.compress(
                json.dumps(part, ensure_ascii=False, separators=(",", ":")).encode(), 6
            )
            bind.execute(
                _chunks.insert().values(
                    corpus_id=cid, first_text=first, n_texts=len(part), data=data
                )
            )
    with op.batch_alter_table("corpora") as batch:
        batch.drop_column("body")


def downgrade() -> None:
    with op.batch_alter_table("corpora") as batch:
        batch.add_column(sa.Column("body", sa.LargeBinary, nullable=True))
    bind = op.get_bind()
    for cid in list(bind.execute(sa.select(_corpora.c.id)).scalars()):
        texts: list[str] = []
        rows = bind.execute(
            sa.select(_chunks.c.data)
            .where(_chunks.c.corpus_id == cid)
            .order_by(_chunks.c.first_text)
        ).scalars()
        for data in rows:
            texts.extend(json.loads(zlib.decompress(data)))
        body = zlib.compress(
            json.dumps(texts, ensure_ascii=False, separators=(",", ":")).encode(), 6
        )
        bind.execute(_corpora.update().where(_corpora.c.id == cid).values(body=body))
    op.drop_table("corpus_chunks")
