"""agent_nodes.gpu_mismatch: why the GPUs the node's agent reports are not the ones the fleet declares (the
node is cordoned while it is set); null when they match, and for agents registered before.

Revision ID: 0047
Revises: 0046
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0047"
down_revision = "0046"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("agent_nodes", sa.Column("gpu_mismatch", sa.String(500), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_nodes") as batch:
        batch.drop_column("gpu_mismatch")
