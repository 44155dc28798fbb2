"""contracts.coverage_stage: how far the meter loop's coverage job has followed a contract's window (0: not
yet, 1: its start, 2: its end), so that each pass reads only the contracts whose start or end is still to
follow, not every contract ever signed

Contracts already open when this revision runs are marked started (their holders' rentals placed before the
window keep their rates: re-pricing the past would not refund what the meter has charged); contracts already
ended stay at 1, so the first pass follows their end once, as every pass did before.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-30
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("contracts", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("coverage_stage", sa.SmallInteger(), nullable=False, server_default="0")
        )
    contracts = sa.table(
        "contracts", sa.column("starts_at", sa.DateTime(timezone=True)), sa.column("coverage_stage")
    )
    op.execute(contracts.update().where(contracts.c.starts_at <= datetime.now(UTC)).values(coverage_stage=1))
    op.create_index(
        "ix_contracts_coverage_to_follow",
        "contracts",
        ["coverage_stage"],
        postgresql_where=sa.text("coverage_stage < 2"),
        sqlite_where=sa.text("coverage_stage < 2"),
    )


def downgrade() -> None:
    op.drop_index("ix_contracts_coverage_to_follow", table_name="contracts")
    with op.batch_alter_table("contracts", schema=None) as batch_op:
        batch_op.drop_column("coverage_stage")
