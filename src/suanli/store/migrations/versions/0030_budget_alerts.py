"""budget_alerts (each alert a tenant got as its spend neared a limit, once per period) and
tenant_limits.budget_stops_running (stop its running rentals once its own budget is spent).

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenant_limits") as batch:
        batch.add_column(
            sa.Column("budget_stops_running", sa.Boolean(), nullable=False, server_default=sa.text("false"))
        )
    op.create_table(
        "budget_alerts",
        sa.Column("tenant_id", sa.String(40), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("limit_name", sa.String(40), primary_key=True),
        sa.Column("period", sa.String(10), primary_key=True),
        sa.Column("threshold_pct", sa.SmallInteger(), primary_key=True),
        sa.Column("spent_micros", sa.BigInteger(), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("budget_alerts")
    with op.batch_alter_table("tenant_limits") as batch:
        batch.drop_column("budget_stops_running")
