"""rental_execs.output_chars: the characters of output a command has printed so far (the agent sends its
output as it runs; `output` keeps the last of them), so a client shows only what is new. Commands from
before hold their whole kept output.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rental_execs") as batch:
        batch.add_column(sa.Column("output_chars", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE rental_execs SET output_chars = length(output)")


def downgrade() -> None:
    with op.batch_alter_table("rental_execs") as batch:
        batch.drop_column("output_chars")
