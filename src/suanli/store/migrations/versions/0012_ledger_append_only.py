"""the database keeps the ledger append-only: UPDATE, DELETE and TRUNCATE of its tables are refused

Until now the ledger was append-only because the code had no other path. Triggers now refuse any UPDATE or
DELETE (and, on PostgreSQL, TRUNCATE) of `ledger_transactions` and `ledger_postings`, whoever issues it; only
someone who can lift triggers (a PostgreSQL superuser, a hand on the SQLite file) can rewrite history, and
`suanli ledger verify` then reports the broken hash chain. The balance of each transaction stays guarded by
the domain (`Transaction` refuses postings that do not sum to 0), the stored `postings_sum` CHECK and
`verify`. A per-statement re-sum of inserted postings was measured and left out: its transition table turns
off COPY's batched inserts, and the meter's first pass over 100,000 rentals went from 10.0 s to 16.3 s.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TABLES = ("ledger_transactions", "ledger_postings")

PG_FUNCTION = """
CREATE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the ledger is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END $$;
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)
        for table in TABLES:
            op.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only()"
            )
        return
    for table in TABLES:
        for operation in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER {table}_no_{operation.lower()} BEFORE {operation} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: {operation} on {table} refused'); END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"DROP TRIGGER {table}_append_only ON {table}")
        op.execute("DROP FUNCTION ledger_append_only()")
        return
    for table in TABLES:
        for operation in ("update", "delete"):
            op.execute(f"DROP TRIGGER {table}_no_{operation}")
