"""billing terms: plans, grants with expiry, revenue reports, payment terms, outages, prices, contract price

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenant_plans",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("tenant_id", sa.String(length=40), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("discount_bp", sa.Integer(), nullable=False),
        sa.Column("fee_micros", sa.BigInteger(), nullable=False),
        sa.Column("revenue_share_bp", sa.Integer(), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_tenant_plans_tenant_id", "tenant_plans", ["tenant_id"])
    op.create_table(
        "grants",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("tenant_id", sa.String(length=40), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("memo", sa.Text(), nullable=False),
    )
    op.create_index("ix_grants_tenant_id", "grants", ["tenant_id"])
    op.create_table(
        "revenue_reports",
        sa.Column("tenant_id", sa.String(length=40), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("month", sa.String(length=7), primary_key=True),
        sa.Column("revenue_micros", sa.BigInteger(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "payment_terms",
        sa.Column("tenant_id", sa.String(length=40), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("mode", sa.String(length=10), nullable=False),
        sa.Column("credit_limit_micros", sa.BigInteger(), nullable=False),
        sa.Column("warned_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "outages",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cause", sa.String(length=200), nullable=False),
    )
    op.create_index("ix_outages_node", "outages", ["node"])
    op.create_table(
        "price_entries",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("gpu_model", sa.String(length=60), nullable=False),
        sa.Column("region", sa.String(length=100), nullable=False),
        sa.Column("tier", sa.String(length=16), nullable=False),
        sa.Column("mig_profile", sa.String(length=20), nullable=True),
        sa.Column("price_micros_per_gpu_hour", sa.BigInteger(), nullable=False),
        sa.Column("effective_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("contracts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("price_micros", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("contracts", schema=None) as batch_op:
        batch_op.drop_column("price_micros")
    op.drop_table("price_entries")
    op.drop_index("ix_outages_node", table_name="outages")
    op.drop_table("outages")
    op.drop_table("payment_terms")
    op.drop_table("revenue_reports")
    op.drop_index("ix_grants_tenant_id", table_name="grants")
    op.drop_table("grants")
    op.drop_index("ix_tenant_plans_tenant_id", table_name="tenant_plans")
    op.drop_table("tenant_plans")
