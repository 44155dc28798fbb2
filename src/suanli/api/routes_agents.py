"""/v1/join-tokens (operators), /v1/agents/{register,heartbeat,logs} (node key), rental logs and runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, status
from fastapi.security import HTTPAuthorizationCredentials

from suanli.api.deps import CallerDep, ServicesDep, bearer
from suanli.api.errors import AGENT_ERROR_RESPONSES, RATE_LIMITED
from suanli.api.mappers import slice_response
from suanli.app.agent_records import NodeAssignment, WorkloadReport
from suanli.app.agents import AgentService
from suanli.app.gpu_history import MAX_MINUTES
from suanli.app.notices import notice_cause
from suanli.wire.agent_schemas import (
    AgentRegisterRequest,
    AgentRegisterResponse,
    AssignmentResponse,
    ExecAssignmentResponse,
    GpuMinuteResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinTokenCreateRequest,
    JoinTokenResponse,
    LogChunkRequest,
    LogChunkResponse,
    LogResponse,
    RentalGpuHistoryResponse,
    RentalGpuResponse,
    RentalRunResponse,
)

router = APIRouter(prefix="/v1", responses=AGENT_ERROR_RESPONSES)


def agents(request: Request) -> AgentService:
    return request.app.state.services.agents


def node_key(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> str | None:
    return credentials.credentials if credentials is not None else None


AgentsDep = Annotated[AgentService, Depends(agents)]
NodeKeyDep = Annotated[str | None, Depends(node_key)]


@router.post("/join-tokens", status_code=status.HTTP_201_CREATED, tags=["agents"])
def create_join_token(
    body: JoinTokenCreateRequest, caller: CallerDep, service: AgentsDep
) -> JoinTokenResponse:
    """A single-use token an agent spends to register as `node` (admin or provider)."""
    token, secret = service.create_token(caller, body.node, body.ttl_s)
    return JoinTokenResponse(id=token.id, node=token.node, expires_at=token.expires_at, token=secret)


@router.post("/agents/register", tags=["agents"])
def register(body: AgentRegisterRequest, service: AgentsDep) -> AgentRegisterResponse:
    """An agent joins with a single-use join token and its host's inventory; it gets its node key."""
    node, key = service.register(body.token, body.inventory)
    return AgentRegisterResponse(node=node, node_key=key, heartbeat_interval_s=service.interval_s)


@router.post("/agents/heartbeat", tags=["agents"])
def heartbeat(body: HeartbeatRequest, key: NodeKeyDep, service: AgentsDep) -> HeartbeatResponse:
    """An agent's periodic report (its workloads' states, GPU telemetry); the answer: what it should run."""
    reports = [
        WorkloadReport(
            w.rental_id,
            w.state,
            w.exit_code,
            w.message,
            w.attempt,
            w.ran_s,
            w.restarts,
            w.failed_exit_code,
            w.placement,
            w.since_exit_s,
        )
        for w in body.workloads
    ]
    telemetry = [t.model_dump() for t in body.telemetry]
    layouts = None
    if body.mig_layouts is not None:
        layouts = {
            g.index: tuple((i.start_slot, i.profile, i.busy) for i in g.instances) for g in body.mig_layouts
        }
    answer = service.heartbeat(key, reports, telemetry, body.runs_images, layouts, body.gpu_models)
    return HeartbeatResponse(
        node=answer.node,
        heartbeat_interval_s=answer.interval_s,
        server_time=service.clock.now(),
        assignments=[_assignment(a) for a in answer.assignments],
        execs=[
            ExecAssignmentResponse(
                id=e.id,
                rental_id=e.rental_id,
                command=list(e.command),
                timeout_s=e.timeout_s,
                state=e.state,
                stdin=e.stdin,
                tty=e.tty,
                port=e.port,
                separate_stderr=e.separate_stderr,
            )
            for e in answer.execs
        ],
    )


@router.post("/agents/logs", tags=["agents"])
def upload_log(body: LogChunkRequest, key: NodeKeyDep, service: AgentsDep) -> LogChunkResponse:
    """An agent appends a chunk of a rental's output at its offset; the answer is the bytes stored."""
    stored = service.upload_log(key, body.rental_id, body.offset, body.data, body.size_bytes)
    return LogChunkResponse(stored_bytes=stored)


