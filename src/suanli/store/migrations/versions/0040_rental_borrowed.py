"""rentals.borrowed: a rental that checkpoints, placed on GPUs the backfill queue lent it (the head's drain,
or what the long-job budget held back); the queue takes them back with notice when it needs them.

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0040"
down_revision = "0039"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN (SQLite takes NOT NULL with a default): a batch would copy the table, which the
    # rows other tables point at forbid
    op.add_column("rentals", sa.Column("borrowed", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("rentals") as batch:
        batch.drop_column("borrowed")
