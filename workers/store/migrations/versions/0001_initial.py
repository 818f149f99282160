"""The initial schema: results, shares, checkpoints (+ their bytes in chunks), request fingerprints.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _owner_expiry() -> list[sa.Column]:
    return [
        sa.Column("owner", sa.String(128), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=True),
    ]


def upgrade() -> None:
    op.create_table(
        "results",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("request", sa.Text, nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("encoding", sa.String(16), nullable=False, server_default="zlib"),
        sa.Column("size", sa.BigInteger, nullable=False),
        *_owner_expiry(),
        sa.PrimaryKeyConstraint("id", name="pk_results"),
    )
    op.create_index("ix_results_owner", "results", ["owner"])
    op.create_index("ix_results_expires_at", "results", ["expires_at"])
    op.create_table(
        "shares",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("view", sa.Text, nullable=False),
        *_owner_expiry(),
        sa.PrimaryKeyConstraint("id", name="pk_shares"),
    )
    op.create_index("ix_shares_target", "shares", ["target"])
    op.create_index("ix_shares_owner", "shares", ["owner"])
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("ext", sa.String(16), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("meta", sa.Text, nullable=True),
        sa.Column("blob_path", sa.String(512), nullable=True),
        *_owner_expiry(),
        sa.PrimaryKeyConstraint("id", name="pk_checkpoints"),
    )
    op.create_index("ix_checkpoints_owner", "checkpoints", ["owner"])
    op.create_table(
        "checkpoint_chunks",
        sa.Column("checkpoint_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            ondelete="CASCADE",
            name="fk_checkpoint_chunks_checkpoint_id_checkpoints",
        ),
        sa.PrimaryKeyConstraint("checkpoint_id", "seq", name="pk_checkpoint_chunks"),
    )
    op.create_table(
        "fingerprints",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("request", sa.Text, nullable=False),
        sa.Column("submissions", sa.Integer, nullable=False, server_default="1"),
        *_owner_expiry(),
        sa.PrimaryKeyConstraint("id", name="pk_fingerprints"),
    )
    op.create_index("ix_fingerprints_owner", "fingerprints", ["owner"])


def downgrade() -> None:
    for table in ("fingerprints", "checkpoint_chunks", "checkpoints", "shares", "results"):
        op.drop_table(table)
