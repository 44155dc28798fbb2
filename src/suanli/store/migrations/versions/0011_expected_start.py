"""rentals.expected_start_at: the reserved start of the rental at the head of the backfill queue

Under `SUANLI_QUEUE=backfill` the leader works out when the blocked head can start (the rentals ahead of it
ending at their declared durations) and records it here, so tenants can read it; cleared once it leaves
`pending` or another rental becomes the head.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rentals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expected_start_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rentals", schema=None) as batch_op:
        batch_op.drop_column("expected_start_at")
