"""tenant limits: GPU quotas, spend caps and fair-share weights the server's scheduler applies

`tenant_limits` holds per tenant a JSON map of GPU quotas (a catalogue model name, or `*` for every GPU, to
the most GPUs held at once) and optional daily and monthly spend caps in micros
(`PUT /v1/tenants/{id}/limits`), and the tenant's fair-share weight (the backfill queue's order).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenant_limits",
        sa.Column("tenant_id", sa.String(length=40), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("gpu_quota", sa.JSON(), nullable=False),
        sa.Column("daily_cap_micros", sa.BigInteger(), nullable=True),
        sa.Column("monthly_cap_micros", sa.BigInteger(), nullable=True),
        sa.Column("fair_share_weight", sa.Float(), nullable=False, server_default="1"),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tenant_limits")
