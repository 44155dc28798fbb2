"""rentals.pending_message: a pending rental's reason in words, with the figures as the leader last worked
them out ("quota 8 GPUs, 6 in use"); rewritten whenever its text changes, while the `pending` event is
written only when the reason does. Null for a rental not pending.

Revision ID: 0044
Revises: 0043
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0044"
down_revision = "0043"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("rentals", sa.Column("pending_message", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rentals") as batch:
        batch.drop_column("pending_message")
