"""Commands that talk to a suanli server: login, offers, rent, rerun, ls, show, stop, resize, server."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, get_args

import typer
from rich.console import Group
from rich.text import Text

from suanli.cli import profile
from suanli.cli.follow import follow_rental
from suanli.cli.gpu_commands import sparkline
from suanli.cli.output import (
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    age_text,
    api_errors,
    emit,
    error_text,
    errors,
    logged_in,
    micros,
    server_client,
    table,
    valid_input,
)
from suanli.cli.rent_spec import SpecError, duration_s, env_pairs, money_to_micros, parse_gpu_spec
from suanli.client import ApiError
from suanli.client.client import url_problem
from suanli.wire.agent_schemas import RentalGpuHistoryResponse, RentalGpuResponse, RentalRunResponse
from suanli.wire.schemas import (
    ENDED_STATES,
    OfferResponse,
    RentalCreateRequest,
    RentalDryRunResponse,
    RentalResponse,
    RentalState,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]


RENTAL_STATES: tuple[str, ...] = get_args(RentalState)  # in the order a rental moves through them
LIVE_STATES = frozenset(s for s in RENTAL_STATES if s not in ENDED_STATES)  # waiting or holding GPUs

LS_LIMIT = 50  # rentals `ls` shows unless asked for more
DEFAULT_RESTARTS = 3  # `--restart on-failure` without --max-restarts (0 would restart nothing)

# request fields -> the options that set them, for messages about bad values
RENT_OPTIONS = {
    "nodes": "--nodes",
    "cpu_milli": "--cpu",
    "memory_mib": "--memory",
    "bid_micros_per_gpu_hour": "--bid",
    "max_duration_s": "--max-duration",
    "idle_stop_s": "--idle-stop",
    "min_gpus": "--min-gpus",
    "env": "--env",
    "max_restarts": "--max-restarts",
    "name": "--name",
    "image": "--image",
    "regions": "--region",
    "jurisdictions": "--jurisdiction",
    "gpu_model": "SPEC (model)",
    "gpus": "SPEC (GPUs)",
    "share_milli": "SPEC (share)",
    "share_memory_mib": "--share-memory",
    "mig_profile": "SPEC (MIG profile)",
}


def _server_url(url: str) -> str:
    """Refuses a URL no server can have before the key is asked for."""
    if (problem := url_problem(url)) is not None:
        raise typer.BadParameter(f"{url!r} {problem}")
    return url


def login(
    url: Annotated[str, typer.Argument(help="Server URL, e.g. http://127.0.0.1:8080", callback=_server_url)],
    key: Annotated[str, typer.Option(help="Your API key (sk_...).", prompt=True, hide_input=True)],
) -> None:
    """Check the key against the server and save URL and key as your profile."""
    with api_errors(), server_client(url, key) as client:
        me = client.me()
    path = profile.save(profile.Profile(url, key))
    typer.echo(f"logged in to {url} as {me.tenant.name} ({me.tenant.role}); profile saved in {path}")


def offers(
    query: Annotated[
        list[str] | None,
        typer.Argument(
            help="Terms, all must hold: gpu=H100 region=eu tier=spot 'count>=8' 'price<2.5' profile=3g.40gb "
            "(quote those with < or >, which the shell would take)."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Free capacity you can rent now: whole GPUs, MIG instances and room for shares, at your price per hour
    now."""
    with logged_in() as client:
        found = client.offers(" ".join(query or []))
    emit(found, as_json, _offers_table)
    if not found and not as_json:
        terms = " ".join(query or [])
        errors.print(
            Text(f"no free capacity matches {terms!r}; `suanli offers` with no terms lists it all")
            if terms
            else Text("no free capacity now; `suanli rent` queues a rental until some frees")
        )


