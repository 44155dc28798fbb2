"""agent_nodes.mig_layouts: the MIG instances each node's host has, as its agent's heartbeats report them
({"<GPU index>": [[start slot, profile, busy], ...]}; busy: in use by processes no rental was given); null
for an agent that has not said (older agents, hosts without MIG). `mig_layouts_revision` is bumped on each
change, so the leader reads them all only when the revisions' sum moves. The leader lays out a reported GPU
as its host has it, in place of the fleet's declared layout, so MIG slices go to instances that exist (made
by hand or by an earlier rental) before new ones, and never to one something else uses.

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
        batch.add_column(sa.Column("mig_layouts_revision", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("agent_nodes") as batch:
        batch.drop_column("mig_layouts_revision")
        batch.drop_column("mig_layouts")
