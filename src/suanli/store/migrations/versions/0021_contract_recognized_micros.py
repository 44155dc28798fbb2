"""contracts.recognized_micros: how much of a priced contract's value the meter loop has recognized as earned,
so that each pass reads only the contracts with value still to earn (a partial index), not every contract
ever signed. Existing rows start at 0 and are read once more, which sets it from the ledger.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("contracts") as batch:
        batch.add_column(sa.Column("recognized_micros", sa.BigInteger(), nullable=False, server_default="0"))
    op.create_index(
        "ix_contracts_to_recognize",
        "contracts",
        ["starts_at"],
        postgresql_where=sa.text("recognized_micros < price_micros"),
        sqlite_where=sa.text("recognized_micros < price_micros"),
    )


def downgrade() -> None:
    op.drop_index("ix_contracts_to_recognize", table_name="contracts")
    with op.batch_alter_table("contracts") as batch:
        batch.drop_column("recognized_micros")