def rent(
    spec: Annotated[str, typer.Argument(help="H100:8, A100-80GB:3g.40gb, L40S:0.5 or H100")],
    command: Annotated[list[str] | None, typer.Argument(help="The workload, after --")] = None,
    nodes: Annotated[
        int, typer.Option(min=1, help="Nodes; more than 1 is a gang placed all or nothing.")
    ] = 1,
    tier: Annotated[
        str, typer.Option(help="on_demand or spot (within a contract, on_demand is admitted as reserved).")
    ] = "on_demand",
    bid: Annotated[str | None, typer.Option(help="Spot bid per GPU-hour, e.g. 1.9.")] = None,
    region: Annotated[list[str] | None, typer.Option(help="Allowed region (repeatable).")] = None,
    jurisdiction: Annotated[
        list[str] | None, typer.Option(help="Allowed jurisdiction, e.g. EU (repeatable).")
    ] = None,
    cpu: Annotated[int, typer.Option(help="CPU per node, milli-cores.")] = 0,
    memory: Annotated[int, typer.Option(help="Host memory per node, MiB.")] = 0,
    share_memory: Annotated[
        int | None,
        typer.Option(help="A share's GPU memory, MiB (with a share, e.g. L40S:0.5); default: none held."),
    ] = None,
    max_duration: Annotated[
        str | None,
        typer.Option(
            help="Max run time (90m, 2h, 1h30m, 1:30:00 or seconds; 1:30 is 1 min 30 s, as in Slurm): "
            "stopped then, and it may start sooner, ahead of a queue."
        ),
    ] = None,
    idle_stop: Annotated[
        str | None,
        typer.Option(
            help="Stop it once its GPUs have been idle (under 5% used) this long: 30m, 2h. Whole GPUs only."
        ),
    ] = None,
    checkpoints: Annotated[
        bool,
        typer.Option(
            help="The workload saves its state on SIGTERM and resumes from it: preempted, it goes back to "
            "the queue rather than ending, and the backfill queue may lend it GPUs that would idle."
        ),
    ] = False,
    min_gpus: Annotated[
        int | None,
        typer.Option(
            help="Elastic: when it does not fit whole, start on as few as this many GPUs in all (fewer on "
            "its node, or fewer nodes) and grow toward its size as GPUs free; billed for what it holds."
        ),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option("--env", "-e", help="NAME=VALUE in the workload's environment (repeatable)."),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            help="Container image: a catalogue key (pytorch, pytorch:2.5.1, vllm, tensorflow, jax, "
            "pytorch-ngc) or any reference (ghcr.io/acme/trainer:1.2). Without a command its entrypoint runs."
        ),
    ] = None,
    restart: Annotated[
        str, typer.Option(help="never, or on-failure (restart a failed workload, on all its nodes).")
    ] = "never",
    name: Annotated[
        str | None, typer.Option(help="A name of yours for it (letters, digits, . _ -), shown by ls.")
    ] = None,
    max_restarts: Annotated[
        int | None,
        typer.Option(min=0, max=100, help=f"Restarts allowed with on-failure (default {DEFAULT_RESTARTS})."),
    ] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="Retry-safe key; default: a new one.")] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Wait for it and print its output as it comes, until it ends; exit with its workload's "
            "status (128+N after signal N, e.g. 143 when preempted; 124 at --max-duration; 1 if lost). "
            "Ctrl-C detaches (130): the rental goes on.",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Create nothing: say where it would start now and at what rate, whom it would preempt, "
            "or why it would wait.",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Rent GPUs now: `suanli rent H100:8 --nodes 2 --tier spot --bid 1.9 --region cn-north -- python
    train.py`, or in a container: `suanli rent H100:8 --image pytorch -- python train.py`."""
    try:
        gpu = parse_gpu_spec(spec)
    except SpecError as error:
        errors.print(error_text(str(error)))
        raise typer.Exit(EXIT_USAGE) from None
    try:
        bid_micros = money_to_micros(bid) if bid is not None else None
    except SpecError as error:
        errors.print(error_text(f"--bid: {error}"))
        raise typer.Exit(EXIT_USAGE) from None
    try:
        max_duration_s = duration_s(max_duration) if max_duration is not None else None
    except SpecError as error:
        errors.print(error_text(f"--max-duration: {error}"))
        raise typer.Exit(EXIT_USAGE) from None
    try:
        idle_stop_s = duration_s(idle_stop) if idle_stop is not None else None
    except SpecError as error:
        errors.print(error_text(f"--idle-stop: {error}"))
        raise typer.Exit(EXIT_USAGE) from None
    if idle_stop_s is not None and (gpu.mig_profile is not None or gpu.share_milli is not None):
        errors.print(error_text("--idle-stop: needs whole GPUs (not a MIG instance or a share)"))
        raise typer.Exit(EXIT_USAGE)
    try:
        variables = env_pairs(env or [])
    except SpecError as error:
        errors.print(error_text(f"--env: {error}"))
        raise typer.Exit(EXIT_USAGE) from None
    if tier not in ("on_demand", "spot"):
        reserved = " (reserved is what a contract gives an on_demand rental)" if tier == "reserved" else ""
        errors.print(error_text(f"--tier {tier!r}: use on_demand or spot{reserved}"))
        raise typer.Exit(EXIT_USAGE)
    if restart not in ("never", "on-failure"):
        errors.print(error_text(f"--restart {restart!r}: use never or on-failure"))
        raise typer.Exit(EXIT_USAGE)
    if max_restarts is not None and restart != "on-failure":
        errors.print(error_text(f"--max-restarts {max_restarts}: only with --restart on-failure"))
        raise typer.Exit(EXIT_USAGE)
    if share_memory is not None and gpu.share_milli is None:
        errors.print(error_text(f"--share-memory {share_memory}: only with a share of a GPU, e.g. L40S:0.5"))
        raise typer.Exit(EXIT_USAGE)
    if dry_run and follow:
        errors.print(error_text("--dry-run creates nothing to --follow: use one of them"))
        raise typer.Exit(EXIT_USAGE)
    with valid_input(RENT_OPTIONS):
        request = RentalCreateRequest(
            gpu_model=gpu.gpu_model,
            gpus=gpu.gpus if gpu.mig_profile is None and gpu.share_milli is None else 0,
            mig_profile=gpu.mig_profile,
            share_milli=gpu.share_milli,
            share_memory_mib=share_memory or 0,
            nodes=nodes,
            cpu_milli=cpu,
            memory_mib=memory,
            tier=tier,  # type: ignore[arg-type]
            bid_micros_per_gpu_hour=bid_micros,
            regions=region or [],
            jurisdictions=jurisdiction or [],
            max_duration_s=max_duration_s,
            idle_stop_s=idle_stop_s,
            checkpoints=checkpoints,
            min_gpus=min_gpus,
            image=image,
            command=command or [],
            env=variables,
            restart=restart,  # type: ignore[arg-type]
            max_restarts=(DEFAULT_RESTARTS if restart == "on-failure" else 0)
            if max_restarts is None
            else max_restarts,
            name=name,
        )
    with logged_in(RENT_OPTIONS) as client:
        if dry_run:
            emit(client.dry_run_rental(request), as_json, _dry_run_text)
            return
        rental = client.create_rental(request, idempotency_key or f"cli-{uuid.uuid4()}")
        if not command and image is None:  # it runs nothing: the GPUs are held (and charged) until stopped
            errors.print(
                Text(
                    f"{rental.id}: no command, so its GPUs are held until `suanli stop {rental.id}`; run "
                    f"commands in it with `suanli exec {rental.id} -- CMD`"
                )
            )
        if follow:
            raise typer.Exit(follow_rental(client, rental))
    emit(rental, as_json, _rental_detail)


def rerun(
    rental_id: Annotated[str, typer.Argument(metavar="RENTAL", help="The rental to submit again.")],
    name: Annotated[str | None, typer.Option(help="A name for the new one (default: the same).")] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Wait for it and print its output, as rent -f; exit with its exit code."
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Submit a rental again: a new rental with the same request (GPUs, nodes, tier, image, command, env,
    limits), placed afresh, at the prices in force now."""
    with logged_in() as client:
        request = client.rental(rental_id).request
        if name is not None:
            with valid_input({"name": "--name"}):
                request = RentalCreateRequest.model_validate({**request.model_dump(), "name": name})
        rental = client.create_rental(request, f"cli-{uuid.uuid4()}")
        if follow:
            raise typer.Exit(follow_rental(client, rental))
    emit(rental, as_json, _rental_detail)


