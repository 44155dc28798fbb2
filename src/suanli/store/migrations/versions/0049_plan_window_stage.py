"""tenant_plans.window_stage: how far the meter loop has followed a plan's window (0: not yet, 1: its start,
2: its end): from its start the tenant's running rentals get its discount, from its end they lose it

Plans already started when this revision runs are marked started (re-pricing the past would not refund what
the meter has charged); plans already ended are marked ended. Plans still to start stay at 0: their
membership fees were posted when they were made, and the posting at their start finds that fee by its key
(`membership:{plan}`) and posts nothing more.

Revision ID: 0049
Revises: 0048
Create Date: 2026-12-07
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0049"
down_revision = "0048"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenant_plans", schema=None) as batch_op:
        batch_op.add_column(sa.Column("window_stage", sa.SmallInteger(), nullable=False, server_default="0"))
    plans = sa.table(
        "tenant_plans",
        sa.column("starts_at", sa.DateTime(timezone=True)),
        sa.column("ends_at", sa.DateTime(timezone=True)),
        sa.column("window_stage"),
    )
    now = datetime.now(UTC)
    op.execute(plans.update().where(plans.c.starts_at <= now).values(window_stage=1))
    op.execute(plans.update().where(plans.c.ends_at <= now).values(window_stage=2))
    op.create_index(
        "ix_tenant_plans_window_to_follow",
        "tenant_plans",
        ["window_stage"],
        postgresql_where=sa.text("window_stage < 2"),
        sqlite_where=sa.text("window_stage < 2"),
    )


def downgrade() -> None:
    op.drop_index("ix_tenant_plans_window_to_follow", table_name="tenant_plans")
    with op.batch_alter_table("tenant_plans", schema=None) as batch_op:
        batch_op.drop_column("window_stage")
