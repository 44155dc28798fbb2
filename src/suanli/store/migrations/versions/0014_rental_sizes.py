"""rental_sizes: a resized rental's size over time (nodes, GPUs per node), for its invoice's GPU-seconds and
energy

A row per applied resize, from its instant on; a rental's first resize also records the size it had from its
placement. A rental never resized has no rows: its size is its spec's. Money does not need it (the rate rows
of `rental_rates` follow every resize); GPU-seconds, energy and CO2 do.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rental_sizes",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("rental_id", sa.String(length=40), sa.ForeignKey("rentals.id"), nullable=False),
        sa.Column("from_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("gpus_per_node", sa.Float(), nullable=False),
        sa.UniqueConstraint("rental_id", "from_at", name="uq_rental_sizes_rental_from"),
    )
    op.create_index("ix_rental_sizes_rental_id", "rental_sizes", ["rental_id"])


def downgrade() -> None:
    op.drop_index("ix_rental_sizes_rental_id", table_name="rental_sizes")
    op.drop_table("rental_sizes")
