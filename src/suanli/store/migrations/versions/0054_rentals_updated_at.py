"""rentals.updated_at: when a change the API shows was last written, indexed with the tenant and alone, so
`GET /v1/rentals?updated_after=` (the console's refresh) reads only the rentals changed since, as an index
range. Rows already there are stamped with the migration's time: their last change is unknown, and a stamp
no earlier than it keeps every one in the answer to a moment before the migration (a client may ask about any
moment), while one after it finds them only once they change again.

Revision ID: 0054
Revises: 0053
Create Date: 2026-12-07
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0054"
down_revision = "0053"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("rentals", sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))
    rentals = sa.table("rentals", sa.column("updated_at", sa.DateTime(timezone=True)))
    op.execute(rentals.update().values(updated_at=datetime.now(UTC)))
    op.create_index("ix_rentals_tenant_updated", "rentals", ["tenant_id", "updated_at"])
    op.create_index("ix_rentals_updated", "rentals", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_rentals_updated", table_name="rentals")
    op.drop_index("ix_rentals_tenant_updated", table_name="rentals")
    with op.batch_alter_table("rentals") as batch:
        batch.drop_column("updated_at")
