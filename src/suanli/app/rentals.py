"""Rentals: create (idempotent per tenant and key), read, list, stop, resize; spec -> domain `Request`.

A rental is created `pending`; the scheduler places it. Another tenant's rental is `NotFound`, never a hint.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import Any

from suanli.app.bids import change_bid
from suanli.app.billing import BillingService
from suanli.app.booking import SHARE_UNIT_MILLI
from suanli.app.coverage import pass_on_coverage
from suanli.app.errors import Conflict, Duplicate, Invalid
from suanli.app.fleet import FleetCache
from suanli.app.ids import check_idempotency_key, new_id
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory, Wake
from suanli.app.pricing import ANY_REGION, contract_room_milli
from suanli.app.rate_limits import RateLimit
from suanli.app.records import (
    END_STATES,
    EXPECTED_START_STEP_S,
    LIVE_STATES,
    Caller,
    DryRun,
    Rental,
    RentalEvent,
    RentalPage,
    RentalSpec,
    RentalView,
    Trial,
)
from suanli.app.tenants import owned_rental
from suanli.domain.billing.meter import DEFAULT_MINIMUM_S, PostedCharges
from suanli.domain.billing.money import charge_micros, round_half_up
from suanli.domain.billing.pricebook import resized_rate
from suanli.domain.catalog import Catalog, Vendor
from suanli.domain.elastic import running_model
from suanli.domain.elastic_start import Drain, at_size, least_size
from suanli.domain.errors import CatalogError, RequestError
from suanli.domain.images import RUNS_IMAGES_LABEL, check_image
from suanli.domain.plan import NodeAllocation, Placement, Reason
from suanli.domain.quotas import over_quota, pinned, quota_groups, request_gpus
from suanli.domain.request import Constraints, GpuSelector, GpuShare, MigSlice, Request, Tier, WholeGpus
from suanli.domain.scheduler import landed, most_gpus_per_node, never_fits, nominate
from suanli.domain.workload_env import env_problem

LIST_LIMIT = 1000
# the reason on the event of a stop asked while the rental was under notice: the cycle ends it `stopped`
STOP_UNDER_NOTICE = "stopped_under_notice"
LEFT_UNDER_NOTICE = "left_under_notice"  # the reason on the event of a victim whose workload ended early
TIME_LIMIT = "time_limit"  # the reason on the event of a rental stopped at its declared max duration
# domain field names -> wire field names, for errors
_FIELDS = {"gpu_milli": "share_milli", "gpu_memory_mib": "share_memory_mib", "node_count": "nodes"}


def to_request(rental: Rental) -> Request:
    """The domain request for a stored rental (its spec was checked at creation)."""
    spec = rental.spec
    shape: WholeGpus | MigSlice | GpuShare
    if spec.mig_profile is not None:
        shape = MigSlice(spec.mig_profile)
    elif spec.share_milli is not None:
        shape = GpuShare(spec.share_milli, spec.share_memory_mib)
    else:
        shape = WholeGpus(spec.gpus)
    return Request(
        id=rental.id,
        shape=shape,
        node_count=spec.nodes,
        selector=GpuSelector(models=frozenset({spec.gpu_model}) if spec.gpu_model else frozenset()),
        cpu_milli=spec.cpu_milli,
        memory_mib=spec.memory_mib,
        tenant=rental.tenant_id,
        tier=Tier.parse(spec.tier),
        bid_micros_per_hour=spec.bid_micros_per_gpu_hour,
        constraints=Constraints(
            jurisdictions=frozenset(spec.jurisdictions),
            regions=frozenset(spec.regions),
            providers=frozenset(spec.providers),
            labels={**spec.labels, RUNS_IMAGES_LABEL: "true"}
            if spec.image is not None
            else dict(spec.labels),
        ),
        submitted_at_s=rental.created_at.timestamp(),
        max_duration_s=spec.max_duration_s if rental.time_left_s is None else rental.time_left_s,
        checkpoints=spec.checkpoints,
        min_gpus=_least_gpus(spec),
    )


def _field_of(reason: Reason, spec: RentalSpec, model_in_fleet: bool) -> str:
    """The request field to change for a rental that `reason` says never fits."""
    if reason is Reason.NO_MATCHING_GPU:
        if spec.mig_profile is not None:
            return "mig_profile"
        if spec.share_milli is not None:
            return "share_memory_mib" if spec.share_memory_mib else "gpu_model"
        return "gpus" if model_in_fleet else "gpu_model"
    fields = {
        Reason.GANG_TOO_LARGE: "nodes",
        Reason.RESIDENCY: "jurisdictions",
        Reason.NODE_TOO_SMALL: "memory_mib" if spec.memory_mib else "cpu_milli",
        Reason.CONSTRAINTS: "regions" if spec.regions else ("providers" if spec.providers else "labels"),
    }
    return fields.get(reason, "gpu_model")


def check_spec(spec: RentalSpec, catalog: Catalog) -> None:
    """Raise Invalid naming the wire field when the spec can never be valid."""
    if spec.mig_profile is None and spec.share_milli is None and spec.gpus < 1:
        raise Invalid(  # it would hold a GPU host's CPUs unpriced (the price book prices GPUs)
            "a rental holds GPUs: 1 or more whole GPUs per node, a MIG instance (mig_profile) or a share "
            "of a GPU (share_milli); CPU-only rentals are not offered",
            field="gpus",
        )
    if spec.mig_profile is not None and spec.share_milli is not None:
        raise Invalid("ask for a MIG profile or a share, not both", field="share_milli")
    if (spec.mig_profile is not None or spec.share_milli is not None) and spec.gpus > 1:
        what = "MIG instance" if spec.mig_profile is not None else "share of a GPU"
        raise Invalid(
            f"a rental takes one {what} per node: gpus is 0 or 1 with it, not {spec.gpus}", field="gpus"
        )
    if spec.share_memory_mib and spec.share_milli is None:  # else stored, and ignored: no limit is set
        raise Invalid(
            "only with a share of a GPU (share_milli): whole GPUs and MIG instances hold all their memory",
            field="share_memory_mib",
        )
    if spec.share_milli is not None and spec.share_milli % SHARE_UNIT_MILLI:
        raise Invalid(f"a share is a multiple of {SHARE_UNIT_MILLI} milli (1% of a GPU)", field="share_milli")
    if spec.gpu_model:
        models = [m for m in catalog.models if m.matches(spec.gpu_model)]
        if not models:
            known = ", ".join(sorted({m.family for m in catalog.models}))
            raise Invalid(
                f"unknown GPU model or family {spec.gpu_model!r}; known families: {known}", field="gpu_model"
            )
        if spec.mig_profile is not None and not any(
            m.mig and m.mig.has_profile(spec.mig_profile) for m in models
        ):
            raise Invalid(f"no {spec.gpu_model} has MIG profile {spec.mig_profile!r}", field="mig_profile")
        if spec.share_milli is not None and not any(m.vendor is Vendor.NVIDIA for m in models):
            vendors = " or ".join(sorted({m.vendor.label for m in models}))
            raise Invalid(
                f"shares of a GPU are limited with NVIDIA MPS; {spec.gpu_model} is made by {vendors}: "
                "rent whole GPUs of it",
                field="share_milli",
            )
    if spec.tier == "reserved":  # else anyone could pay the contract price and outrank on-demand
        raise Invalid(
            "reserved is the tier a contract gives: rent on_demand in your contract's GPU model and region "
            "and the rental is admitted as reserved, up to its count (suanli contracts)",
            field="tier",
        )
    if spec.bid_micros_per_gpu_hour is not None and spec.tier != "spot":
        raise Invalid("a bid is for the spot tier only", field="bid_micros_per_gpu_hour")
    if spec.min_gpus is not None:
        if spec.mig_profile is not None or spec.share_milli is not None or spec.gpus < 1:
            raise Invalid("only a rental of whole GPUs can start smaller", field="min_gpus")
        if spec.min_gpus > spec.gpus * spec.nodes:
            raise Invalid(f"at most the {spec.gpus * spec.nodes} GPUs it asks for", field="min_gpus")
    if (problem := env_problem(spec.env)) is not None:
        raise Invalid(problem, field="env")
    if spec.image is not None:
        try:
            check_image(spec.image)
        except CatalogError as error:
            raise Invalid(str(error), field="image") from None
    try:
        to_request(Rental("rnt_check", "ten_check", "pending", spec, _EPOCH))
    except RequestError as error:
        raise Invalid(str(error), field=_FIELDS.get(error.field, error.field) or None) from None


def _least_gpus(spec: RentalSpec) -> int | None:
    """The spec's least size, no more than it asks for since a resize (a resize to fewer GPUs lowers it)."""
    if spec.min_gpus is None:
        return None
    return min(spec.min_gpus, max(spec.gpus * spec.nodes, 1))


