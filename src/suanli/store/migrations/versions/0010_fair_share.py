"""fair share usage: the backfill queue's decayed GPU-seconds per tenant, kept across a change of leader

The leader saves its `FairShare` (`fair_share_usage`: one row per tenant, all with the same `as_of`) every
minute or so; a process that becomes leader reads it back instead of starting every tenant at zero.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fair_share_usage",
        sa.Column("tenant_id", sa.String(length=40), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("usage_gpu_s", sa.Float(), nullable=False),
        sa.Column("as_of", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("fair_share_usage")
