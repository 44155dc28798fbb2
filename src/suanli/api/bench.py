"""Server benchmark: the real `suanli server` process on PostgreSQL with a 10,000-GPU fleet.

`python -m suanli.api.bench [--database-url URL] [--rentals N] [--concurrency C] [--offers N] [--workers W]
[--json FILE]`

Without `--database-url` it starts a throw-away PostgreSQL (`suanli.store.throwaway_pg`, the tests' helper).
It starts the server as a child process (uvicorn, W worker processes; default 1), loads a generated fleet of
1,250 nodes x 8 H100 (whole, shared and MIG nodes in two regions), then measures:

- rentals: N `POST /v1/rentals` from C threads (one httpx client each, every request with its own
  Idempotency-Key); throughput and p50/p95/p99 latency, then how long the scheduler takes to place them all;
- offers: `GET /v1/offers?q=...` over several query forms, one client, sequential; p50/p95/p99 latency.

The client runs on the same machine as the server and the database: on a small machine the three compete
for the same cores, and the numbers say so (`cpu_count` in the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine

from suanli.store.db import make_engine, migrate
from suanli.store.throwaway_pg import create_database, pg_bin, throwaway_postgres

ADMIN_KEY = "sk_bench_admin_key_0123456789"
BENCH_CREDIT_MICROS = 10**13  # 10 million units per tenant: the run never meets the prepaid floor
NODES, GPUS_PER_NODE, NODES_PER_LEAF = 1250, 8, 16
GOALS = {"rentals_per_s": 300.0, "rentals_p99_ms": 100.0, "offers_p99_ms": 50.0}
# small shapes, so that thousands of rentals fit the fleet and most get placed
SHAPES: tuple[dict[str, Any], ...] = (
    {"gpu_model": "H100", "gpus": 1},
    {"gpu_model": "H100", "gpus": 2, "tier": "spot"},
    {"gpu_model": "H100", "gpus": 0, "share_milli": 250, "share_memory_mib": 16384},
    {"gpu_model": "H100", "gpus": 0, "mig_profile": "1g.10gb"},
    {"gpu_model": "H100", "gpus": 1, "jurisdictions": ["EU"]},
)
OFFER_QUERIES = (
    "",
    "gpu=H100",
    "gpu=H100 count>=8",
    "region=eu tier=spot",
    "gpu=H100 count>=4 region=cn-north price<5",
    "interconnect=ib tier=on_demand",
    "tier=spot price<2.5",
    "region=CN count>=2 interconnect=roce",
)


def fleet_toml(nodes: int = NODES) -> str:
    """Two regions; per leaf of 16 nodes one GPU mode: whole, whole, shared, MIG (repeating)."""
    lines = [
        '[regions.cn-north]\njurisdiction = "CN"\ngrid_gco2_per_kwh = 581\npue = 1.3\n',
        '[regions.eu-west]\njurisdiction = "EU"\ngrid_gco2_per_kwh = 380\npue = 1.25\n',
    ]
    leaves = -(-nodes // NODES_PER_LEAF)
    for leaf in range(leaves):
        count = min(NODES_PER_LEAF, nodes - leaf * NODES_PER_LEAF)
        region = "cn-north" if leaf < leaves // 2 else "eu-west"
        pod = leaf // 4
        mode = ("whole", "whole", "shared", "mig")[leaf % 4]
        gpus = f'model = "H100-SXM-80GB", count = {GPUS_PER_NODE}, mode = "{mode}"'
        if mode == "mig":
            gpus += ', mig_layout = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]'
        interconnect = "ib" if pod % 2 == 0 else "roce"
        lines.append(
            f'[[nodes]]\nname = "n{leaf:03d}-{{i}}"\ncount_nodes = {count}\n'
            f'topology = "{region}/z{pod // 5 + 1}/pod-{pod:02d}/leaf-{leaf:03d}"\n'
            "cpu_milli = 192000\nmemory_mib = 2097152\n"
            f'labels = {{ interconnect = "{interconnect}" }}\ngpus = {{ {gpus} }}\n'
        )
    return "\n".join(lines)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


SERVER = [sys.executable, "-m", "suanli.cli.main", "server"]


@contextmanager
def server_process(database_url: str, log: Path, workers: int = 1) -> Iterator[str]:
    port = _free_port()
    env = {
        **os.environ,
        "SUANLI_DATABASE_URL": database_url,
        "SUANLI_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        "SUANLI_SCHEDULER_INTERVAL_S": "1",
        "SUANLI_API_RATE": "",  # it measures what the server can take, not what one tenant may send
    }
    with log.open("ab") as out:
        process = subprocess.Popen(
            [*SERVER, "--port", str(port), "--workers", str(workers)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start; its log: {log}\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)

    def at(q: float) -> float:
        return 1000 * ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {
        "p50_ms": at(0.50),
        "p95_ms": at(0.95),
        "p99_ms": at(0.99),
        "max_ms": 1000 * ordered[-1],
        "mean_ms": 1000 * statistics.fmean(ordered),
    }


def setup(url: str, tenants: int) -> list[str]:
    """Load the fleet; make `tenants` tenants with one key each; their secrets."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=url, headers=admin, timeout=120) as http:
        response = http.put("/v1/fleet", content=fleet_toml(), headers={"Content-Type": "application/toml"})
        response.raise_for_status()
        secrets = []
        for number in range(tenants):
            tenant = http.post("/v1/tenants", json={"name": f"bench-{number}"}).raise_for_status().json()
            key = http.post(f"/v1/tenants/{tenant['id']}/keys", json={"label": "bench"})
            secrets.append(key.raise_for_status().json()["secret"])
            # prepaid tenants need a balance to rent (payment terms): enough for the whole run
            top_up = {"amount_micros": BENCH_CREDIT_MICROS, "memo": "bench"}
            http.post(f"/v1/tenants/{tenant['id']}/credit", json=top_up).raise_for_status()
    return secrets