def spec_fingerprint(spec: RentalSpec) -> str:
    """SHA-256 of the request, which tells a retry (same key, same request) from a clash (same key, another
    request). A field added later counts only when set, so a rental created before it keeps its fingerprint
    and its retry is still a retry."""
    fields = asdict(spec)
    for later, unset in (
        ("image", None),
        ("name", None),
        ("idle_stop_s", None),
        ("checkpoints", False),
        ("min_gpus", None),
    ):
        if fields[later] == unset:
            del fields[later]
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=list).encode()).hexdigest()


# `preempted_by` as a tenant reads it when the rental its capacity goes to is another tenant's
ANOTHER_TENANT = "another_tenant"


class RentalService:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        clock: Clock,
        catalog: Catalog,
        signal: Wake,
        billing: BillingService | None = None,
        trial: Callable[[Rental], Trial] | None = None,
        dry_run_limit: RateLimit | None = None,
        fleet: FleetCache | None = None,
    ):
        """`trial`: what the scheduler would do with a rental now (`Scheduler.trial`), for dry runs, each
        tenant's as often as `dry_run_limit` allows."""
        self.uow, self.clock, self.catalog, self.signal = uow, clock, catalog, signal
        self.billing, self.trial, self.dry_run_limit = billing, trial, dry_run_limit
        self.fleet = fleet  # to refuse a region the fleet does not have (a typo would wait forever)

    def create(
        self, caller: Caller, spec: RentalSpec, idempotency_key: str | None
    ) -> tuple[RentalView, bool]:
        """The new rental and True, or the one created earlier with the same key and False."""
        check_idempotency_key(idempotency_key)
        check_spec(spec, self.catalog)
        fingerprint = spec_fingerprint(spec)
        tenant_id = caller.tenant.id
        now = self.clock.now()
        rental = Rental(
            new_id("rnt"), tenant_id, "pending", spec, now, None, None, idempotency_key, fingerprint
        )
        created = RentalEvent(now, "created")
        # Insert first: the UNIQUE (tenant, key) decides between concurrent requests with one key, and a
        # repeated key costs a second transaction (the failed insert ends the first) instead of every
        # new rental paying for a look-up. The quote and the funds check read in the same transaction.
        try:
            with self.uow() as uow:
                rental = self._quoted(uow, rental)
                uow.rentals.add(rental)
                uow.rentals.add_event(rental.id, created)
                uow.commit()
        except Duplicate:
            earlier = self._earlier(tenant_id, idempotency_key or "", fingerprint)
            if earlier is None:
                raise
            return earlier, False
        self.signal()
        return RentalView(rental, (), (created,)), True

    def dry_run(self, caller: Caller, spec: RentalSpec) -> DryRun:
        """What creating `spec` now would do, creating nothing: the same checks (a bad spec or too little
        balance fails as `create` would), the rate it is quoted, and where the scheduler would start it,
        taking it in the queue's order with the rentals waiting, or why it would wait (`Scheduler.trial`)."""
        assert self.trial is not None, "dry runs need the scheduler's trial"
        check_spec(spec, self.catalog)
        tenant_id = caller.tenant.id
        if self.dry_run_limit is not None:
            self.dry_run_limit.hit(tenant_id)
        with self.uow() as uow:
            rental = self._quoted(uow, Rental(new_id("rnt"), tenant_id, "pending", spec, self.clock.now()))
        quoted = None if rental.quote is None else int(rental.quote["final_micros_per_hour"])
        trial = self.trial(rental)
        rate = trial.price_micros_per_hour if trial.price_micros_per_hour is not None else quoted
        # at the size it would start at: an elastic rental's limit is stretched while it holds fewer GPUs
        limit_s = spec.max_duration_s if trial.gpus is None else time_limit_s(rental, trial.gpus)
        most = (
            None if rate is None or limit_s is None else charge_micros(rate, max(limit_s, DEFAULT_MINIMUM_S))
        )
        return DryRun(trial, rate, quoted, most)

    def _check_fleet(self, uow: UnitOfWork, rental: Rental, held: Sequence[NodeAllocation] = ()) -> None:
        """Invalid, naming the field to change, for a rental the current fleet could never run, empty as it
        may be: a region it does not have, a GPU model or count no node has, more nodes than a region has
        (a typo or a wrong size would wait for ever). Only what the fleet file fixes counts (models, modes,
        MIG profiles the model has, sizes, places), never what is busy or how a host's MIG is laid out now.
        A live rental's new size (`held`: its allocation) is judged on the model it runs on, as it grows onto
        no other."""
        spec = rental.spec
        snapshot = None if self.fleet is None else self.fleet.empty_snapshot(uow)
        if snapshot is None:
            return
        regions = snapshot.fleet.regions
        unknown = [r for r in spec.regions if r not in regions]
        if unknown:
            known = ", ".join(sorted(regions))
            message = f"no region {', '.join(unknown)} in the fleet; its regions: {known}"
            raise Invalid(message, field="regions")
        request = _sized(rental)
        if held and held[0].node in snapshot.by_name:
            request = landed(snapshot, request, Placement(rental.id, tuple(held)))
        why = never_fits(snapshot, request)
        if why is not None:
            fits_a_node = most_gpus_per_node(snapshot, request.selector) > 0
            raise Invalid(why.message, field=_field_of(why.reason, spec, fits_a_node))

    def _check_quota(
        self,
        uow: UnitOfWork,
        rental: Rental,
        before: Rental | None = None,
        held: Sequence[NodeAllocation] = (),
    ) -> None:
        """Invalid for a rental larger on its own than one of its tenant's GPU quotas: it would wait until an
        operator raised the quota, so it is refused now, as a cloud refuses a request past a limit. A resize
        (`before`: the rental as it was) is checked only when it grows: shrinking is always allowed. A live
        rental's (`held`: its allocation) counts against the quotas of the model it runs on only, as it grows
        onto no other (`elastic.running_model`)."""
        limits = uow.terms.limits().get(rental.tenant_id)
        if limits is None or not limits.gpu_quota:
            return
        request = _sized(rental)
        if before is not None and request_gpus(request) <= request_gpus(_sized(before)):
            return
        if (least := least_size(request)) is not None:  # elastic: it may start, and stay, at its least size
            nodes, gpus = least
            request = replace(request, shape=WholeGpus(gpus), node_count=nodes, min_gpus=None)
        # it counts against the quotas of the model it lands on: it is refused when every model of the fleet
        # it could land on has one it exceeds (a family's name, `H100`, reaches each model's quota)
        snapshot = None if self.fleet is None else self.fleet.empty_snapshot(uow)
        class_ids = nominate(snapshot, request)[0] if snapshot is not None else []
        models = sorted({snapshot.classes[i].model.name for i in class_ids}) if snapshot is not None else []
        if snapshot is not None and held and held[0].node in snapshot.by_name:
            models = [running_model(snapshot, Placement(rental.id, tuple(held)))]
        ways = [pinned(request, model) for model in models] or [request]
        refusals = []
        for way in ways:
            groups = quota_groups(self.catalog, way)
            why = over_quota(limits, way, groups)
            if why is None:
                return
            one_node_fits = over_quota(limits, replace(way, node_count=1), groups) is None
            refusals.append((why, one_node_fits))
        why, one_node_fits = refusals[
            0
        ]  # the field to lower: nodes when one node's GPUs are within the quota
        if (everywhere := over_quota(limits, ways[0], ())) is not None:  # `*` binds on every model
            why = everywhere
        elif len({w for w, _ in refusals}) > 1 and len(models) == len(refusals):  # a quota per model
            why = "; ".join(f"on {model}, {w}" for model, (w, _) in zip(models, refusals, strict=True))
        field = "nodes" if rental.spec.nodes > 1 and one_node_fits else "gpus"
        raise Invalid(f"{why}; an operator can raise it (suanli admin limits)", field=field)

    def _quoted(self, uow: UnitOfWork, rental: Rental) -> Rental:
        """`rental` with its quote when billing is on; `PaymentRequired` when its tenant cannot pay for it."""
        self._check_fleet(uow, rental)
        self._check_quota(uow, rental)
        if self.billing is None:
            return rental
        tenant_id, now = rental.tenant_id, rental.created_at
        uow.tenants.get(tenant_id, lock=True)  # one create of a tenant at a time counts the others' minimums
        facts = uow.terms.money_facts(tenant_id)
        snapshot = None if self.fleet is None else self.fleet.empty_snapshot(uow)
        landing = None  # the models of the fleet it could run on: its price is one of theirs
        if snapshot is not None:
            landing = frozenset(snapshot.classes[i].model.name for i in nominate(snapshot, _sized(rental))[0])
        shape = to_request(rental).shape
        quote = self.billing.quote(rental.spec, shape, now, tenant_id, uow, facts, among=landing or None)
        self.billing.check_funds(uow, tenant_id, quote, facts, now)
        return replace(rental, quote=quote)

    def _earlier(self, tenant_id: str, key: str, fingerprint: str) -> RentalView | None:
        with self.uow() as uow:
            earlier = uow.rentals.by_idempotency_key(tenant_id, key)
            if earlier is None:
                return None
            if earlier.fingerprint != fingerprint:
                raise Conflict(
                    "this Idempotency-Key was used with a different request", field="Idempotency-Key"
                )
            return _view(uow, earlier, None)

    def get(self, caller: Caller, rental_id: str) -> RentalView:
        with self.uow() as uow:
            uow.read_snapshot()  # the rental, its allocation, events and rates as of one moment
            return _view(uow, self._owned(uow, caller, rental_id), caller)

    def list(
        self,
        caller: Caller,
        states: Sequence[str] = (),
        name: str | None = None,
        limit: int = LIST_LIMIT,
        after: str | None = None,
        updated_after: datetime | None = None,
    ) -> RentalPage:
        """A page of the caller's rentals (an admin's: everyone's), newest first: at most `limit`
        (`LIST_LIMIT` at most) past the rental `after` (the last of the page before), only those in `states`,
        named `name` (ending in `*`: a prefix) and changed at or after `updated_after` when given. `after`
        must be a rental the caller may see: another's, or none, is refused naming `after`, as if it did not
        exist."""
        with self.uow() as uow:
            uow.read_snapshot()
            tenant_id = None if caller.is_admin else caller.tenant.id
            if after is not None:
                cursor = uow.rentals.get(after)
                if cursor is None or (tenant_id is not None and cursor.tenant_id != tenant_id):
                    raise Invalid(f"no rental {after} to list past", field="after")
            size = min(limit, LIST_LIMIT)
            rentals = uow.rentals.list(
                tenant_id, size + 1, states, name, after, updated_after
            )  # 1 more: next?
            return RentalPage(tuple(_views(uow, rentals[:size], caller)), more=len(rentals) > size)

    def stop_overdue(self) -> list[str]:
        """Stop the rentals at their time limit (`stop_overdue`); the ids stopped."""
        with self.uow() as uow:
            stopped = stop_overdue(uow, self.clock.now())
            uow.commit()
        if stopped:
            self.signal(ended=True)
        return stopped

    def stop(self, caller: Caller, rental_id: str) -> RentalView:
        with self.uow() as uow:
            rental = self._owned(uow, caller, rental_id)
            ended = stop_in(uow, rental, self.clock.now(), "by API")
            uow.commit()
        self.signal(ended=ended)
        return self.get(caller, rental_id)

    def resize(self, caller: Caller, rental_id: str, nodes: int | None, gpus: int | None) -> RentalView:
        """Pending: change the ask. Live, in place: fewer nodes are released at once; a new GPU count on each
        of its nodes, and more nodes nearest its own, are applied by the leader when the capacity is there
        (its workload restarts with a new GPU count; until then it keeps what it has). The rate follows its
        GPUs."""
        with self.uow() as uow:
            rental = self._owned(uow, caller, rental_id, lock=True)
            if rental.state in END_STATES or rental.state in ("preempting", "stopping"):
                raise Conflict(f"rental {rental.id} is {rental.state}", field="state")
            spec = rental.spec
            whole = spec.mig_profile is None and spec.share_milli is None
            if gpus is not None and not whole:
                raise Invalid("only whole-GPU rentals change their GPU count", field="gpus")
            if gpus == 0 and whole and rental.state in LIVE_STATES:  # before the least size is judged
                raise Invalid("a live rental keeps at least one GPU per node; stop it instead", field="gpus")
            new_spec = replace(spec, nodes=nodes or spec.nodes, gpus=spec.gpus if gpus is None else gpus)
            if (
                spec.min_gpus is not None
            ):  # an elastic rental asked smaller than its least size: that is its size
                new_spec = replace(new_spec, min_gpus=min(spec.min_gpus, new_spec.gpus * new_spec.nodes))
            check_spec(new_spec, self.catalog)
            if new_spec != spec:
                held = uow.rentals.allocation(rental.id) if rental.state in LIVE_STATES else []
                self._check_fleet(uow, replace(rental, spec=new_spec), held)
                self._check_quota(uow, replace(rental, spec=new_spec), before=rental, held=held)
            live = rental.state in LIVE_STATES
            if live and not whole and new_spec.nodes != spec.nodes:
                raise Invalid("a live MIG or share rental keeps its node count", field="nodes")
            if live and spec.gpus > 0 and new_spec.gpus == 0:
                raise Invalid("a live rental keeps at least one GPU per node; stop it instead", field="gpus")
            if new_spec == spec:
                return _view(uow, rental, caller)  # nothing to change
            now = self.clock.now()
            message = f"nodes {spec.nodes} -> {new_spec.nodes}, gpus {spec.gpus} -> {new_spec.gpus}"
            uow.rentals.update_spec(rental.id, replace(rental, spec=new_spec))
            if live:
                allocation = uow.rentals.allocation(rental.id)
                if new_spec.nodes < len(allocation):
                    dropped = [a.node for a in allocation[new_spec.nodes :]]
                    uow.rentals.release(rental.id, dropped, at=now)
                    message += f"; released {', '.join(dropped)}"
                    per_node = per_node_gpus(allocation)
                    kept = {a.node for a in allocation[: new_spec.nodes]}
                    until = _recorded_next_start(uow, kept, rental.time_limit_at)
                    before, after = (len(allocation), per_node), (new_spec.nodes, per_node)
                    if follow_size(uow, rental, before, after, now, until) and until is not None:
                        message += (
                            f"; its time limit stretches no later than {until:%Y-%m-%d %H:%M:%S} UTC, when "
                            "another rental is planned to start on its nodes"
                        )
                held_gpus = len(allocation[0].slices) if allocation else new_spec.gpus
                if new_spec.gpus != held_gpus:
                    message += f"; changing to {new_spec.gpus} GPUs per node in place (the workload restarts)"
                if new_spec.nodes > len(allocation):
                    message += "; growing in place"
            uow.rentals.add_event(rental.id, RentalEvent(now, "resized", None, message))
            uow.commit()
        self.signal()
        return self.get(caller, rental_id)

    def set_bid(self, caller: Caller, rental_id: str, bid_micros_per_gpu_hour: int) -> RentalView:
        """A spot rental's new bid (`bids.change_bid`); the leader re-prices and re-judges it next cycle."""
        with self.uow() as uow:
            rental = self._owned(uow, caller, rental_id, lock=True)
            now = self.clock.now()
            fleet = None if self.fleet is None else self.fleet.load(uow)[1]
            floor_of = self.billing.spot_floor_of(uow, now)
            if change_bid(uow, rental, bid_micros_per_gpu_hour, fleet, floor_of, now):
                uow.commit()
        self.signal()
        return self.get(caller, rental_id)

    _owned = staticmethod(owned_rental)


