"""rentals (created_at DESC, id): an admin's page of every tenant's rentals, newest first, past a keyset on
(created_at, id), is an index range in the list's own order, as a tenant's is on 0050's index.

Revision ID: 0053
Revises: 0052
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0053"
down_revision = "0052"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_rentals_newest", "rentals", [sa.text("created_at DESC"), "id"])


def downgrade() -> None:
    op.drop_index("ix_rentals_newest", table_name="rentals")
