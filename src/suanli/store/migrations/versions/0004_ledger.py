"""billing: hash-chained ledger (transactions, postings) and rentals.quote

The balance of every transaction is enforced twice: by the domain (`Transaction` refuses postings that do not
sum to 0) and by the database: the transaction row stores the sum of its postings in `postings_sum` under
CHECK (postings_sum = 0). The hash chain cannot fork: `prev_hash` is UNIQUE, so two writers that read the same
head cannot both append after it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger_transactions",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("at_s", sa.BigInteger(), nullable=False),
        sa.Column("ref", sa.String(length=60), nullable=False),
        sa.Column("memo", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("postings_sum", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("postings_sum = 0", name="ck_ledger_transactions_balanced"),
        sa.UniqueConstraint("key", name="uq_ledger_transactions_key"),
        sa.UniqueConstraint("prev_hash", name="uq_ledger_transactions_prev_hash"),
        sa.UniqueConstraint("hash", name="uq_ledger_transactions_hash"),
    )
    op.create_index("ix_ledger_transactions_ref", "ledger_transactions", ["ref"])
    op.create_table(
        "ledger_postings",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("tx_seq", sa.Integer(), sa.ForeignKey("ledger_transactions.seq"), nullable=False),
        sa.Column("account_kind", sa.String(length=24), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("amount_micros <> 0", name="ck_ledger_postings_non_zero"),
    )
    op.create_index("ix_ledger_postings_tx_seq", "ledger_postings", ["tx_seq"])
    op.create_index("ix_ledger_postings_account", "ledger_postings", ["owner", "account_kind"])
    with op.batch_alter_table("rentals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("quote", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rentals", schema=None) as batch_op:
        batch_op.drop_column("quote")
    op.drop_index("ix_ledger_postings_account", table_name="ledger_postings")
    op.drop_index("ix_ledger_postings_tx_seq", table_name="ledger_postings")
    op.drop_table("ledger_postings")
    op.drop_index("ix_ledger_transactions_ref", table_name="ledger_transactions")
    op.drop_table("ledger_transactions")
