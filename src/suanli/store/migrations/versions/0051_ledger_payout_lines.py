"""ledger_payout_lines: each provider's payable per rental (sum and count of its postings), kept with them

A page of `GET /v1/payouts` summed every provider payable posting of every provider and rental past its
cursor (a join of the postings and their transactions, grouped and sorted) before it took its `limit` lines:
the reply was bounded, its cost grew with the whole ledger. `ledger_payout_lines` (owner, ref) holds each
line's micros and number of transactions, updated in the same transaction that appends the postings (as
`ledger_balances` is, 0008), and a page is a keyset range on `ix_ledger_payout_lines_open` (owner, ref; only
lines that do not sum to zero, which the payouts leave out). The server's ledger verify checks it against
the postings. The upgrade fills it from the postings already stored, in its own transaction (on PostgreSQL
with the ledger's tables locked against appends until it commits).

Revision ID: 0051
Revises: 0050
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0051"
down_revision = "0050"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger_payout_lines",
        sa.Column("owner", sa.String(length=200), primary_key=True),
        sa.Column("ref", sa.String(length=60), primary_key=True),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("transactions", sa.Integer(), nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":  # no append between the fill and this commit
        op.execute("LOCK TABLE ledger_transactions, ledger_postings IN SHARE MODE")
    op.execute(
        "INSERT INTO ledger_payout_lines (owner, ref, amount_micros, transactions) "
        "SELECT p.owner, t.ref, SUM(p.amount_micros), COUNT(DISTINCT t.seq) "
        "FROM ledger_postings p JOIN ledger_transactions t ON p.tx_seq = t.seq "
        "WHERE p.account_kind = 'provider_payable' GROUP BY p.owner, t.ref"
    )
    op.create_index(
        "ix_ledger_payout_lines_open",
        "ledger_payout_lines",
        ["owner", "ref"],
        postgresql_where=sa.text("amount_micros <> 0"),
        sqlite_where=sa.text("amount_micros <> 0"),
    )


def downgrade() -> None:
    op.drop_index("ix_ledger_payout_lines_open", table_name="ledger_payout_lines")
    op.drop_table("ledger_payout_lines")
