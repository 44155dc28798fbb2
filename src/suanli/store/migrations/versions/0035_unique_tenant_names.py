"""tenants: a name names one tenant, whatever its case (`uq_tenants_lower_name`). Names taken twice before
keep the oldest tenant's; each later one gets its id appended (`acme-7178263149be7383`).

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None

NAME_MAX_CHARS = 100


def upgrade() -> None:
    bind = op.get_bind()
    taken: set[str] = set()
    for tenant_id, name in bind.execute(
        sa.text("SELECT id, name FROM tenants ORDER BY created_at, id")
    ).all():
        if name.lower() in taken:
            suffix = "-" + tenant_id.removeprefix("ten_")
            name = name[: NAME_MAX_CHARS - len(suffix)] + suffix
            bind.execute(
                sa.text("UPDATE tenants SET name = :name WHERE id = :id"), {"name": name, "id": tenant_id}
            )
        taken.add(name.lower())
    op.create_index("uq_tenants_lower_name", "tenants", [sa.text("lower(name)")], unique=True)


def downgrade() -> None:
    op.drop_index("uq_tenants_lower_name", table_name="tenants")
