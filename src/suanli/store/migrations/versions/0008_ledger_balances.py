"""running account balances (ledger_balances), kept with the postings

A balance read (the funds check on every new rental, the balance endpoint) summed every posting of the
account, so it grew with the account's history. `ledger_balances` holds each account's balance, updated in the
same transaction that appends the postings; `suanli ledger verify` checks it against the hash chain. The
upgrade fills it from the postings already stored.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger_balances",
        sa.Column("owner", sa.String(length=200), primary_key=True),
        sa.Column("account_kind", sa.String(length=24), primary_key=True),
        sa.Column("balance_micros", sa.BigInteger(), nullable=False),
    )
    op.execute(
        "INSERT INTO ledger_balances (owner, account_kind, balance_micros) "
        "SELECT owner, account_kind, SUM(amount_micros) FROM ledger_postings GROUP BY owner, account_kind"
    )


def downgrade() -> None:
    op.drop_table("ledger_balances")
