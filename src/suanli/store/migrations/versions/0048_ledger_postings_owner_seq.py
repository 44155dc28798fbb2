"""ledger_postings (owner, tx_seq): a tenant's ledger page is a keyset range on it (the transactions past a
seq with a posting to the tenant's accounts, the first `limit` of them), not a read of all its transactions.

Revision ID: 0048
Revises: 0047
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0048"
down_revision = "0047"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_ledger_postings_owner_seq", "ledger_postings", ["owner", "tx_seq"])


def downgrade() -> None:
    op.drop_index("ix_ledger_postings_owner_seq", table_name="ledger_postings")
