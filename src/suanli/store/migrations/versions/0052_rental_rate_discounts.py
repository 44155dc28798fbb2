"""rental_rates.discounts: the plan discounts (label, micros per hour) of the quote that priced each rate
row, so an invoice names, per rate segment, the plan (or none) in force then, not the rental's latest

Rows written before this revision keep NULL: an invoice shows the rental's current quote's discounts for
them, as it did before.

Revision ID: 0052
Revises: 0051
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0052"
down_revision = "0051"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rental_rates", schema=None) as batch_op:
        batch_op.add_column(sa.Column("discounts", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rental_rates", schema=None) as batch_op:
        batch_op.drop_column("discounts")
