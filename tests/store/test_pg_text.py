"""The text forms the ledger and the stamps write through (`store/pg_text.py`) read back, on a real
PostgreSQL, as exactly the values they were made of: array literals cast in SQL, and COPY's text format,
for any text (quotes, backslashes, braces, commas, tabs, newlines, non-ASCII) and any 64-bit integer."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suanli.store.pg_text import copy_text, copy_time, int_array, text_array
from suanli.store.throwaway_pg import create_database

TEXTS = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
SPECIAL = ['"', "\\", "{", "}", ",", " ", "\t", "\n", "\r", "NULL", "", "\\.", "é☃", 'a\\"b']
_names = itertools.count()


@pytest.fixture(scope="module")
def connection(postgres_server: str) -> psycopg.Connection:
    url = create_database(postgres_server, f"pgtext_{next(_names)}")
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        yield conn


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(TEXTS, st.sampled_from(SPECIAL)), max_size=8))
def test_a_text_array_literal_reads_back_as_its_values(
    connection: psycopg.Connection, values: list[str]
) -> None:
    for sql_type in ("varchar[]", "text[]"):
        read = connection.execute(f"SELECT CAST(%s AS {sql_type})", (text_array(values),)).fetchone()
        assert read is not None and read[0] == values


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8))
def test_an_integer_array_literal_reads_back_as_its_values(
    connection: psycopg.Connection, values: list[int]
) -> None:
    read = connection.execute("SELECT CAST(%s AS bigint[])", (int_array(values),)).fetchone()
    assert read is not None and read[0] == values


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.tuples(st.one_of(TEXTS, st.sampled_from(SPECIAL)), TEXTS), min_size=1, max_size=6),
    minutes=st.integers(-720, 720),
)
def test_copy_text_rows_read_back_as_written(
    connection: psycopg.Connection, rows: list[tuple[str, str]], minutes: int
) -> None:
    at = datetime(2026, 12, 7, 12, 0, 0, 123456, tzinfo=timezone(timedelta(minutes=minutes)))
    connection.execute("CREATE TEMP TABLE IF NOT EXISTS copied (n int, a text, b text, at timestamptz)")
    connection.execute("TRUNCATE copied")
    payload = "".join(
        f"{n}\t{copy_text(a)}\t{copy_text(b)}\t{copy_time(at)}\n" for n, (a, b) in enumerate(rows)
    )
    with connection.cursor() as cursor, cursor.copy("COPY copied (n, a, b, at) FROM STDIN") as copy:
        copy.write(payload)
    read = connection.execute("SELECT a, b, at FROM copied ORDER BY n").fetchall()
    assert [(a, b) for a, b, _ in read] == rows
    assert all(stored == at.astimezone(UTC) for _, _, stored in read)


def test_a_copy_time_needs_a_zone() -> None:
    with pytest.raises(ValueError, match="time zone"):
        copy_time(datetime(2026, 12, 7, 12, 0))
