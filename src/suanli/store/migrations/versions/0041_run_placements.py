"""A run per placement: rentals.placements counts a rental's placements, and rental_runs.placement (in its
key) names the one a run belongs to, so a rental re-queued and placed again on a node it ran on has a run of
its own there (its start, its end, its billing span) and an end reported late for the earlier one is not
taken for the new one's. Rows from before count as placement 0 of a rental counted 0.

Revision ID: 0041
Revises: 0040
Create Date: 2026-12-04
"""

from __future__ import annotations

import warnings

import sqlalchemy as sa
from alembic import op

revision = "0041"
down_revision = "0040"
branch_labels = None
depends_on = None

PK = "rental_runs_pkey"  # PostgreSQL's name for the key 0002 made without one


def upgrade() -> None:
    # a plain ADD COLUMN on rentals: a batch would copy the table, which the rows other tables point at forbid
    op.add_column("rentals", sa.Column("placements", sa.Integer(), nullable=False, server_default="0"))
    if op.get_bind().dialect.name == "sqlite":
        with warnings.catch_warnings():  # the copy names the old key's columns first; the new key wins
            warnings.filterwarnings("ignore", "Table '_alembic_tmp_rental_runs' specifies columns")
            with op.batch_alter_table("rental_runs", recreate="always") as batch:
                batch.add_column(sa.Column("placement", sa.Integer(), nullable=False, server_default="0"))
                batch.create_primary_key(PK, ["rental_id", "node", "placement"])
        return
    op.add_column("rental_runs", sa.Column("placement", sa.Integer(), nullable=False, server_default="0"))
    op.drop_constraint(PK, "rental_runs", type_="primary")
    op.create_primary_key(PK, "rental_runs", ["rental_id", "node", "placement"])


def downgrade() -> None:
    # keeps each (rental, node)'s latest run: the key before had room for one
    op.execute(
        "DELETE FROM rental_runs WHERE placement < "
        "(SELECT MAX(r.placement) FROM rental_runs r "
        "WHERE r.rental_id = rental_runs.rental_id AND r.node = rental_runs.node)"
    )
    if op.get_bind().dialect.name == "sqlite":
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Table '_alembic_tmp_rental_runs' specifies columns")
            with op.batch_alter_table("rental_runs", recreate="always") as batch:
                batch.create_primary_key(PK, ["rental_id", "node"])
                batch.drop_column("placement")
    else:
        op.drop_constraint(PK, "rental_runs", type_="primary")
        op.drop_column("rental_runs", "placement")
        op.create_primary_key(PK, "rental_runs", ["rental_id", "node"])
    with op.batch_alter_table("rentals") as batch:
        batch.drop_column("placements")
