"""gpu_minutes: each GPU's heartbeat readings folded by minute (mean utilization and power, most memory
used), kept a week: a rental's GPU history (`GET /v1/rentals/{id}/gpus/history`, `suanli gpus`).

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0038"
down_revision = "0037"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_minutes",
        sa.Column("node", sa.String(200), primary_key=True),
        sa.Column("gpu_index", sa.Integer(), primary_key=True),
        sa.Column("minute", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("utilization_sum", sa.Float(), nullable=False),
        sa.Column("utilization_count", sa.Integer(), nullable=False),
        sa.Column("memory_max_mib", sa.Integer(), nullable=True),
        sa.Column("power_sum_w", sa.Float(), nullable=False),
        sa.Column("power_count", sa.Integer(), nullable=False),
    )
    op.create_index("ix_gpu_minutes_node_minute", "gpu_minutes", ["node", "minute"])


def downgrade() -> None:
    op.drop_index("ix_gpu_minutes_node_minute", table_name="gpu_minutes")
    op.drop_table("gpu_minutes")
