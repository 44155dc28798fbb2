"""A rental's output as it comes (`suanli logs -f`, `suanli rent -f`), and while it waits, its state."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from rich.text import Text

from suanli.cli.output import errors
from suanli.client import Client
from suanli.client.client import RECONNECT_S, ServerUnreachable
from suanli.domain import queueing
from suanli.wire.schemas import ENDED_STATES, RentalResponse

POLL_S = 1.0
RESAY_S = (
    60.0  # a waiting rental whose reason stays is told again, its message's figures moved, at most this often
)
SUCCEEDED = "stopped"  # the state a rental ends in when its workload exits 0 (or a stop ends it)
RESTARTED = "restarted"  # the event of a multi-node rental's workload restarted on all its nodes
TIME_LIMIT = "time_limit"  # the reason on the event of a rental the leader stopped at its max duration
TIMED_OUT = 124  # the exit status then, as timeout(1)'s
# pending reasons that no free capacity cures: the fleet as it is has no node the request could ever run on
NEVER_FITS = frozenset(reason.value for reason in queueing.NEVER_FITS)


def print_output(
    client: Client,
    rental_id: str,
    follow: bool,
    on_wait: Callable[[], None] | None = None,
    node: str | None = None,
    tail_lines: int | None = None,
) -> int:
    """Print the rental's output (every node's, or `node`'s) from the start, or its last `tail_lines` lines;
    with `follow`, until it has ended and all is printed. `on_wait` runs each time nothing new has come. The
    characters printed."""
    printed, offset = 0, 0
    if tail_lines is not None:
        offset, last = last_lines(client, rental_id, tail_lines, node)
        sys.stdout.write(last)
        sys.stdout.flush()
        printed += len(last)
    pieces = client.output(
        rental_id,
        follow=follow,
        node=node,
        poll_s=POLL_S,
        on_wait=on_wait,
        offset=offset,
        on_unreachable=_tell_unreachable,
    )
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()
        printed += len(piece)
    return printed


TAIL_READ_CHARS = (64 << 10, 1 << 20)  # how far back `--tail` reads: first, and at most (the server's page)


def _tell_unreachable(error: ServerUnreachable) -> None:
    """Say on stderr that the follow waits for the server (a restart, a new leader), and for how long."""
    wait_s = round(RECONNECT_S)
    errors.print(Text(f"cannot reach the server ({error}): retrying for up to {wait_s} s, from where it was"))


def last_lines(client: Client, rental_id: str, lines: int, node: str | None) -> tuple[int, str]:
    """The output's last `lines` lines (an unfinished last line counts as one) and where its end is, read
    from the end (64 KiB, then 1 MiB when that holds too few lines)."""
    for chars in TAIL_READ_CHARS:
        page = client.logs(rental_id, node=node, tail=chars)
        if page.offset == 0 or page.data.count("\n") > lines:
            break
    kept = page.data.splitlines(keepends=True)[-lines:] if lines else []
    return page.next_offset, "".join(kept)


def why_silent(client: Client, rental_id: str) -> str | None:
    """For a rental that ended with no output: its end and why, for stderr (a workload that could not start
    says so only in its timeline). None while it may still print."""
    rental = client.rental(rental_id)
    if rental.state not in ENDED_STATES:
        return None
    last = rental.events[-1].message if rental.events and rental.events[-1].message else ""
    return f"{rental.id}: {rental.state}, no output" + (f" ({last})" if last else "")


def follow_rental(client: Client, rental: RentalResponse) -> int:
    """Print a new rental's state as it changes while it waits, then its output until it ends; its last
    event on stderr (and, when a stop ended it, who asked). Returns the exit status: 124 when stopped at its
    max duration, as timeout(1); else its workload's non-zero exit code as `exit_status` gives it (143 for the
    SIGTERM of a stop or a preemption notice); else 0 when it ended `stopped`, 1 otherwise (lost)."""
    shown = [_state_line(rental)]
    errors.print(Text(shown[0]))
    restarts_told = [0]

    def tell_restarts(current: RentalResponse) -> None:
        """Each restart of the workload on all its nodes (a rank failed), once."""
        restarts = [e.message for e in current.events if e.kind == RESTARTED]
        for message in restarts[restarts_told[0] :]:
            errors.print(Text(f"{rental.id}: restarted ({message})"))
        restarts_told[0] = len(restarts)

    said = [(rental.state, rental.pending_reason, time.monotonic())]  # what the last line said, and when

    def note_state() -> None:
        current = client.rental(rental.id)
        tell_restarts(current)
        line = _state_line(current)
        if line == shown[-1]:
            return
        state, reason, at = said[-1]
        if (current.state, current.pending_reason) == (state, reason) and time.monotonic() - at < RESAY_S:
            return  # only the figures of its message moved (a spend cap's, every cycle): not yet again
        shown.append(line)
        said.append((current.state, current.pending_reason, time.monotonic()))
        errors.print(Text(line))
        if current.state == "pending" and current.pending_reason in NEVER_FITS:
            errors.print(Text(never_fits_hint(current.id)))

    try:
        print_output(client, rental.id, follow=True, on_wait=note_state)
    except KeyboardInterrupt:
        hint = f"suanli logs {rental.id} -f; suanli stop {rental.id}"
        errors.print(Text(f"detached: {rental.id} goes on ({hint})"))
        return 130
    ended = client.rental(rental.id)
    tell_restarts(ended)
    last = ended.events[-1].message if ended.events and ended.events[-1].message else ""
    limit = next((e for e in ended.events if e.reason == TIME_LIMIT), None)
    stop = limit or next((e for e in reversed(ended.events) if e.kind == "stopping"), None)
    if stop is not None and stop.message:  # said even when no poll saw it `stopping`
        asked = f"{stop.reason}: {stop.message}" if stop.reason else stop.message
        last = asked + (f"; {last}" if last and last != stop.message else "")
    errors.print(Text(f"{ended.id}: {ended.state}" + (f" ({last})" if last else "")))
    if limit is not None:
        return TIMED_OUT
    codes = _last_exit_codes(client, rental.id)
    if codes:
        return exit_status(codes[0])
    return 0 if ended.state == SUCCEEDED else 1


def _last_exit_codes(client: Client, rental_id: str) -> list[int]:
    """The non-zero exit codes its workload's last placement recorded (a stop's SIGTERM included)."""
    runs = client.rental_runs(rental_id)
    latest = max((run.placement for run in runs), default=0)  # a re-queued rental's earlier runs ended before
    return [run.exit_code for run in runs if run.placement == latest and run.exit_code]


def never_fits_hint(rental_id: str) -> str:
    """What to do about a request the fleet as it is can never run: it waits for the fleet to change."""
    return (
        f"  no node of the fleet could ever run it as asked: `suanli stop {rental_id}` and ask again, or "
        "Ctrl-C to leave it waiting for the fleet to change"
    )


def exit_status(exit_code: int) -> int:
    """A workload's exit code as a shell's status: as it is in 1-255, 128 + N for a kill by signal N
    (reported as -N), else 1."""
    if 0 < exit_code < 256:
        return exit_code
    if -128 < exit_code < 0:
        return 128 - exit_code
    return 1


def _state_line(rental: RentalResponse) -> str:
    """`rnt_…: pending (no_capacity: matching nodes are busy; …)`, with its live message (a quota's or a spend
    cap's figures as they are now) and expected start when it has them; `rnt_…: running on h100-a-01`."""
    where = ", ".join(a.node for a in rental.allocation)
    line = f"{rental.id}: {rental.state}"
    if rental.state == "pending" and rental.pending_reason:
        why = rental.pending_message or next(
            (e.message for e in reversed(rental.events) if e.kind == "pending" and e.message), ""
        )
        line = f"{line} ({rental.pending_reason}" + (f": {why})" if why else ")")
        if rental.expected_start_at is not None:
            line += f", starts by {rental.expected_start_at:%Y-%m-%d %H:%M} UTC"
        return line
    line = f"{line} on {where}" if where else line
    if rental.state == "stopping":  # stopped by the platform (its time limit) rather than by its tenant
        stop = next((e for e in reversed(rental.events) if e.kind == "stopping"), None)
        if stop is not None and stop.reason:
            line += f" ({stop.reason}: {stop.message})"
    return line
