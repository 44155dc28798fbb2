"""agent_nodes.runs_images: whether the node's agent runs container images (its executor), as its heartbeats
say; null for an agent that has not said (older agents). The leader keeps image rentals off nodes whose agent
said no: there they could only fail, and be billed the minimum for it.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_nodes") as batch:
        batch.add_column(sa.Column("runs_images", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_nodes") as batch:
        batch.drop_column("runs_images")
