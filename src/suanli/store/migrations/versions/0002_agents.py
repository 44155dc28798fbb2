"""agents: join tokens, agent nodes, rental runs, rental logs

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "join_tokens",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_by", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["created_by"], ["tenants.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_sha256"),
    )
    with op.batch_alter_table("join_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_join_tokens_node"), ["node"], unique=False)

    op.create_table(
        "agent_nodes",
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("key_sha256", sa.String(length=64), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("inventory", sa.JSON(), nullable=False),
        sa.Column("telemetry", sa.JSON(), nullable=False),
        sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("up", sa.Boolean(), nullable=False),
        sa.Column("cordoned_by_agent", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("node"),
        sa.UniqueConstraint("key_sha256"),
    )
    op.create_table(
        "rental_runs",
        sa.Column("rental_id", sa.String(length=40), nullable=False),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["rental_id"], ["rentals.id"]),
        sa.PrimaryKeyConstraint("rental_id", "node"),
    )
    op.create_table(
        "rental_logs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("rental_id", sa.String(length=40), nullable=False),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("node_offset", sa.BigInteger(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["rental_id"], ["rentals.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("rental_id", "node", "node_offset", name="uq_rental_logs_chunk"),
    )
    with op.batch_alter_table("rental_logs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_rental_logs_rental_id"), ["rental_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("rental_logs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_rental_logs_rental_id"))
    op.drop_table("rental_logs")
    op.drop_table("rental_runs")
    op.drop_table("agent_nodes")
    with op.batch_alter_table("join_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_join_tokens_node"))
    op.drop_table("join_tokens")
