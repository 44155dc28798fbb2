"""rentals.time_limit_at: when a placed rental with a declared max duration is stopped (placement plus the
duration), indexed, so the leader finds the rentals past it without reading every spec. Live rentals placed
before get theirs from their spec.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-02
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

LIVE = ("placed", "starting", "running", "stopping", "preempting")


def upgrade() -> None:
    with op.batch_alter_table("rentals") as batch:
        batch.add_column(sa.Column("time_limit_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_rentals_time_limit_at", ["time_limit_at"])
    rentals = sa.table(
        "rentals",
        sa.column("id", sa.String()),
        sa.column("state", sa.String()),
        sa.column("spec", sa.JSON()),
        sa.column("placed_at", sa.DateTime(timezone=True)),
        sa.column("time_limit_at", sa.DateTime(timezone=True)),
    )
    connection = op.get_bind()
    live = sa.select(rentals.c.id, rentals.c.spec, rentals.c.placed_at).where(
        rentals.c.state.in_(LIVE), rentals.c.placed_at.is_not(None)
    )
    for rental_id, spec, placed_at in connection.execute(live).all():
        seconds = (spec or {}).get("max_duration_s")
        if seconds:
            limit = placed_at + timedelta(seconds=seconds)
            connection.execute(
                sa.update(rentals).where(rentals.c.id == rental_id).values(time_limit_at=limit)
            )


def downgrade() -> None:
    with op.batch_alter_table("rentals") as batch:
        batch.drop_index("ix_rentals_time_limit_at")
        batch.drop_column("time_limit_at")
