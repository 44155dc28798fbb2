"""Alembic environment: runs on the connection `suanli.store.db.migrate` passes, else on sqlalchemy.url."""

from __future__ import annotations

import warnings

from alembic import context
from sqlalchemy import create_engine

from suanli.store.rows import Base

config = context.config
target_metadata = Base.metadata
# A batch operation on SQLite reflects the tables its table's foreign keys name, tenants among them, whose
# case-insensitive name index is an expression SQLAlchemy cannot reflect; the batch never rebuilds tenants,
# so the index is not at stake: the warning only filled the test logs.
TENANTS_INDEX_WARNING = "Skipped unsupported reflection of expression-based index uq_tenants_lower_name"


def run_migrations() -> None:
    """Run the migrations in the configured context, without the tenants index warning (for them only)."""
    with context.begin_transaction(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", TENANTS_INDEX_WARNING)
        context.run_migrations()


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "sqlite://")
    with engine.begin() as own:
        context.configure(connection=own, target_metadata=target_metadata, render_as_batch=True)
        run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata)
    run_migrations()
else:
    run()
