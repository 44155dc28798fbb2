"""rentals.notice_keeps: an elastic rental preempted in part (a trim) keeps this placement at its notice
deadline and runs on, rather than ending; null for every other notice.

Revision ID: 0042
Revises: 0041
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0042"
down_revision = "0041"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("rentals", sa.Column("notice_keeps", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rentals") as batch:
        batch.drop_column("notice_keeps")
