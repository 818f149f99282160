"""Corpora for the corpus analysis (docs/corpus.md): texts stored like checkpoints, with owners and
expiry.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "corpora",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("n_texts", sa.Integer, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("meta", sa.Text, nullable=False),
        sa.Column("owner", sa.String(128), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=True),
        sa.Column("used_at", sa.Float, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_corpora")),
    )
    op.create_index(op.f("ix_corpora_owner"), "corpora", ["owner"])


def downgrade() -> None:
    op.drop_index(op.f("ix_corpora_owner"), table_name="corpora")
    op.drop_table("corpora")
