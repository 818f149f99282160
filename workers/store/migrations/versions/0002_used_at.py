"""Last use of results and checkpoints, for the storage quota's least-recently-used order.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("results", sa.Column("used_at", sa.Float, nullable=True))
    op.add_column("checkpoints", sa.Column("used_at", sa.Float, nullable=True))


def downgrade() -> None:
    op.drop_column("checkpoints", "used_at")
    op.drop_column("results", "used_at")
