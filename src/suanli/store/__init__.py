"""Persistence: SQLAlchemy rows, repositories implementing the app ports, Alembic migrations, leader lock."""
