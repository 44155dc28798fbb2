"""allocations.booked_at and released_at: when a rental took and gave back each node, so that the meter can
pay each provider for the GPU-seconds on its own nodes (a gang across providers, a re-placed rental, a
grown or shrunk one)

Rows booked before this revision keep both empty: the meter cannot tell when they were held, and pays a
rental with any such row to the provider of its first node, as before.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("booked_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("released_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_column("released_at")
        batch_op.drop_column("booked_at")