def bench_rentals(
    url: str, database_url: str, secrets: list[str], count: int, concurrency: int
) -> dict[str, Any]:
    local = threading.local()
    latencies: list[float] = [0.0] * count
    statuses: list[int] = [0] * count
    ids: list[str] = [""] * count
    first_error: list[str] = []
    run = time.strftime("%H%M%S")

    def one(number: int) -> None:
        if not hasattr(local, "http"):
            local.http = httpx.Client(base_url=url, timeout=60)
        secret = secrets[number % len(secrets)]
        headers = {"Authorization": f"Bearer {secret}", "Idempotency-Key": f"bench-{run}-{number}"}
        started = time.perf_counter()
        response = local.http.post("/v1/rentals", json=SHAPES[number % len(SHAPES)], headers=headers)
        latencies[number] = time.perf_counter() - started
        statuses[number] = response.status_code
        if response.status_code < 300:
            ids[number] = response.json()["id"]
        elif not first_error:
            first_error.append(f"{response.status_code} {response.text[:300]}")

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(count)))
    wall = time.perf_counter() - started
    ok = sum(1 for status in statuses if status == 201)
    result: dict[str, Any] = {
        "requests": count,
        "concurrency": concurrency,
        "created": ok,
        "errors": count - ok,
        "first_error": first_error[0] if first_error else None,
        "wall_s": wall,
        "per_s": ok / wall,
        **percentiles(latencies),
    }
    # how long until the scheduling loop has decided on every one of them (placed, or pending with a reason)
    with psycopg.connect(database_url.replace("+psycopg", ""), autocommit=True) as db:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            undecided = db.execute(
                "SELECT count(*) FROM rentals WHERE state = 'pending' AND pending_reason IS NULL"
            ).fetchone()
            if undecided is not None and undecided[0] == 0:
                break
            time.sleep(0.1)
        result["decided_after_s"] = time.perf_counter() - started
        result["states"] = dict(db.execute("SELECT state, count(*) FROM rentals GROUP BY state").fetchall())
    return result


