"""Log benchmark: what a rental's long output costs to store and to follow, on PostgreSQL.

`python -m suanli.api.log_bench [--database-url URL] [--chunks N] [--json FILE]`

Without `--database-url` it starts a throw-away PostgreSQL (`suanli.store.throwaway_pg`) and migrates it. It
stores N chunks of about 20 KB of training-log lines from two nodes of one rental, each in its own
transaction as an agent's upload is (`SqlAgents.add_log`, through the unit of work the server uses), then
times the reads a follower makes (`SqlAgents.log_page`, the code behind `GET /v1/rentals/ID/logs`): a poll
100 characters before the end of the whole output and of one node's, and the first 1 MiB. Medians of 50.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from suanli.api.bench import bench_engine, bench_main, bench_parser
from suanli.app.agents import MAX_LOG_READ_CHARS
from suanli.app.records import Rental, RentalSpec, Tenant
from suanli.store.agent_repositories import SqlAgentUnitOfWork
from suanli.store.db import session_factory

NODES = ("gpu-01", "gpu-02")
LINE = "step 123456 loss=0.2500 lr=3.0e-04 tokens/s=41234.5 grad_norm=0.87 mem=71.2GiB\n"
READS = 50
GOAL_MS = 5.0  # a follower's poll at the end of a long output


def _median_ms(read: Any) -> float:
    times = []
    for _ in range(READS):
        started = time.perf_counter()
        read()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def run(args: argparse.Namespace) -> dict[str, Any]:
    with ExitStack() as stack:
        engine = bench_engine(stack, args.database_url, "suanli_log_bench")
        sessions = session_factory(engine)
        now = datetime.now(UTC)
        chunk = LINE * (20_000 // len(LINE))  # an agent ships up to 256 KiB a chunk; a busy second, ~20 KB
        size = len(chunk.encode())
        with SqlAgentUnitOfWork(sessions) as uow:
            uow.tenants.add(Tenant("ten_log_bench", "log-bench", "tenant", now))
            uow.rentals.add(Rental("rnt_log_bench", "ten_log_bench", "running", RentalSpec(), now))
            uow.commit()
        sent = dict.fromkeys(NODES, 0)
        started = time.perf_counter()
        for index in range(args.chunks):
            node = NODES[index % len(NODES)]
            with SqlAgentUnitOfWork(sessions) as uow:
                uow.agents.add_log("rnt_log_bench", node, sent[node], size, chunk, now)
                uow.commit()
            sent[node] += size
        store_s = time.perf_counter() - started
        with SqlAgentUnitOfWork(sessions) as uow:
            agents = uow.agents
            _, total = agents.log_page("rnt_log_bench", None, 0, 1)
            _, node_total = agents.log_page("rnt_log_bench", NODES[1], 0, 1)

            def poll(node: str | None, offset: int) -> float:
                return _median_ms(lambda: agents.log_page("rnt_log_bench", node, offset, MAX_LOG_READ_CHARS))

            end_ms, node_end_ms = poll(None, total - 100), poll(NODES[1], node_total - 100)
            start_ms = poll(None, 0)
    return {
        "chunks": args.chunks,
        "output_mb": round(total / 1e6, 1),
        "stored_chunks_per_s": round(args.chunks / store_s, 1),
        "poll_at_end_ms": round(end_ms, 3),
        "node_poll_at_end_ms": round(node_end_ms, 3),
        "first_mib_ms": round(start_ms, 3),
        "goal_poll_at_end_ms": GOAL_MS,
    }


def show(result: dict[str, Any], console: Console) -> None:
    size = f"{result['output_mb']} MB in {result['chunks']:,} chunks"
    table = Table(title=f"a rental's output on PostgreSQL: {size} from 2 nodes")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("goal", justify="right")
    goal = f"< {GOAL_MS}"
    table.add_row("chunks stored / s (one transaction each)", f"{result['stored_chunks_per_s']:,.1f}", "")
    table.add_row("poll 100 chars before the end (ms, median)", f"{result['poll_at_end_ms']:.3f}", goal)
    table.add_row("  one node's, before its end (ms)", f"{result['node_poll_at_end_ms']:.3f}", goal)
    table.add_row("the first 1 MiB (ms)", f"{result['first_mib_ms']:.3f}", "")
    console.print(table)


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser("suanli.api.log_bench", __doc__)
    parser.add_argument("--chunks", type=int, default=2000)
    bench_main(parser, run, show, argv)


if __name__ == "__main__":
    main()