def _dry_run_text(found: RentalDryRunResponse) -> Text:
    """One line of what would happen (when it would wait, its reserved start or the blocked head's it waits
    behind), one of the queue when rentals wait, and that nothing was made."""
    rate = "" if found.price_micros_per_hour is None else f" at {micros(found.price_micros_per_hour)}/h"
    if found.max_cost_micros is not None:
        rate += f" (at most {micros(found.max_cost_micros)} to its time limit)"
    if found.contract_covered_gpus:
        rate += f", {found.contract_covered_gpus:g} GPU(s) covered by your contracts"
    if found.starts_now:
        lines = [f"would start now on {', '.join(found.nodes)}{rate}"]
    elif found.preempts:
        some = "rental" if found.preempts == 1 else "rentals"
        lines = [f"would give {found.preempts} lower-tier {some} notice and start when they leave{rate}"]
    else:
        lines = [f"would wait ({found.pending_reason}): {found.message}"]
        if found.expected_start_at is not None:
            at = f"{found.expected_start_at:%Y-%m-%d %H:%M} UTC"
            lines.append(f"capacity would be reserved for it: starts by {at} at the latest")
        if found.head_start_at is not None:
            at = f"{found.head_start_at:%Y-%m-%d %H:%M} UTC"
            lines.append(f"behind the head of the queue, whose capacity is reserved from {at}")
    if found.rentals_waiting:
        them = "it" if found.rentals_waiting == 1 else "them"
        waiting = "1 rental is" if found.rentals_waiting == 1 else f"{found.rentals_waiting} rentals are"
        lines.append(f"{waiting} waiting; judged in the queue's order with {them}")
    lines.append("dry run: nothing was created")
    return Text("\n".join(lines))