def follow_size(
    uow: UnitOfWork,
    rental: Rental,
    before: tuple[int, float],
    after: tuple[int, float],
    now: datetime,
    stretch_until: datetime | None = None,
) -> bool:
    """A live rental now `after` (nodes, GPUs per node) instead of `before` is re-priced at its new size
    from `now` on (`resized_price`); the size is recorded for its invoice's GPU-seconds and energy, and an
    elastic rental's time limit moves with its speed (the work left takes as many GPU-seconds), but a
    shrink stretches it no later than `stretch_until` (a start planned on its nodes): True when it did; what
    the cap cut is kept (`uncapped_limit_at`) and given back by a growth, up to the capped limit."""
    since = rental.placed_at or rental.created_at
    uow.rentals.record_size(rental.id, now, after, since=since, previous=before)
    rate = rental.price_micros_per_hour
    was, will = _milli(before), _milli(after)
    limit = rental.time_limit_at
    capped = False
    if rental.spec.min_gpus is not None and limit is not None and was > 0 and will > 0 and will != was:
        moved = limit_at_speed(rental, now, was, will)
        uncapped = None
        if stretch_until is not None and moved > stretch_until:
            moved, uncapped, capped = max(limit, stretch_until), moved, True
        elif rental.uncapped_limit_at is not None and moved > limit:  # still past the cap: it stays
            moved, uncapped = limit, moved
        uow.rentals.set_time_limit(rental.id, moved, uncapped)
    if rate is None or was <= 0 or will <= 0 or will == was:
        return capped
    new_rate, quote = resized_price(uow, rental, rate, was, will, now)
    uow.rentals.change_rate(rental.id, now, new_rate, since=since, previous=rate, quote=quote)
    return capped


