"""rentals.last_busy_at: for a rental with `idle_stop_s`, the last heartbeat that read any of its GPUs busy
(null: none yet; its idle time counts from when it started running).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rentals") as batch:
        batch.add_column(sa.Column("last_busy_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rentals") as batch:
        batch.drop_column("last_busy_at")
