"""rental_execs: one-off commands run inside a running rental on one node (`suanli exec`), with their exit
code and the end of their output.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rental_execs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("rental_id", sa.String(40), sa.ForeignKey("rentals.id"), nullable=False, index=True),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("command", sa.JSON(), nullable=False),
        sa.Column("timeout_s", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("output", sa.Text(), nullable=False),
        sa.Column("output_truncated", sa.Boolean(), nullable=False),
        sa.Column("message", sa.String(500), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_rental_execs_node_state", "rental_execs", ["node", "state"])


def downgrade() -> None:
    op.drop_index("ix_rental_execs_node_state", table_name="rental_execs")
    op.drop_table("rental_execs")