def limit_at_speed(rental: Rental, now: datetime, was: float, will: float) -> datetime:
    """Where a live elastic rental's time limit goes when it runs on `will` GPUs (or milli) instead of `was`:
    its limit is for its work at its full size, and what is left of it runs at the new speed; counted from
    the limit before a cap cut it (`uncapped_limit_at`), so a growth before the cap gives that work back."""
    work_until = rental.uncapped_limit_at or rental.time_limit_at
    assert work_until is not None, "a rental with a time limit"
    return now + (work_until - now) * (was / will)


def _recorded_next_start(uow: UnitOfWork, nodes: set[str], limit: datetime | None) -> datetime | None:
    """The first start the leader recorded as planned on any of `nodes` at or after `limit` (a rental ending
    by then was let run ahead of it), less the step by which a recorded start may lag the plan: how far a
    shrink applied here, outside the leader's cycle, may stretch a time limit (`follow_size`)."""
    if limit is None:
        return None
    recorded = [
        (frozenset(r.reserved_nodes), r.expected_start_at.timestamp())
        for r in uow.rentals.pending()
        if r.expected_start_at is not None and r.reserved_nodes
    ]
    start_s = Drain(tuple(recorded)).next_start(nodes, limit.timestamp() - EXPECTED_START_STEP_S)
    return None if start_s is None else datetime.fromtimestamp(start_s - EXPECTED_START_STEP_S, UTC)


