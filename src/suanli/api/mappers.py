"""App records -> wire responses, and wire requests -> app records. Only here do the two meet."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime

from suanli.app.contracts import ContractOrder, ContractQuote
from suanli.app.fleet import FleetChange, NodeChange, NodeView
from suanli.app.offers import Offer
from suanli.app.records import (
    LIVE_STATES,
    ApiKey,
    ContractOffer,
    ContractRecord,
    DryRun,
    MaintenanceWindow,
    RentalSpec,
    RentalView,
    Tenant,
    Webhook,
)
from suanli.domain.billing.ledger import Transaction
from suanli.domain.contracts import ContractShortfall
from suanli.domain.plan import Slice
from suanli.wire.billing_schemas import LedgerTransactionResponse, PostingResponse
from suanli.wire.schemas import (
    ContractCreateRequest,
    ContractOfferResponse,
    ContractQuoteResponse,
    ContractResponse,
    ContractShortfallResponse,
    FleetResponse,
    KeyResponse,
    MaintenanceResponse,
    MigInstanceResponse,
    NodeAllocationResponse,
    NodeDrainResponse,
    NodeResponse,
    OfferResponse,
    QuoteResponse,
    RateChangeResponse,
    RentalCreateRequest,
    RentalDryRunResponse,
    RentalEventResponse,
    RentalResponse,
    ResizePendingResponse,
    SliceResponse,
    TenantResponse,
    WebhookResponse,
    escape_lone_surrogates,
)


def tenant(t: Tenant) -> TenantResponse:
    return TenantResponse(id=t.id, name=t.name, role=t.role, created_at=t.created_at)  # type: ignore[arg-type]


def key(k: ApiKey, secret: str | None = None) -> KeyResponse:
    return KeyResponse(
        id=k.id,
        tenant_id=k.tenant_id,
        label=k.label,
        created_at=k.created_at,
        revoked=k.revoked,
        secret=secret,
    )


def spec(body: RentalCreateRequest) -> RentalSpec:
    data = body.model_dump()
    for name in ("regions", "jurisdictions", "providers", "command"):
        data[name] = tuple(data[name])
    return RentalSpec(**data)


def dry_run(found: DryRun) -> RentalDryRunResponse:
    trial = found.trial
    return RentalDryRunResponse(
        starts_now=bool(trial.nodes),
        nodes=list(trial.nodes),
        preempts=trial.victims,
        pending_reason=trial.reason,
        message=trial.message,
        price_micros_per_hour=found.price_micros_per_hour,
        quote_micros_per_hour=found.quote_micros_per_hour,
        max_cost_micros=found.max_cost_micros,
        rentals_waiting=trial.waiting,
        contract_covered_gpus=trial.covered_gpu_milli / 1000,
        expected_start_at=trial.expected_start_at,
        head_start_at=trial.head_start_at,
    )


def rental(view: RentalView) -> RentalResponse:
    r = view.rental
    data = asdict(r.spec)
    data["labels"], data["env"] = dict(r.spec.labels), dict(r.spec.env)
    return RentalResponse(
        id=r.id,
        tenant_id=r.tenant_id,
        state=r.state,  # type: ignore[arg-type]
        # a spec stored before requests were checked for lone surrogates is answered with them escaped
        request=RentalCreateRequest(
            **escape_lone_surrogates({k: list(v) if isinstance(v, tuple) else v for k, v in data.items()})
        ),
        allocation=[
            NodeAllocationResponse(
                node=a.node,
                cpu_milli=a.cpu_milli,
                memory_mib=a.memory_mib,
                slices=[slice_response(s) for s in a.slices],
            )
            for a in view.allocation
        ],
        pending_reason=r.pending_reason,
        pending_message=r.pending_message,
        price_micros_per_hour=r.price_micros_per_hour,
        created_at=r.created_at,
        preempted_by=r.preempted_by,
        quote=None if r.quote is None else QuoteResponse.model_validate(dict(r.quote)),
        notice_deadline=r.notice_deadline,
        notice_keeps_gpus=r.kept_gpus if r.state == "preempting" else None,
        expected_start_at=r.expected_start_at,
        time_limit_at=r.time_limit_at if r.state in LIVE_STATES else None,
        time_left_s=r.time_left_s if r.state == "pending" else None,
        borrowed=r.borrowed and r.state in LIVE_STATES,
        events=[
            RentalEventResponse(at=e.at, kind=e.kind, reason=e.reason, message=e.message) for e in view.events
        ],
        rate_changes=[
            RateChangeResponse(from_at=at, rate_micros_per_hour=rate) for at, rate in view.rate_changes
        ],
        resize_pending=resize_pending(view),
        charged_micros=view.charged_micros,
    )


def resize_pending(view: RentalView) -> ResizePendingResponse | None:
    """The shape a live whole-GPU rental asks for beside the one it holds, while they differ: a resize's reply
    is written before the leader applies it, so its allocation and rate are still the held shape's."""
    spec, held = view.rental.spec, view.allocation
    whole = spec.mig_profile is None and spec.share_milli is None and spec.gpus > 0
    if view.rental.state not in LIVE_STATES or not whole or not held:
        return None
    held_gpus = len(held[0].slices)
    if (spec.nodes, spec.gpus) == (len(held), held_gpus):
        return None
    return ResizePendingResponse(nodes=spec.nodes, gpus=spec.gpus, held_nodes=len(held), held_gpus=held_gpus)


