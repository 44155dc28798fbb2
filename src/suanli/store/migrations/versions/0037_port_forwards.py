"""rental_execs.port: a port forward (`suanli port-forward RENTAL 8888`), attached as a command is, whose
frames carry TCP connections the node's agent opens to that port of the rental; it has no command.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rental_execs") as batch:
        batch.add_column(sa.Column("port", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rental_execs") as batch:
        batch.drop_column("port")
