"""rental_logs.char_start, node_char_start and chars: where each chunk's text starts in the rental's output
(every node's, in the order it came) and in its node's, and its length in characters, so a read from an
offset fetches the chunks it needs (indexed) instead of the whole output each poll. Rows already there are
numbered in id order, the order reads joined them in before.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rental_logs") as batch:
        batch.add_column(sa.Column("char_start", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("node_char_start", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("chars", sa.Integer(), nullable=True))
    logs = sa.table(
        "rental_logs",
        sa.column("id", sa.Integer()),
        sa.column("rental_id", sa.String()),
        sa.column("node", sa.String()),
        sa.column("data", sa.Text()),
        sa.column("char_start", sa.BigInteger()),
        sa.column("node_char_start", sa.BigInteger()),
        sa.column("chars", sa.Integer()),
    )
    connection = op.get_bind()
    chunks = sa.select(logs.c.id, logs.c.rental_id, logs.c.node, logs.c.data).order_by(logs.c.id)
    rows = connection.execute(chunks)
    ends: dict[str, int] = {}
    node_ends: dict[tuple[str, str], int] = {}
    numbered = []
    for row_id, rental_id, node, data in rows:
        chars = len(data)
        start, node_start = ends.get(rental_id, 0), node_ends.get((rental_id, node), 0)
        ends[rental_id], node_ends[(rental_id, node)] = start + chars, node_start + chars
        numbered.append({"row_id": row_id, "start": start, "node_start": node_start, "chars": chars})
    if numbered:
        connection.execute(
            logs.update()
            .where(logs.c.id == sa.bindparam("row_id"))
            .values(
                char_start=sa.bindparam("start"),
                node_char_start=sa.bindparam("node_start"),
                chars=sa.bindparam("chars"),
            ),
            numbered,
        )
    op.create_index("ix_rental_logs_rental_char", "rental_logs", ["rental_id", "char_start"])
    op.create_index("ix_rental_logs_node_char", "rental_logs", ["rental_id", "node", "node_char_start"])


def downgrade() -> None:
    op.drop_index("ix_rental_logs_node_char", table_name="rental_logs")
    op.drop_index("ix_rental_logs_rental_char", table_name="rental_logs")
    with op.batch_alter_table("rental_logs") as batch:
        batch.drop_column("chars")
        batch.drop_column("node_char_start")
        batch.drop_column("char_start")