def slice_response(s: Slice) -> SliceResponse:
    return SliceResponse(
        gpu_index=s.gpu_index,
        milli=s.milli,
        memory_mib=s.memory_mib,
        mig_profile=s.mig_profile,
        mig_start=s.mig_start,
    )


def node(view: NodeView) -> NodeResponse:
    n = view.node
    return NodeResponse(
        name=n.name,
        region=n.region,
        topology=n.topology_path,
        gpu_model=n.gpu_model,
        gpu_count=n.gpu_count,
        gpu_mode=n.gpu_mode.value,  # type: ignore[arg-type]
        cpu_milli=n.cpu_milli,
        memory_mib=n.memory_mib,
        provider=n.provider,
        labels=dict(n.labels),
        schedulable=view.schedulable,
        free_gpu_milli=view.free_gpu_milli,
        maintenance_until=view.maintenance_until,
        mig_instances=[MigInstanceResponse(**asdict(i)) for i in view.mig_instances],
        mig_host_gpus=list(view.mig_host_gpus),
        gpu_mismatch=view.gpu_mismatch,
    )


def offer(o: Offer) -> OfferResponse:
    return OfferResponse(**asdict(o))


def contract(c: ContractRecord) -> ContractResponse:
    return ContractResponse(**asdict(c))


def contract_order(body: ContractCreateRequest) -> ContractOrder:
    """The terms a signing, a quote or an offer asks for (an offer's price and expiry aside)."""
    terms = (body.gpu_model, body.count, body.region, body.starts_at, body.ends_at)
    return ContractOrder(*terms, body.tenant_id)


def contract_offer(offer: ContractOffer) -> ContractOfferResponse:
    return ContractOfferResponse(**asdict(offer))  # type: ignore[arg-type]  # state: one of its literals


def contract_quote(q: ContractQuote) -> ContractQuoteResponse:
    return ContractQuoteResponse(**asdict(q))


def maintenance(
    window: MaintenanceWindow, left_short: Sequence[ContractShortfall] = ()
) -> MaintenanceResponse:
    return MaintenanceResponse(
        **asdict(window),
        short_contracts=[s.contract.id for s in left_short],
        shortfalls=[shortfall(s) for s in left_short],
    )


def fleet_put(change: FleetChange) -> FleetResponse:
    fleet = change.fleet
    return FleetResponse(
        regions=len(fleet.regions),
        nodes=len(fleet.nodes),
        gpus=fleet.gpu_count,
        short_contracts=[s.contract.id for s in change.left_short],
        shortfalls=[shortfall(s) for s in change.left_short],
    )


def drained(change: NodeChange) -> NodeDrainResponse:
    return NodeDrainResponse(
        **node(change.view).model_dump(),
        short_contracts=[s.contract.id for s in change.left_short],
        shortfalls=[shortfall(s) for s in change.left_short],
    )


def shortfall(s: ContractShortfall) -> ContractShortfallResponse:
    c = s.contract
    return ContractShortfallResponse(
        contract_id=c.id,
        tenant_id=c.tenant,
        gpu_model=c.model,
        region=c.region,
        count=c.gpus,
        starts_at=datetime.fromtimestamp(c.start_s, UTC),
        ends_at=datetime.fromtimestamp(c.end_s, UTC),
        short_at=datetime.fromtimestamp(s.at_s, UTC),
        contracted_gpus=s.contracted_gpus,
        in_service_gpus=s.in_service_gpus,
        short_gpus=s.short_gpus,
    )


def transaction(tx: Transaction, seq: int | None = None) -> LedgerTransactionResponse:
    return LedgerTransactionResponse(
        seq=seq,
        key=tx.key,
        kind=tx.kind.value,
        at_s=tx.at_s,
        ref=tx.ref,
        memo=tx.memo,
        prev_hash=tx.prev_hash,
        hash=tx.hash,
        postings=[
            PostingResponse(
                account_kind=p.account.kind.value, owner=p.account.owner, amount_micros=p.amount_micros
            )
            for p in tx.postings
        ],
    )


def webhook(webhook: Webhook, secret: str | None = None) -> WebhookResponse:
    """A webhook as its tenant reads it; `secret` only in the answer that made it."""
    return WebhookResponse(
        id=webhook.id,
        url=webhook.url,
        created_at=webhook.created_at,
        failures=webhook.failures,
        retry_at=webhook.retry_at,
        last_error=webhook.last_error,
        delivered_at=webhook.delivered_at,
        secret=secret,
        events=list(webhook.event_kinds),
    )
