"""rentals.promise and rentals.reserved_nodes: what the leader holds for a pending rental, for the next one

`promise`: a preemptor's promised placement (node, CPU, memory and GPU slices, as `allocations` and
`slices` store a placement), written when its victims get notice. `reserved_nodes`: the nodes drained for
the blocked head of the backfill queue, written with its `expected_start_at`. A new leader holds the same
GPUs and keeps the same nodes out of long backfill as the old one did, rather than working them out again.
Both are cleared once the rental leaves `pending`.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rentals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("promise", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("reserved_nodes", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rentals", schema=None) as batch_op:
        batch_op.drop_column("reserved_nodes")
        batch_op.drop_column("promise")
