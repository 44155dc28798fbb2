"""The object graph of one server: engine, migrations, unit of work, services, scheduler, metrics."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest, multiprocess
from sqlalchemy import Engine

from suanli.app.agents import AgentService
from suanli.app.billing import BillingService
from suanli.app.budgets import BudgetAlerts
from suanli.app.contract_offers import ContractOffers
from suanli.app.contracts import ContractService
from suanli.app.downtime import notice_horizon_s
from suanli.app.execs import ExecService
from suanli.app.fleet import FleetCache, FleetService
from suanli.app.gpu_history import GpuHistoryService
from suanli.app.ids import SystemClock
from suanli.app.invoices import InvoiceService
from suanli.app.limits import LimitsService
from suanli.app.maintenance import MaintenanceService
from suanli.app.offers import OfferService
from suanli.app.plan_windows import PlanWindows
from suanli.app.plans import PlanService
from suanli.app.ports import Clock
from suanli.app.rate_limits import RateLimit
from suanli.app.rentals import RentalService, stop_in, to_request
from suanli.app.scheduling import CycleReport, Scheduler
from suanli.app.sla import SlaService
from suanli.app.tenants import TenantService
from suanli.app.webhooks import WebhookService
from suanli.config import Settings
from suanli.domain.catalog_data import CATALOG
from suanli.domain.queue_order import BOOKED_QUEUE, GREEDY_QUEUE, PLATFORM_QUEUE
from suanli.loops.agent_reaper import ReaperLoop
from suanli.loops.meter_loop import MeterLoop
from suanli.loops.scheduler_loop import SchedulerLoop
from suanli.loops.webhook_loop import WebhookLoop, parse_url
from suanli.store.agent_repositories import SqlAgentUnitOfWork, SqlRunEnergy
from suanli.store.db import make_engine, migrate, session_factory, unit_of_work_factory
from suanli.store.leader import Leadership
from suanli.store.wakeups import Wakeups

GPU_STATES = ("idle", "partial", "busy", "cordoned")
# SUANLI_QUEUE: the domain's queue configuration each server queue runs
# (the conservative queue books every pending rental, GPUs free or not, so each shows its start)
SERVER_QUEUES = {
    "greedy": GREEDY_QUEUE,
    "backfill": PLATFORM_QUEUE,
    "conservative": replace(BOOKED_QUEUE, book_when_full=True),
}


class Metrics:
    """The scheduler's gauges, set by the leader's cycle. Under `suanli server --workers N`
    (`PROMETHEUS_MULTIPROC_DIR` set) every worker writes its values to that directory and a scrape of any
    worker reads them all: a gauge shows the value set most recently, which is the leader's."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        mode: dict[str, Any] = {"multiprocess_mode": "mostrecent"} if self.multiprocess else {}
        self.gpus = Gauge("suanli_gpus", "GPUs by state", ["state"], registry=self.registry, **mode)
        self.queue = Gauge(
            "suanli_queue_length", "Pending rentals by reason", ["reason"], registry=self.registry, **mode
        )
        self.decision = Histogram(
            "suanli_decision_seconds",
            "Time the scheduler took to decide one cycle",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.placed = Gauge(
            "suanli_last_cycle_placed", "Rentals placed by the last cycle", registry=self.registry, **mode
        )
        self.head_start = Gauge(
            "suanli_queue_head_start_timestamp_seconds",
            "Backfill queue: when the blocked head's reserved capacity frees up, as a Unix time (0: no "
            "blocked head, or its start is unbounded)",
            registry=self.registry,
            **mode,
        )
        self.scattered = Gauge(
            "suanli_gpus_scattered",
            "Free GPUs left in pieces: off the blocked head's reserved nodes, on nodes where none of the "
            "rentals waiting for capacity that could run there fits what is free",
            registry=self.registry,
            **mode,
        )
        self.mig = Gauge(
            "suanli_mig_instances",
            "MIG instances on schedulable nodes by profile, idle or busy (a rental holds it), as the "
            "scheduler lays them out (the hosts' reports, else the fleet file)",
            ["profile", "state"],
            registry=self.registry,
            **mode,
        )
        self._reasons: set[str] = set()
        self._mig_seen: set[tuple[str, str]] = set()

    def exposition(self) -> bytes:
        """The Prometheus text of this process, or of every worker in multiprocess mode."""
        if not self.multiprocess:
            return generate_latest(self.registry)
        gathered = CollectorRegistry()
        multiprocess.MultiProcessCollector(gathered)
        return generate_latest(gathered)

    def record(self, report: CycleReport) -> None:
        if report.dropped:
            return
        self.decision.observe(report.decision_s)
        self.placed.set(report.placed)
        self.head_start.set(report.head_start_s or 0)
        self.scattered.set(report.scattered_gpus)
        for state in GPU_STATES:
            self.gpus.labels(state).set(report.gpus.get(state, 0))
        for reason in self._reasons | set(report.pending):
            self.queue.labels(reason).set(report.pending.get(reason, 0))
        self._reasons |= set(report.pending)
        for key in self._mig_seen | set(report.mig_instances):  # a profile no longer laid out reads 0
            self.mig.labels(*key).set(report.mig_instances.get(key, 0))
        self._mig_seen |= set(report.mig_instances)


@dataclass
class Services:
    settings: Settings
    engine: Engine
    tenants: TenantService
    fleet: FleetService
    offers: OfferService
    rentals: RentalService
    contracts: ContractService
    scheduler: Scheduler
    loop: SchedulerLoop
    metrics: Metrics
    agents: AgentService | None = None  # set by build(); None only in hand-made test graphs
    reaper: ReaperLoop | None = None
    billing: BillingService | None = None
    meter: MeterLoop | None = None
    sla: SlaService | None = None
    plans: PlanService | None = None
    invoices: InvoiceService | None = None
    limits: LimitsService | None = None
    wakeups: Wakeups | None = None  # PostgreSQL: wake the leader's loops from any server process
    maintenance: MaintenanceService | None = None
    contract_offers: ContractOffers | None = None
    webhooks: WebhookService | None = None
    webhook_loop: WebhookLoop | None = None
    budget_alerts: BudgetAlerts | None = None
    api_rate: RateLimit | None = None  # every tenant request (`deps.caller`); None: no limit
    execs: ExecService | None = None
    gpu_history: GpuHistoryService | None = None


def build(settings: Settings, clock: Clock | None = None) -> Services:
    """The server's object graph; `clock` (default: the system's) is for replays such as the README's."""
    engine = make_engine(settings.database_url)
    migrate(engine)
    uow = unit_of_work_factory(engine)
    clock = clock or SystemClock()
    cache = FleetCache(CATALOG)
    billing = BillingService(
        uow,
        clock,
        CATALOG,
        cache,
        commission_bp=settings.commission_bp,
        prepaid=settings.prepaid,
        pipeline_meter=engine.dialect.name == "postgresql",  # SQLite has one writer: nothing to overlap
    )
    plans = PlanService(uow, clock, stop_in, prepaid=settings.prepaid, grace_s=settings.low_balance_grace_s)
    billing.terms = plans
    scheduler = Scheduler(
        uow,
        clock,
        CATALOG,
        cache,
        settings.policy,
        settings.policy_seed,
        notice_s=settings.preemption_notice_s,
        notice_by_tier_s=settings.preemption_notice_by_tier_s,
        queue=SERVER_QUEUES[settings.queue],
        pricer=lambda u, rental, placed, utilization, now: billing.placement_quote(
            u, rental, to_request(rental).shape, placed, utilization, now
        ),
        repricer=billing.spot_rates,
        floor_check=billing.below_floor,
        spot_floors=billing.spot_floor_of,
    )
    metrics = Metrics()
    meter: MeterLoop | None = None

    def on_report(report: CycleReport) -> None:
        metrics.record(report)
        if (report.preempted or report.stopped) and meter is not None:
            meter.signal_ended()  # victims ended: their final charges (a trim's new rate waits for the timer)

    loop = SchedulerLoop(scheduler, Leadership(engine), settings.scheduler_interval_s, on_report)
    sla = SlaService(uow, clock)
    budget_alerts = BudgetAlerts(uow, clock, stop_in)
    contracts = ContractService(
        uow, clock, cache, CATALOG, price_book=billing.price_book, refuses=plans.refuses
    )
    meter = MeterLoop(
        billing,
        loop.leadership,
        settings.meter_interval_s,
        sla,
        after=(
            plans.expire_grants,
            contracts.recognize,
            plans.enforce,
            BudgetAlerts(uow, clock, stop_in).check,
        ),
        before=(contracts.follow_coverage, PlanWindows(uow, clock).follow),
    )

    wakeups = Wakeups(engine)

    def wake(*, ended: bool = False) -> None:
        """A rental was created, stopped, resized or ended: schedule soon on the leader; when one `ended`,
        meter the ended rentals soon (their final charges; the live ones' charges wait for the meter's timer,
        so neither a burst of creates nor of ends posts a charge for every live rental). Another process's
        leader is woken by NOTIFY; this process's loops are not (they cannot run a cycle without the lead,
        and each try for it opens a connection); their timer tries for the lead anyway."""
        if loop.leadership.held:
            loop.signal()
            if ended:
                meter.signal_ended()
        else:
            wakeups.notify(ended=ended)

    tenants = TenantService(uow, clock)
    tenants.bootstrap(settings.bootstrap_admin_key)
    sessions = session_factory(engine)
    invoices = InvoiceService(uow, clock, CATALOG, cache, SqlRunEnergy(sessions))
    agents = AgentService(
        lambda: SqlAgentUnitOfWork(sessions),
        clock,
        wake,
        cache,
        heartbeat_interval_s=settings.agent_heartbeat_interval_s,
        missed_heartbeats=settings.agent_missed_heartbeats,
        token_ttl_s=settings.join_token_ttl_s,
    )
    dry_runs = RateLimit(settings.dry_run_rate, "dry runs")
    rentals = RentalService(uow, clock, CATALOG, wake, billing, scheduler.trial, dry_runs, cache)
    webhooks = WebhookService(uow, clock, parse_url)
    reaper = ReaperLoop(
        agents, loop.leadership, min(settings.agent_heartbeat_interval_s / 2, 5.0), rentals=rentals
    )
    services = Services(
        settings,
        engine,
        tenants,
        FleetService(uow, clock, cache, notice_horizon_s(scheduler.preemption)),
        OfferService(uow, clock, cache, CATALOG, billing.price_book, notice_horizon_s(scheduler.preemption)),
        rentals,
        contracts,
        scheduler,
        loop,
        metrics,
        agents,
        reaper,
        billing,
        meter,
        sla,
        plans,
        invoices,
        LimitsService(uow, clock, CATALOG),
        wakeups if wakeups.enabled else None,
        MaintenanceService(uow, clock, cache),
        ContractOffers(uow, clock, contracts),
        webhooks,
        WebhookLoop(
            webhooks, loop.leadership, settings.webhook_interval_s, private_ok=settings.webhook_private_ok
        ),
        budget_alerts,
        RateLimit(settings.api_rate, "requests") if settings.api_rate.strip() else None,
        ExecService(lambda: SqlAgentUnitOfWork(sessions), clock),
        GpuHistoryService(lambda: SqlAgentUnitOfWork(sessions), clock),
    )
    return services
