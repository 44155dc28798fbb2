"""rentals.name: the name a tenant gave a rental, a column of its own (indexed with the tenant), so
`GET /v1/rentals?name=` filters on the server; the spec JSON keeps it too. Rentals named before get theirs
from their spec.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rentals") as batch:
        batch.add_column(sa.Column("name", sa.String(64), nullable=True))
        batch.create_index("ix_rentals_tenant_name", ["tenant_id", "name"])
    rentals = sa.table(
        "rentals", sa.column("id", sa.String()), sa.column("spec", sa.JSON()), sa.column("name", sa.String())
    )
    connection = op.get_bind()
    after = ""
    while True:  # in pages of ids, so a large table is never read whole
        page = connection.execute(
            sa.select(rentals.c.id, rentals.c.spec)
            .where(rentals.c.id > after)
            .order_by(rentals.c.id)
            .limit(1000)
        ).all()
        if not page:
            break
        after = page[-1][0]
        for rental_id, spec in page:
            name = (spec or {}).get("name")
            if name:
                connection.execute(sa.update(rentals).where(rentals.c.id == rental_id).values(name=name))


def downgrade() -> None:
    with op.batch_alter_table("rentals") as batch:
        batch.drop_index("ix_rentals_tenant_name")
        batch.drop_column("name")
