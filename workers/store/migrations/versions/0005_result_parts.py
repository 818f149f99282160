"""A finished result's large sections kept apart (docs/api.md, "Sections of a finished result"):
``result_parts`` holds them, each compressed on its own, so a page reads the few it draws. Results
stored before keep their one body (no parts) and read as before.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "result_parts",
        sa.Column("result_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(160), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("spans", sa.Text, nullable=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("result_id", "name", name=op.f("pk_result_parts")),
    )


def downgrade() -> None:
    # the parts go back into their results' bodies (whole, as before this revision)
    import json
    import zlib

    from workers.store.sections import Part, splice

    bind = op.get_bind()
    results = sa.table("results", sa.column("id", sa.String), sa.column("body", sa.LargeBinary))
    parts = sa.table(
        "result_parts",
        *(sa.column(c) for c in ("result_id", "name", "role", "seq", "data", "spans")),
    )
    ids = list(bind.execute(sa.select(parts.c.result_id).distinct()).scalars())
    for rid in ids:
        body = bind.execute(sa.select(results.c.body).where(results.c.id == rid)).scalar()
        rows = bind.execute(sa.select(parts).where(parts.c.result_id == rid)).all()
        if body is None:
            continue
        got = [
            Part(r.name, r.role, r.seq, zlib.decompress(r.data).decode(),
                 json.loads(r.spans) if r.spans else None)
            for r in rows
        ]  # fmt: skip
        whole = splice(zlib.decompress(body).decode(), got)
        bind.execute(
            results.update()
            .where(results.c.id == rid)
            .values(body=zlib.compress(whole.encode(), 1))
        )
    op.drop_table("result_parts")
