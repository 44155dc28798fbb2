"""rental_runs.restarts: the restarts a one-node rental's agent made by itself after failures (on-failure),
as it last reported them; a higher count in a report is a `restarted` event.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rental_runs") as batch:
        batch.add_column(sa.Column("restarts", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("rental_runs") as batch:
        batch.drop_column("restarts")
