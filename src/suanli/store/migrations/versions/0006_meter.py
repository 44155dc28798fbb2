"""meter: rentals.billing_closed_at, the "fully charged" marker, and the index of rentals still to meter

The meter sets `billing_closed_at` (in the same database transaction as the charge it posts) on a rental that
has ended and whose final charge is posted; from then on the meter does not read it again. The partial index
holds only the rentals the meter still reads (placed, not closed), in id order: the meter pages through it.
`ix_allocations_rental_id_id` finds a rental's first allocation in one probe (without it, and without
statistics, PostgreSQL may walk the allocations' primary key for each rental).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_OPEN = "placed_at IS NOT NULL AND billing_closed_at IS NULL"


def upgrade() -> None:
    with op.batch_alter_table("rentals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("billing_closed_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_rentals_meter_open",
        "rentals",
        ["id"],
        postgresql_where=sa.text(_OPEN),
        sqlite_where=sa.text(_OPEN),
    )
    # a rental's first allocation (whose node's provider is paid) in one index probe
    op.create_index("ix_allocations_rental_id_id", "allocations", ["rental_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_allocations_rental_id_id", table_name="allocations")
    op.drop_index("ix_rentals_meter_open", table_name="rentals")
    with op.batch_alter_table("rentals", schema=None) as batch_op:
        batch_op.drop_column("billing_closed_at")
