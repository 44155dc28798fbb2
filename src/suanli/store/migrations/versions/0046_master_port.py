"""rentals.master_port: the rendezvous port (`SUANLI_MASTER_PORT`) the leader chose when it placed the rental,
one that no other live rental on its nodes held; null for rentals placed before (their agents use the port
their id points at, as before).

Revision ID: 0046
Revises: 0045
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0046"
down_revision = "0045"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("rentals", sa.Column("master_port", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rentals") as batch:
        batch.drop_column("master_port")
