"""rentals.uncapped_limit_at: an elastic rental whose time limit a shrink could not stretch past a start
planned on its nodes: where its limit would be without that cap (the work it has left), so a growth before
then gives the work back; null for every other rental.

Revision ID: 0045
Revises: 0044
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0045"
down_revision = "0044"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("rentals", sa.Column("uncapped_limit_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rentals") as batch:
        batch.drop_column("uncapped_limit_at")
