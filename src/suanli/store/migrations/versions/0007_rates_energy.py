"""spot rates that follow the pool (rental_rates) and measured energy per run (rental_runs.energy_j)

`rental_rates` holds a rental's rate changes: from `from_at` on it pays `rate_micros_per_hour` (a spot rental
pays its pool's current spot price, capped at its bid). `rental_runs.energy_j` and `measured_s` accumulate the
GPU power the agent reports in heartbeats, attributed to the run, and the seconds the samples cover.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rental_rates",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("rental_id", sa.String(length=40), sa.ForeignKey("rentals.id"), nullable=False),
        sa.Column("from_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rate_micros_per_hour", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("rental_id", "from_at", name="uq_rental_rates_rental_from"),
    )
    op.create_index("ix_rental_rates_rental_id", "rental_rates", ["rental_id"])
    with op.batch_alter_table("rental_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("energy_j", sa.Float(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("measured_s", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("rental_runs", schema=None) as batch_op:
        batch_op.drop_column("measured_s")
        batch_op.drop_column("energy_j")
    op.drop_index("ix_rental_rates_rental_id", table_name="rental_rates")
    op.drop_table("rental_rates")
