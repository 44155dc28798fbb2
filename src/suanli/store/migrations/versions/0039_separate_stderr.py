"""rental_execs.separate_stderr: an attached command without a terminal whose stderr comes in frames of its
own (`suanli exec -i`: the command's stderr on the client's stderr).

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0039"
down_revision = "0038"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rental_execs") as batch:
        batch.add_column(
            sa.Column("separate_stderr", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("rental_execs") as batch:
        batch.drop_column("separate_stderr")
