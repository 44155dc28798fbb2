"""rental_execs.stdin, .tty: a command the tenant's client attaches to (`suanli exec -i`, `-it` for a
terminal), whose input and output stream through the server instead of being kept.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rental_execs") as batch:
        batch.add_column(sa.Column("stdin", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("tty", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("rental_execs") as batch:
        batch.drop_column("tty")
        batch.drop_column("stdin")