def bench_offers(url: str, secret: str, count: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {secret}"}
    latencies, per_form = [], {q: 0 for q in OFFER_QUERIES}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
        for query in OFFER_QUERIES:  # warm the route once per form
            http.get("/v1/offers", params={"q": query}).raise_for_status()
        for number in range(count):
            query = OFFER_QUERIES[number % len(OFFER_QUERIES)]
            started = time.perf_counter()
            response = http.get("/v1/offers", params={"q": query})
            latencies.append(time.perf_counter() - started)
            response.raise_for_status()
            per_form[query] = len(response.json())
    return {
        "queries": count,
        "forms": len(OFFER_QUERIES),
        "offers_per_form": per_form,
        **percentiles(latencies),
    }


def bench_database(stack: ExitStack, database_url: str | None, name: str) -> str:
    """`database_url`, or a database `name` on a throw-away PostgreSQL that `stack` stops."""
    if database_url is not None:
        return database_url
    binaries = pg_bin()
    if binaries is None:
        raise SystemExit("no PostgreSQL binaries (initdb, pg_ctl) found; pass --database-url")
    base = stack.enter_context(throwaway_postgres(binaries))
    return create_database(base, name)


def bench_engine(stack: ExitStack, database_url: str | None, name: str) -> Engine:
    """An engine on `bench_database`, migrated; `stack` disposes of it."""
    engine = make_engine(bench_database(stack, database_url, name))
    stack.callback(engine.dispose)
    migrate(engine)
    return engine


def run(args: argparse.Namespace) -> dict[str, Any]:
    with ExitStack() as stack:
        database_url = bench_database(stack, args.database_url, "suanli_bench")
        log = Path(tempfile.mkdtemp(prefix="suanli-bench-")) / "server.log"
        url = stack.enter_context(server_process(database_url, log, args.workers))
        secrets = setup(url, args.tenants)
        rentals = bench_rentals(url, database_url, secrets, args.rentals, args.concurrency)
        offers = bench_offers(url, secrets[0], args.offers)
    return {
        "fleet": {"nodes": NODES, "gpus": NODES * GPUS_PER_NODE},
        "server": f"suanli server (uvicorn, {args.workers} worker processes), PostgreSQL",
        "workers": args.workers,
        "cpu_count": os.cpu_count(),
        "rentals": rentals,
        "offers": offers,
        "goals": GOALS,
        "server_log": str(log),
    }


def show(result: dict[str, Any], console: Console) -> None:
    rentals, offers = result["rentals"], result["offers"]
    table = Table(
        title=f"suanli server on PostgreSQL, {result['fleet']['gpus']:,} GPUs ({result['cpu_count']} CPUs)"
    )
    for column in ("measure", "value", "goal"):
        table.add_column(column, justify="right" if column != "measure" else "left")
    table.add_row(
        f"rentals created / s (concurrency {rentals['concurrency']})",
        f"{rentals['per_s']:.0f}",
        f">= {GOALS['rentals_per_s']:.0f}",
    )
    for name in ("p50_ms", "p95_ms", "p99_ms"):
        goal = f"< {GOALS['rentals_p99_ms']:.0f}" if name == "p99_ms" else ""
        table.add_row(f"  create latency {name[:3]} (ms)", f"{rentals[name]:.1f}", goal)
    table.add_row("  created / errors", f"{rentals['created']} / {rentals['errors']}", "")
    if rentals.get("first_error"):
        table.add_row("  first error", rentals["first_error"][:100], "")
    table.add_row("  all decided by the scheduler after (s)", f"{rentals['decided_after_s']:.1f}", "")
    table.add_row("  states", ", ".join(f"{k} {v}" for k, v in sorted(rentals["states"].items())), "")
    for name in ("p50_ms", "p95_ms", "p99_ms"):
        goal = f"< {GOALS['offers_p99_ms']:.0f}" if name == "p99_ms" else ""
        table.add_row(
            f"offers latency {name[:3]} (ms), {offers['queries']} queries", f"{offers[name]:.1f}", goal
        )
    console.print(table)


def bench_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The arguments every server benchmark takes: `--database-url` and `--json`."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=(doc or "").split("\n")[0])
    parser.add_argument("--database-url", help="an empty PostgreSQL database; default: a throw-away server")
    parser.add_argument("--json", type=Path, help="write the results here")
    return parser


def bench_main(
    parser: argparse.ArgumentParser,
    run_bench: Callable[[argparse.Namespace], dict[str, Any]],
    show_result: Callable[[dict[str, Any], Console], None],
    argv: list[str] | None,
) -> None:
    """Parse, run, print the table, and write the JSON when `--json` names a file."""
    args = parser.parse_args(argv)
    result = run_bench(args)
    show_result(result, Console())
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser("suanli.api.bench", __doc__)
    parser.add_argument("--rentals", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--offers", type=int, default=500)
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1, help="server worker processes")
    bench_main(parser, run, show, argv)


if __name__ == "__main__":
    main()