def time_limit_s(rental: Rental, gpus: float) -> float | None:
    """Seconds from `rental`'s placement on `gpus` GPUs to its time limit (None: it has none): its declared
    max duration, which an elastic rental declares for its full size, so on fewer GPUs it is stretched in
    proportion (`at_size`), as the simulator runs it; its resizes move it again (`follow_size`)."""
    return at_size(to_request(rental), gpus).max_duration_s


def _sized(rental: Rental) -> Request:
    """`rental`'s domain request for what its size alone decides (the fleet check, quotas), its image left
    out: which hosts run images is heard from their agents, not read from the fleet file."""
    return to_request(replace(rental, spec=replace(rental.spec, image=None)))


def resized_price(
    uow: UnitOfWork, rental: Rental, rate: int, was: int, will: int, now: datetime
) -> tuple[int, dict[str, Any] | None]:
    """(rate, quote) of a rental resized from `was` to `will` GPU milli. Its contract-covered GPUs stay
    covered (up to its new size, more where its contracts have room) and only the rest pays, in proportion
    to the discounted rate its placement quoted for its placement size (its size row at its latest
    placement), so up-and-down resizes come back to the same rate. Spot, or no quote: in proportion to its
    rate."""
    quote = dict(rental.quote) if rental.quote is not None else None
    if quote is None or "base_micros_per_hour" not in quote or Tier.parse(rental.spec.tier) is Tier.SPOT:
        return round_half_up(rate * will, was), None
    sizes = uow.rentals.sizes([rental.id]).get(rental.id) or [(now, 0, 0.0)]
    placed_at = rental.placed_at or sizes[0][0]  # the size its (latest) placement's quote was for
    at_placement = [row for row in sizes if row[0] <= placed_at] or sizes[:1]
    placed = _milli(at_placement[-1][1:]) or was
    discounted = int(quote["base_micros_per_hour"]) - sum(
        int(d["micros_per_hour"]) for d in quote.get("discounts") or []
    )
    covered = int(quote.get("contract_covered_gpu_milli") or 0)
    model, region = str(quote.get("model") or ""), quote.get("region")
    if model and "+" not in model:
        room = contract_room_milli(
            uow, rental.tenant_id, model, None if region == ANY_REGION else region, now, rental.id
        )
        covered = max(covered, room)
    covered = min(covered, will)
    new_rate, coverage = resized_rate(max(0, discounted), placed, will, covered)
    quote.update(
        contract_covered_gpu_milli=covered,
        contract_coverage_micros_per_hour=coverage,
        final_micros_per_hour=new_rate,
    )
    return new_rate, quote


