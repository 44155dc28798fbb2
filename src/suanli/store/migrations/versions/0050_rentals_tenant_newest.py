"""rentals (tenant_id, created_at DESC, id): a tenant's page of rentals, newest first, past a keyset on
(created_at, id), is an index range in the list's own order, not a sort of all the tenant's rentals.

Revision ID: 0050
Revises: 0049
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0050"
down_revision = "0049"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_rentals_tenant_newest", "rentals", ["tenant_id", sa.text("created_at DESC"), "id"])


def downgrade() -> None:
    op.drop_index("ix_rentals_tenant_newest", table_name="rentals")
