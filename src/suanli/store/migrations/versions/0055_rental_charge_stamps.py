"""rental_charge_stamps: when the meter last changed a live rental's charge as the API shows it, a narrow
row per rental, indexed with the tenant and alone, so `GET /v1/rentals?updated_after=` finds charged rentals
without the meter rewriting `rentals`' wide row and its twelve indexes (the first pass over 100,000 rentals
spent ~8 s of ~31 s stamping them). No foreign key to `rentals` (its check was 60% of an insert's cost): a
stamp is derived, only the meter writes it, for a rental it has just read, and rentals are never deleted.
Nothing to copy: the charges stamped before it are in `rentals.updated_at`.

Revision ID: 0055
Revises: 0054
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0055"
down_revision = "0054"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rental_charge_stamps",
        sa.Column("rental_id", sa.String(40), primary_key=True),
        sa.Column("tenant_id", sa.String(40), nullable=False),
        sa.Column("stamped_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_rental_charge_stamps_tenant", "rental_charge_stamps", ["tenant_id", "stamped_at"])
    op.create_index("ix_rental_charge_stamps_stamped", "rental_charge_stamps", ["stamped_at"])


def downgrade() -> None:
    op.drop_index("ix_rental_charge_stamps_stamped", table_name="rental_charge_stamps")
    op.drop_index("ix_rental_charge_stamps_tenant", table_name="rental_charge_stamps")
    op.drop_table("rental_charge_stamps")
