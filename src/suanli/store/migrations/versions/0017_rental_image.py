"""rentals.image: the container image a rental's workload runs in (a catalogue key or an image reference)

Its own column rather than a key of the `spec` JSON: the code before this revision builds a spec from every
key of that JSON and would fail on one it does not know, so after a downgrade it still reads every rental (the
images are dropped with the column). Rentals created before this revision have none.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rentals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("image", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rentals", schema=None) as batch_op:
        batch_op.drop_column("image")