def ls(
    state: Annotated[
        list[str] | None,
        typer.Option(help=f"Only this state (repeatable): {', '.join(RENTAL_STATES)}."),
    ] = None,
    live: Annotated[
        bool, typer.Option("--live", help="Only those waiting or holding GPUs (pending to stopping).")
    ] = False,
    name: Annotated[
        str | None,
        typer.Option(help="Only those of this name (as given to rent --name), or starting so: sweep-*."),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit", "-n", min=1, help="Show at most this many, the newest (fetched 1,000 a page)."
        ),
    ] = LS_LIMIT,
    every: Annotated[
        bool, typer.Option("--all", help="Show every one (of the states and name asked for), page by page.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Your rentals, newest first."""
    wanted = set(state or ())
    if unknown := sorted(wanted.difference(RENTAL_STATES)):
        errors.print(error_text(f"--state {unknown[0]!r}: use one of {', '.join(RENTAL_STATES)}"))
        raise typer.Exit(EXIT_USAGE)
    if live:
        wanted.update(LIVE_STATES)
    with logged_in({"name": "--name"}) as client:
        rentals = client.rentals(wanted, name, None if every else limit)
    emit(rentals, as_json, _rentals_table)
    if not rentals and not as_json:
        errors.print(
            Text("no rentals" + (" of those states" if wanted else "") + (f" named {name!r}" if name else ""))
        )
    if len(rentals) == limit and not every and not as_json:
        errors.print(Text(f"the newest {limit} shown; --limit N or --all for more"))


def show(rental_id: str, as_json: JsonFlag = False) -> None:
    """One rental: state, allocation, its timeline with pending reasons, its run on each node, and while
    it holds GPUs their last readings (utilization, memory, power)."""
    with logged_in() as client:
        rental = client.rental(rental_id)
        runs = [] if as_json else client.rental_runs(rental_id)
        live = not as_json and rental.state not in ENDED_STATES
        gpus = client.rental_gpus(rental_id) if live else []
        history = client.rental_gpu_history(rental_id, 60) if live else []
    emit(rental, as_json, lambda shown: _with_gpus(_with_runs(_rental_detail(shown), runs), gpus, history))


def stop(
    rental_ids: Annotated[
        list[str] | None, typer.Argument(metavar="[RENTAL...]", help="One rental id or more.")
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(help="Instead of ids: every live rental of this name, or starting so (sweep-*)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Stop rentals and release their GPUs (several: each in turn; one refused does not keep the rest)."""
    if bool(rental_ids) == (name is not None):
        errors.print(error_text("give rental ids or --name, one of them"))
        raise typer.Exit(EXIT_USAGE)
    if name is not None:
        with logged_in() as client:
            rental_ids = [r.id for r in client.rentals(LIVE_STATES, name)]
        if not rental_ids:
            errors.print(f"no live rental named {name}")
            return
    assert rental_ids
    if len(rental_ids) == 1:
        with logged_in() as client:
            rental = client.stop(rental_ids[0])
        emit(rental, as_json, _rental_detail)
        return
    stopped, refused = [], 0
    with logged_in() as client:
        for rental_id in rental_ids:
            try:
                stopped.append(client.stop(rental_id))
            except ApiError as error:
                errors.print(error_text(f"{rental_id}: {error.message} [{error.status} {error.code}]"))
                refused += 1
    if stopped:
        emit(stopped, as_json, _rentals_table)
    if refused:
        raise typer.Exit(EXIT_REFUSED)


def resize(
    rental_id: str,
    nodes: Annotated[int | None, typer.Option(min=1, help="Nodes it should span.")] = None,
    gpus: Annotated[int | None, typer.Option(min=1, help="Whole GPUs per node.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Resize a rental in place: fewer nodes or GPUs are given back; more are added on its own nodes (GPUs)
    or next to them (nodes) once free. A new GPU count restarts its workload; the rate follows. An elastic
    rental resized below its least size (--min-gpus) takes the new size as its least: it showed it can run
    there, and growing it again does not raise it."""
    if nodes is None and gpus is None:
        raise typer.BadParameter("give --nodes, --gpus or both", param_hint="--nodes")
    with logged_in({"nodes": "--nodes", "gpus": "--gpus"}) as client:
        rental = client.resize(rental_id, nodes=nodes, gpus=gpus)
    emit(rental, as_json, _rental_detail)


def bid(
    rental_id: str,
    price: Annotated[str, typer.Argument(help="The new bid per GPU-hour, e.g. 2.5.")],
    as_json: JsonFlag = False,
) -> None:
    """Change a spot rental's bid: waiting, it is ordered and placed by the new one; running, its rate is
    capped at it (at least the pool's spot floor), and a notice for the floor goes once the bid meets it."""
    try:
        bid_micros = money_to_micros(price)
    except SpecError as error:
        errors.print(error_text(f"PRICE: {error}"))
        raise typer.Exit(EXIT_USAGE) from None
    with logged_in({"bid_micros_per_gpu_hour": "PRICE"}) as client:
        rental = client.set_bid(rental_id, bid_micros)
    emit(rental, as_json, _rental_detail)


def _offer_unit(offer: OfferResponse) -> str:
    """GPU, a MIG profile, or `share<=0.50 24GiB` (the largest share one GPU has free, and its memory)."""
    if offer.shares:
        mib = offer.share_memory_mib
        memory = "" if mib is None else f" {mib // 1024}GiB"
        return f"share<={(offer.largest_share_milli or 0) / 1000:.2f}{memory}"
    return offer.mig_profile or "GPU"


def _offers_table(found: list[OfferResponse]):
    rows = [
        (
            o.gpu_model,
            _offer_unit(o),
            f"{o.region} ({o.jurisdiction})",
            o.tier,
            o.free_gpus,
            o.max_gpus_per_node,
            o.interconnect or "",
            micros(o.unit_price_micros_per_hour),
        )
        for o in found
    ]
    shown = table("Offers", ("model", "unit", "region", "tier", "free", "max/node", "net", "price/h"), rows)
    discounted = {o.tier: o.plan_discount_bp for o in found if o.plan_discount_bp}
    if discounted:
        parts = ", ".join(f"{bp / 100:.2f}% off {tier}" for tier, bp in discounted.items())
        shown.caption = f"prices include your plan's discount: {parts}"
    return shown


def _rentals_table(found: list[RentalResponse]):
    now = datetime.now(UTC)
    rows = [
        (
            r.id,
            r.request.name or "",
            r.state,
            age_text((now - r.created_at).total_seconds()),
            _shape(r),
            r.request.nodes,
            r.request.tier,
            r.request.image or "",
            _pending(r),
            ", ".join(a.node for a in r.allocation),
            micros(r.charged_micros) if r.charged_micros or r.allocation else "",
        )
        for r in found
    ]
    columns = ("id", "name", "state", "age", "shape", "nodes", "tier", "image", "pending", "on", "charged")
    # a column empty in every row is left out, so a narrow terminal keeps room for those with something
    kept = [i for i, name in enumerate(columns) if i < 4 or any(row[i] != "" for row in rows)]
    return table("Rentals", [columns[i] for i in kept], [tuple(row[i] for i in kept) for row in rows])


# what `preempted_by` says when it names no rental of the caller's
PREEMPTED_BY = {
    "another_tenant": "a higher-tier rental of another tenant",
    "below_floor": "the spot floor (its bid is below it)",
    "maintenance": "its node's maintenance",
}


def _with_gpus(
    detail: Group, gpus: list[RentalGpuResponse], history: list[RentalGpuHistoryResponse]
) -> Group:
    """The rental's detail and the GPUs it holds, with their last readings and the last hour's utilization
    (a MIG instance or share reads its whole GPU: marked so)."""
    if not any(g.read_at is not None for g in gpus):
        return detail
    end = datetime.now(UTC)
    start = (end - timedelta(minutes=59)).replace(second=0, microsecond=0)
    minutes = {(h.node, h.gpu_index): h.minutes for h in history}
    rows = [
        (
            g.node,
            g.gpu_index if g.whole_gpu else f"{g.gpu_index} ({_slice_name(g)}; whole GPU read)",
            "" if g.utilization_pct is None else f"{g.utilization_pct}%",
            sparkline(minutes.get((g.node, g.gpu_index), []), start, end),
            "" if g.memory_used_mib is None else f"{g.memory_used_mib:,}",
            "" if g.power_w is None else f"{g.power_w:.0f}",
            "" if g.read_at is None else f"{g.read_at:%H:%M:%S}",
        )
        for g in gpus
    ]
    columns = ("node", "GPU", "util", "last hour (suanli gpus)", "memory MiB", "power W", "read (UTC)")
    return Group(detail, table("GPUs", columns, rows))


def _slice_name(gpu: RentalGpuResponse) -> str:
    return gpu.mig_profile or f"{gpu.milli / 1000:g} share"


def _with_runs(detail: Group, runs: list[RentalRunResponse]) -> Group:
    """The rental's detail and, once its workload has run, each node's run (which rank failed, and how);
    a rental placed again after a re-queue has a run per placement, numbered."""
    if not runs:
        return detail
    several = len({r.placement for r in runs}) > 1
    rows = [
        (
            *((r.placement,) if several else ()),
            r.node,
            r.state,
            "" if r.exit_code is None else r.exit_code,
            "" if r.started_at is None else f"{r.started_at:%Y-%m-%d %H:%M:%S}",
            "" if r.ended_at is None else f"{r.ended_at:%Y-%m-%d %H:%M:%S}",
        )
        for r in sorted(runs, key=lambda r: (r.placement, r.node))
    ]
    headers = ("node", "state", "exit code", "started (UTC)", "ended (UTC)")
    return Group(detail, table("runs", (("placement",) if several else ()) + headers, rows))


def _rental_detail(rental: RentalResponse) -> Group:
    request = rental.request
    named = f" ({request.name})" if request.name else ""
    header = f"[bold]{rental.id}[/bold]{named}: {rental.state}, {_shape(rental)} x {request.nodes} node(s)"
    header += f", {request.tier}"
    if request.image:
        header += f", image {request.image}"
    if rental.pending_reason:
        header += f", pending: {_pending(rental)}"
    if rental.price_micros_per_hour is not None:
        header += f", {micros(rental.price_micros_per_hour)}/h"
    if (pending := rental.resize_pending) is not None and request.min_gpus is None:  # elastic: said below
        header += (
            f" (resize pending: holds {pending.held_gpus} GPU(s) x {pending.held_nodes} node(s) at that rate "
            "until the scheduler applies it)"
        )
    if rental.charged_micros or rental.allocation:
        so_far = "" if rental.state in ENDED_STATES else " so far"
        header += f", charged {micros(rental.charged_micros)}{so_far}"
    if rental.time_limit_at is not None:
        header += f", stops at {rental.time_limit_at:%Y-%m-%d %H:%M:%S} UTC (max duration)"
    if request.checkpoints:
        header += ", checkpoints"
        if rental.time_left_s is not None:
            header += f" ({rental.time_left_s:.0f} s of its max duration left)"
    if request.min_gpus is not None:
        held = sum(len(a.slices) for a in rental.allocation)
        total = request.gpus * request.nodes
        header += f", elastic from {request.min_gpus} GPU" + ("" if request.min_gpus == 1 else "s")
        if rental.allocation and held < total:
            header += f" (holds {held} of {total}; grows as GPUs free)"
    if rental.borrowed:
        header += " (on borrowed GPUs: taken back with notice when a rental ahead needs them)"
    if rental.preempted_by:
        word = " until" if rental.state == "preempting" else " at"  # an ended victim's notice ran out then
        deadline = f"{word} {rental.notice_deadline:%Y-%m-%d %H:%M:%S} UTC" if rental.notice_deadline else ""
        by = PREEMPTED_BY.get(rental.preempted_by, rental.preempted_by)
        if rental.notice_keeps_gpus is not None:  # a trim: it runs on after the deadline
            header += f", preempted in part by {by}{deadline} (then runs on {rental.notice_keeps_gpus} GPUs)"
        else:
            header += f", preempted by {by}{deadline}"
    slices = [
        (rank, a.node, s.gpu_index, s.mig_profile or ("whole" if s.milli == 1000 else f"{s.milli} milli"))
        for rank, a in enumerate(rental.allocation)
        for s in a.slices
    ]
    timeline = [(f"{e.at:%Y-%m-%d %H:%M:%S}", e.kind, e.reason or "", e.message) for e in rental.events]
    parts: list = [header]
    if rental.pending_message:  # the figures as of the last cycle; the timeline's are as the reason changed
        parts.append(Text(f"waiting: {rental.pending_message}"))
    if slices:
        parts.append(table("allocation", ("rank", "node", "GPU", "slice"), slices))
    parts.append(table("timeline", ("at (UTC)", "event", "reason", "message"), timeline))
    return Group(*parts)


def _pending(rental: RentalResponse) -> str:
    """The pending reason, with its expected start: a backfill head's reserved one, a preemptor's deadline."""
    reason = rental.pending_reason or ""
    if rental.expected_start_at is not None:
        reason += f", starts by {rental.expected_start_at:%Y-%m-%d %H:%M} UTC"
    return reason


def _shape(rental: RentalResponse) -> str:
    request = rental.request
    model = request.gpu_model or "any"
    if request.mig_profile:
        return f"{model}:{request.mig_profile}"
    if request.share_milli:
        return f"{model}:{request.share_milli / 1000:g}"
    return f"{model}:{request.gpus}" if request.gpus else "cpu"


def server(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8080,
    workers: Annotated[
        int, typer.Option(min=1, max=64, help="Worker processes serving the API (more than 1: PostgreSQL).")
    ] = 1,
) -> None:
    """Run the suanli server (database from SUANLI_DATABASE_URL; SQLite under your data dir by default)."""
    # imported here, not at the top: the server pulls in FastAPI and SQLAlchemy, which every other
    # command would otherwise pay for at start-up
    from suanli.api.server import BadSettings, DatabaseUnreachable, WorkersNeedPostgres, serve

    try:
        serve(host, port, workers=workers)
    except WorkersNeedPostgres as error:
        raise typer.BadParameter(str(error), param_hint="--workers") from None
    except BadSettings as error:
        for problem in error.problems:
            errors.print(error_text(problem))
        raise typer.Exit(EXIT_USAGE) from None
    except DatabaseUnreachable as error:
        errors.print(error_text(str(error)))
        raise typer.Exit(EXIT_UNREACHABLE) from None