def per_node_gpus(allocation: Sequence[NodeAllocation]) -> float:
    """GPUs a rental holds on one node (its first): whole GPUs count 1, shares and MIG slices their part."""
    return sum(s.milli for s in allocation[0].slices) / 1000 if allocation else 0.0


def added_price(
    uow: UnitOfWork, rental: Rental, before: tuple[int, float], after: tuple[int, float], now: datetime
) -> int:
    """What growing `rental` from `before` to `after` (nodes, GPUs per node) adds to its rate, priced as
    `follow_size` will price it (contract coverage included): for the spend-cap check before it grows."""
    rate = rental.price_micros_per_hour
    was, will = _milli(before), _milli(after)
    if rate is None or was <= 0 or will <= was:
        return 0
    return max(0, resized_price(uow, rental, rate, was, will, now)[0] - rate)


def _milli(size: tuple[int, float]) -> int:
    nodes, per_node = size
    return nodes * round(per_node * 1000)


def stop_in(uow: UnitOfWork, rental: Rental, now: datetime, why: str, reason: str | None = None) -> bool:
    """Stop a rental inside a unit of work: a running workload is stopped by its agent (`stopping`), one
    not started yet is stopped and released at once; one under notice ends now, its deadline brought to
    now (its agent kills it; the next cycle ends it `stopped` and its preemptor takes what was promised);
    ended or stopping ones are left alone. `reason` goes on the event (`time_limit`: the leader stopped it at
    its declared max duration). True when it ended here (its final charge is due now)."""
    if rental.state == "preempting":
        if rental.notice_deadline is not None and rental.notice_deadline <= now:
            return False  # ending already: the next cycle ends it
        uow.rentals.advance_deadline(rental.id, now)
        message = f"stop requested {why} during its notice: it ends now, billed to now"
        uow.rentals.add_event(rental.id, RentalEvent(now, "stopping", reason or STOP_UNDER_NOTICE, message))
    elif rental.state in ("starting", "running"):
        uow.rentals.set_state(rental.id, "stopping", expect=(rental.state,), reason=None)
        uow.rentals.add_event(rental.id, RentalEvent(now, "stopping", reason, f"stop requested {why}"))
    elif rental.state not in END_STATES and rental.state not in ("stopping", "preempting"):
        uow.rentals.set_state(rental.id, "stopped", expect=("pending", *LIVE_STATES), reason=None)
        uow.rentals.release(rental.id, at=now)
        pass_on_coverage(uow, rental, now)
        uow.rentals.add_event(rental.id, RentalEvent(now, "stopped", reason, f"stopped {why}"))
        return True
    return False


