"""PostgreSQL's text forms for bulk writes and array parameters, built with `str.join`.

psycopg adapts a Python list parameter element by element and formats a COPY row field by field; for the
meter's batches (2,000 rentals, 8,000 postings) that was a third of the writer thread's Python time, which
it shares with the reader under one interpreter lock. An array literal passed as text and cast in SQL
(`CAST(:ids AS varchar[])`), and COPY's text format written a batch at a time, say the same in one string.
Only for what is written (`INSERT ... SELECT unnest(...)`): in a WHERE clause the planner cannot see a cast
literal's length (`= ANY` over one made the read-only meter pass at 100,000 rentals take 63 s, not ~10 s).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

_ARRAY_SPECIAL = ('"', "\\")
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def text_array(values: Sequence[str]) -> str:
    """A `varchar[]`/`text[]` literal of `values`: every element quoted, `"` and `\\` escaped."""
    joined = '","'.join(values)
    if any(special in joined for special in _ARRAY_SPECIAL):
        joined = '","'.join(v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return '{"' + joined + '"}' if values else "{}"


def int_array(values: Iterable[int]) -> str:
    """An `integer[]`/`bigint[]` literal of `values` (Python ints: no quoting needed)."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


def copy_text(value: str) -> str:
    """`value` as one field of COPY's text format: backslash, tab, newline and return escaped."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:  # inline: 600,000 calls a pass
        return value.translate(_COPY_ESCAPES)
    return value


def copy_time(value: datetime) -> str:
    """A timezone-aware time as one field of COPY's text format (ISO 8601 with its offset)."""
    if value.tzinfo is None:
        raise ValueError("a COPY time needs a time zone")
    return value.isoformat()
