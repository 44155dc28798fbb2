"""tenant_limits.budget_daily_micros, budget_monthly_micros: a tenant's own spend budget (null: none), set by
the tenant, held by the scheduler like the operator's caps.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenant_limits") as batch:
        batch.add_column(sa.Column("budget_daily_micros", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("budget_monthly_micros", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenant_limits") as batch:
        batch.drop_column("budget_monthly_micros")
        batch.drop_column("budget_daily_micros")
