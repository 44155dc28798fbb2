"""contract_offers: a contract an operator offers one tenant at a negotiated prepaid price, open until it
expires; the tenant accepts it (the contract is signed at that price) or declines it.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "contract_offers",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("tenant_id", sa.String(length=40), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("gpu_model", sa.String(length=60), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("region", sa.String(length=100), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("price_micros", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("contract_id", sa.String(length=40), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_contract_offers_tenant_id", "contract_offers", ["tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_contract_offers_tenant_id", table_name="contract_offers")
    op.drop_table("contract_offers")
