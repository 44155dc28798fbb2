"""maintenance_windows: an operator's scheduled maintenance of a node over [starts_at, ends_at), with its
reason. The leader keeps the node out of placements inside the window and gives its rentals notice to end by
the start; contract admission counts its GPUs as down then.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "maintenance_windows",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_maintenance_windows_node", "maintenance_windows", ["node"])
    op.create_index("ix_maintenance_windows_ends_at", "maintenance_windows", ["ends_at"])


def downgrade() -> None:
    op.drop_index("ix_maintenance_windows_ends_at", table_name="maintenance_windows")
    op.drop_index("ix_maintenance_windows_node", table_name="maintenance_windows")
    op.drop_table("maintenance_windows")
