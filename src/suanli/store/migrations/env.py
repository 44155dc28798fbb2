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
warnings.filterwarnings(
    "ignore", "Skipped unsupported reflection of expression-based index uq_tenants_lower_name"
)


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "sqlite://")
    with engine.begin() as own:
        context.configure(connection=own, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()
else:
    run()