def stop_overdue(uow: UnitOfWork, now: datetime) -> list[str]:
    """Stop every placed, starting or running rental at or past its time limit (placement + its declared
    max duration, stretched for an elastic rental while it holds less than its size), as Slurm ends a job
    at its time limit: backfill and maintenance plans count on it. One under notice whose deadline comes
    later ends at its time limit (its deadline brought to it, `stop_in`), whole, a trim's victim too."""
    stopped = []
    for rental in uow.rentals.overdue(now):
        limit_s = rental.spec.max_duration_s
        why = f"at its max duration ({limit_s} s since placement)"
        if rental.spec.min_gpus is not None:
            why = f"at its max duration ({limit_s} s at its full size, longer while it ran on fewer GPUs)"
        stop_in(uow, rental, now, why, TIME_LIMIT)
        stopped.append(rental.id)
    return stopped


def _view(uow: UnitOfWork, rental: Rental, viewer: Caller | None) -> RentalView:
    """`rental` as `viewer` may read it (None: its own tenant, who created it just now), with its allocation,
    events, rate changes and what it was charged so far."""
    return _views(uow, [rental], viewer)[0]


def _views(uow: UnitOfWork, rentals: Sequence[Rental], viewer: Caller | None) -> list[RentalView]:
    """`_view` of each of `rentals` (a list's page), each part read once for all of them: a constant number
    of reads however many rentals (one per rental per part made 1,000 rentals take seconds)."""
    if not rentals:
        return []
    ids = [r.id for r in rentals]
    placed = [r.id for r in rentals if r.placed_at is not None]
    charged = uow.ledger.posted_charges(ids)
    rates = uow.rentals.rate_changes(placed) if placed else {}
    allocations = uow.rentals.live_allocations_of(ids)
    events = uow.rentals.events_of(ids)
    preemptors = _preemptor_tenants(uow, rentals, viewer)
    return [
        RentalView(
            replace(rental, preempted_by=_shown(rental, viewer, preemptors)),
            tuple(allocations.get(rental.id, ())),
            tuple(events.get(rental.id, ())),
            tuple(rates.get(rental.id, ())),
            charged.get(rental.id, PostedCharges()).micros,
        )
        for rental in rentals
    ]


def _preemptor_tenants(uow: UnitOfWork, rentals: Sequence[Rental], viewer: Caller | None) -> dict[str, str]:
    """The tenant of each rental that preempted one of `rentals`, when `viewer` must not see others' (one
    read)."""
    if viewer is None or viewer.is_admin:
        return {}
    preemptors = sorted({r.preempted_by for r in rentals if r.preempted_by is not None})
    return {found.id: found.tenant_id for found in uow.rentals.by_ids(preemptors)} if preemptors else {}


def _shown(rental: Rental, viewer: Caller | None, preemptor_tenants: Mapping[str, str]) -> str | None:
    """`rental.preempted_by` as `viewer` may see it: another tenant's rental is `ANOTHER_TENANT`, not its
    id (a tenant learns nothing of others' rentals); its own, the other causes (`below_floor`,
    `maintenance`) and everything for an operator as stored."""
    preemptor_id = rental.preempted_by
    if preemptor_id is None or viewer is None or viewer.is_admin:
        return preemptor_id
    owner = preemptor_tenants.get(preemptor_id)
    return ANOTHER_TENANT if owner is not None and owner != viewer.tenant.id else preemptor_id


_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
