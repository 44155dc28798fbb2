"""Shipping a workload's log to the server: new bytes by offset in chunks, whole lines while it runs.

The server dedups by byte offset, so a retry never doubles a line. A rental placed on this node again writes a
new log file; its first upload asks how much of the node's log the server already holds (the log base) and
ships after it, so the earlier placement's output stays before the new one.
"""

from __future__ import annotations

import time
from pathlib import Path

from suanli.agent.executors import RentalPaths
from suanli.agent.local import Local
from suanli.client import ApiError, Client

LOG_CHUNK_BYTES = 256 * 1024
PARTIAL_LINE_WAIT_S = 5.0  # a running workload's unfinished last line waits this long for its newline
MAX_CHUNKS_PER_STEP = 8


def read_log_base(paths: RentalPaths) -> int:
    """The log base an earlier agent process learned for this rental's log file (0: none)."""
    try:
        return max(0, int(paths.log_base_file.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return 0


def write_log_base(paths: RentalPaths, base: int) -> None:
    """Keep the log base by the log: an agent that adopts the workload ships on from the same place."""
    paths.log_base_file.write_text(str(base), encoding="utf-8")


def ship_log(client: Client, local: Local, log_file: Path) -> bool:
    """Upload up to MAX_CHUNKS_PER_STEP chunks of a workload's new log; True when it stopped at that cap
    (more waits), False at the end of the file or where the server takes no more."""
    with log_file.open("rb") as handle:
        for _ in range(MAX_CHUNKS_PER_STEP):
            handle.seek(local.log_offset)
            chunk = whole_lines(local, handle.read(LOG_CHUNK_BYTES))
            if not chunk:
                return False
            try:
                if local.log_base is None:  # a new file: the earlier placement's output stays before it
                    local.log_base = client.upload_log(local.rental_id, 0, b"").stored_bytes
                    write_log_base(RentalPaths(log_file.parent), local.log_base)
                at = local.log_base + local.log_offset
                stored = client.upload_log(local.rental_id, at, chunk).stored_bytes
            except ApiError as error:
                if error.status == 404:
                    return False
                raise
            if stored == at:  # nothing taken: a gap on the server side
                return False
            local.log_offset = max(0, stored - local.log_base)
    return True


def whole_lines(local: Local, chunk: bytes) -> bytes:
    """What of `chunk` to ship now: while the workload runs, whole lines, its unfinished last line held back
    until its newline comes or it has waited PARTIAL_LINE_WAIT_S (a progress bar without newlines still
    shows), so the lines of a rental's nodes never interleave mid-line in its output; all of it once the
    workload has ended, or when a full chunk holds no newline."""
    if not chunk or chunk.endswith(b"\n") or local.state != "running" or len(chunk) == LOG_CHUNK_BYTES:
        local.partial_since = None
        return chunk
    now = time.monotonic()
    if local.partial_since is None:
        local.partial_since = now
    if now - local.partial_since >= PARTIAL_LINE_WAIT_S:
        local.partial_since = None
        return chunk
    return chunk[: chunk.rfind(b"\n") + 1]
