"""rentals.updated_at: when a change the API shows was last written, indexed with the tenant and alone, so
`GET /v1/rentals?updated_after=` (the console's refresh) reads only the rentals changed since, as an index
range. Rows are not filled: one unchanged since this migration has not changed since any moment a client
can ask about (the filter is new with it), and the next change stamps it.

Revision ID: 0054
Revises: 0053
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0054"
down_revision = "0053"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("rentals", sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_rentals_tenant_updated", "rentals", ["tenant_id", "updated_at"])
    op.create_index("ix_rentals_updated", "rentals", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_rentals_updated", table_name="rentals")
    op.drop_index("ix_rentals_tenant_updated", table_name="rentals")
    with op.batch_alter_table("rentals") as batch:
        batch.drop_column("updated_at")
