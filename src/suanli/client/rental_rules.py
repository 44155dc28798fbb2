"""What the rental calls that poll or page decide, with no I/O, for both clients (`Client` and
`AsyncClient`): the pages of `rentals()` and the query of each, what a page of followed output leads to, and
what one look at a waited-for rental means (return it, raise, or look again after a pause). Each client only
fetches and sleeps."""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable
from datetime import datetime

from suanli.client.calls import Call, Pager
from suanli.client.errors import ExecWaitTimeout, RentalEnded, RentalWaitTimeout
from suanli.wire.agent_schemas import LogResponse
from suanli.wire.schemas import ENDED_STATES, ExecResponse, RentalResponse

Query = list[tuple[str, str]]
RENTALS_PAGE_LIMIT = 1000  # rentals per `GET /v1/rentals` page: the most the server sends in one


def rental_filters(states: Iterable[str], name: str | None, updated_after: datetime | None = None) -> Query:
    """The query parameters of `rentals(states, name, updated_after)` that every page repeats."""
    filters = [("state", state) for state in sorted(states)]
    if name is not None:
        filters.append(("name", name))
    if updated_after is not None:  # a naive one goes as it is: the server refuses it naming the field
        filters.append(("updated_after", updated_after.isoformat()))
    return filters


def rentals_page_query(
    filters: Query, limit: int | None, found: int, after: str | None, page_limit: int
) -> Query | None:
    """The query of the next page of rentals past `after`, `found` already read (at most `page_limit` a
    page, none past `limit`); None when `limit` are read."""
    if limit is not None and found >= limit:
        return None
    size = page_limit if limit is None else min(page_limit, limit - found)
    return [*filters, ("limit", str(size)), *([("after", after)] if after else [])]


def rentals_pages(
    states: Iterable[str],
    name: str | None,
    limit: int | None,
    after: str | None,
    updated_after: datetime | None,
    page_limit: int,
) -> Pager[list[RentalResponse]]:
    """`rentals()`'s pages (at most `page_limit` rentals each), each past the one before as its `Link`
    rel="next" says, put together (see `calls.Pager`)."""
    filters = rental_filters(states, name, updated_after)
    found: list[RentalResponse] = []
    while params := rentals_page_query(filters, limit, len(found), after, page_limit):
        page, after = yield Call("GET", "/v1/rentals", list[RentalResponse], params=params)
        found.extend(page)
        if after is None or not page:  # the last page (or an older server's only one)
            break
    return found


class Next(enum.Enum):
    """What following output does after a page: read on at once, poll after a pause, or stop."""

    READ = "read"
    POLL = "poll"
    STOP = "stop"


def after_output_page(page: LogResponse, follow: bool) -> Next:
    """A page with output and more stored is read past at once; the end (`done`: the rental has ended and
    all is read), or any page when not following, stops; otherwise poll for more."""
    if page.data and not page.done:
        return Next.READ
    return Next.STOP if not follow or page.done else Next.POLL


def wait_pause_s(
    rental: RentalResponse,
    until: Collection[str],
    poll_s: float,
    left_s: float | None,
    timeout_s: float | None,
) -> float | None:
    """What one look at a waited-for rental means, `left_s` before the wait's deadline (None: no deadline):
    None when its state is one of `until` (return it); how long to pause before the next look otherwise.
    `RentalEnded` when it has ended in another state (it never leaves one), `RentalWaitTimeout` when the
    deadline has passed."""
    if rental.state in until:
        return None
    if rental.state in ENDED_STATES:
        raise RentalEnded(rental, until)
    if left_s is None:
        return poll_s
    if left_s <= 0:
        raise RentalWaitTimeout(rental, until, timeout_s if timeout_s is not None else 0.0)
    return min(poll_s, left_s)


EXEC_ENDED_STATES = frozenset({"exited", "failed", "lost"})


def exec_output_since(found: ExecResponse, shown: int) -> tuple[str, int] | None:
    """What a command printed past the first `shown` characters, as the text the server still keeps and the
    count of characters it no longer keeps before that text (0: none); None when nothing is new."""
    if found.output_chars <= shown:
        return None
    start = found.output_chars - len(found.output)
    return found.output[max(shown - start, 0) :], max(start - shown, 0)


def exec_wait_pause_s(
    found: ExecResponse, poll_s: float, left_s: float | None, within_s: float | None
) -> float | None:
    """What one look at a waited-for command means, `left_s` before the wait's deadline (None: no deadline):
    None when it has ended (return it), `ExecWaitTimeout` past the deadline, else the pause before the next
    look."""
    if found.state in EXEC_ENDED_STATES:
        return None
    if left_s is not None and left_s < 0:
        raise ExecWaitTimeout(found, within_s)
    return poll_s
