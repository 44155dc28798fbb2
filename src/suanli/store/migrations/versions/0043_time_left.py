"""rentals.time_left_s: a rental that checkpoints, preempted and back in the queue, declares what is left of
its max duration (with a resumption's allowance) when placed again, and is stopped there; null for every
other rental (all of its max duration).

Revision ID: 0043
Revises: 0042
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0043"
down_revision = "0042"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("rentals", sa.Column("time_left_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rentals") as batch:
        batch.drop_column("time_left_s")
