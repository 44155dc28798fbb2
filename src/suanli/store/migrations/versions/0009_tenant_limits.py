"""tenant limits: GPU quotas and spend caps the server's backfill queue enforces

`tenant_limits` holds per tenant a JSON map of GPU quotas (a catalogue model name, or `*` for every GPU, to
the most GPUs held at once) and optional daily and monthly spend caps in micros
(`PUT /v1/tenants/{id}/limits`).

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
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tenant_limits")
