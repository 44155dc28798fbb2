"""agent_nodes.mig_layouts: the MIG instances each node's host has, as its agent's heartbeats report them
({"<GPU index>": [[start slot, profile], ...]}); null for an agent that has not said (older agents, hosts
without MIG). The leader lays out a reported GPU as its host has it, in place of the fleet's declared
layout, so MIG slices go to instances that exist (made by hand or by an earlier rental) before new ones.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_nodes") as batch:
        batch.add_column(sa.Column("mig_layouts", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_nodes") as batch:
        batch.drop_column("mig_layouts")
