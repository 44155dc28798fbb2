"""preemption with notice: rentals.placed_at, preempted_by, notice_deadline

Revision ID: 0003
Revises: 0002
Create Date: 2025-01-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rentals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("placed_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("preempted_by", sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column("notice_deadline", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(batch_op.f("ix_rentals_preempted_by"), ["preempted_by"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("rentals", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_rentals_preempted_by"))
        batch_op.drop_column("notice_deadline")
        batch_op.drop_column("preempted_by")
        batch_op.drop_column("placed_at")