@router.get("/rentals/{rental_id}/logs", tags=["rentals"], responses=RATE_LIMITED)
def rental_logs(
    rental_id: str,
    caller: CallerDep,
    services: ServicesDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    node: Annotated[
        str | None, Query(max_length=200, description="Only this node's output (a multi-node rental's rank).")
    ] = None,
    tail: Annotated[
        int | None,
        Query(
            description="Instead of `offset`: the last this many characters (the answer's `offset` says "
            "where they start)."
        ),
    ] = None,
) -> LogResponse:
    """The rental's output (stdout and stderr) from character `offset`, or its end (`tail`), every node's as
    it came or one node's; poll with `next_offset` to follow."""
    start, data, next_offset, done = services.agents.read_log(caller, rental_id, offset, node, tail)
    return LogResponse(rental_id=rental_id, offset=start, next_offset=next_offset, data=data, done=done)


@router.get("/rentals/{rental_id}/gpus", tags=["rentals"], responses=RATE_LIMITED)
def rental_gpus(rental_id: str, caller: CallerDep, services: ServicesDep) -> list[RentalGpuResponse]:
    """The GPUs the rental holds now with their last readings (utilization, memory used, power) from the
    nodes' agents, as `nvidia-smi` shows them; empty once it has ended."""
    return [
        RentalGpuResponse(
            node=g.node,
            gpu_index=g.gpu_index,
            milli=g.milli,
            mig_profile=g.mig_profile,
            utilization_pct=g.utilization_pct,
            memory_used_mib=g.memory_used_mib,
            power_w=g.power_w,
            read_at=g.read_at,
            whole_gpu=g.whole_gpu,
        )
        for g in services.agents.gpus(caller, rental_id)
    ]


@router.get("/rentals/{rental_id}/gpus/history", tags=["rentals"], responses=RATE_LIMITED)
def rental_gpu_history(
    rental_id: str,
    caller: CallerDep,
    services: ServicesDep,
    minutes: Annotated[int, Query(ge=1, le=MAX_MINUTES, description="How far back (a week at most).")] = 60,
) -> list[RentalGpuHistoryResponse]:
    """The GPUs the rental held in the last `minutes`, running or ended, each with its readings by minute
    while it held it (mean utilization and power, most memory used); kept a week."""
    return [
        RentalGpuHistoryResponse(
            node=h.node,
            gpu_index=h.gpu_index,
            milli=h.milli,
            mig_profile=h.mig_profile,
            whole_gpu=h.whole_gpu,
            since=h.since,
            until=h.until,
            minutes=[
                GpuMinuteResponse(
                    minute=m.minute,
                    utilization_pct=None if m.utilization_pct is None else round(m.utilization_pct, 1),
                    memory_used_mib=m.memory_used_mib,
                    power_w=None if m.power_w is None else round(m.power_w, 1),
                )
                for m in h.minutes
            ],
        )
        for h in services.gpu_history.history(caller, rental_id, minutes)
    ]


@router.get("/rentals/{rental_id}/runs", tags=["rentals"], responses=RATE_LIMITED)
def rental_runs(rental_id: str, caller: CallerDep, services: ServicesDep) -> list[RentalRunResponse]:
    """Where the rental ran, as its agents reported: state, exit code, start, end (billing stops there)."""
    return [
        RentalRunResponse(
            node=r.node,
            state=r.state,
            exit_code=r.exit_code,
            started_at=r.started_at,
            ended_at=r.ended_at,
            last_heartbeat_at=r.last_heartbeat_at,
            restarts=r.restarts,
            placement=r.placement,
        )
        for r in services.agents.runs(caller, rental_id)
    ]


def _assignment(a: NodeAssignment) -> AssignmentResponse:
    spec = a.rental.spec
    return AssignmentResponse(
        rental_id=a.rental.id,
        action=a.action,  # type: ignore[arg-type]
        slices=[slice_response(s) for s in a.allocation.slices],
        command=list(spec.command),
        env=dict(spec.env),
        image=spec.image,
        restart=spec.restart,  # type: ignore[arg-type]
        max_restarts=spec.max_restarts,
        notice_deadline=a.notice_deadline,
        notice_cause=None if a.notice_deadline is None else notice_cause(a.rental),  # type: ignore[arg-type]
        notice_keeps_gpus=a.notice_keeps_gpus,
        notice_releases_node=a.notice_releases_node,
        peers=list(a.peers),
        node_rank=a.node_rank,
        master_port=a.rental.master_port,
        attempt=a.attempt,
        restarts=a.restarts,
        placement=a.rental.placements,
    )
