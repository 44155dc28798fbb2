"""/v1/rentals/{id}/execs (the rental's tenant): run a command inside a running rental and read how it ended;
/v1/agents/execs/{id} (node key): the node's agent says it started one or how it ended."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, status

from suanli.api.deps import CallerDep
from suanli.api.errors import ERROR_RESPONSES
from suanli.api.routes_agents import AgentsDep, NodeKeyDep
from suanli.app.execs import Exec, ExecReport, ExecService
from suanli.wire.agent_schemas import ExecReportRequest
from suanli.wire.schemas import ExecCreateRequest, ExecResponse, ForwardCreateRequest

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)


def execs(request: Request) -> ExecService:
    return request.app.state.services.execs


ExecsDep = Annotated[ExecService, Depends(execs)]


def exec_response(found: Exec) -> ExecResponse:
    return ExecResponse(
        id=found.id,
        rental_id=found.rental_id,
        node=found.node,
        command=list(found.command),
        timeout_s=found.timeout_s,
        state=found.state,  # type: ignore[arg-type]
        exit_code=found.exit_code,
        output=found.output,
        output_truncated=found.output_truncated,
        output_chars=found.output_chars,
        message=found.message,
        created_at=found.created_at,
        started_at=found.started_at,
        ended_at=found.ended_at,
        stdin=found.stdin,
        tty=found.tty,
        port=found.port,
        separate_stderr=found.separate_stderr,
    )


@router.post("/rentals/{rental_id}/execs", status_code=status.HTTP_201_CREATED, tags=["rentals"])
def create_exec(
    rental_id: str, body: ExecCreateRequest, caller: CallerDep, service: ExecsDep
) -> ExecResponse:
    """Run a command inside the running rental on its node of `node_rank`, as its workload runs (its user,
    GPUs, environment, working directory; its container for an image). It is `queued` until that node's agent
    takes it (its next heartbeat); poll `GET .../execs/{id}` for its exit code and output."""
    created = service.create(
        caller,
        rental_id,
        body.command,
        body.node_rank,
        body.timeout_s,
        stdin=body.stdin,
        tty=body.tty,
        separate_stderr=body.separate_stderr,
    )
    return exec_response(created)


@router.post("/rentals/{rental_id}/forwards", status_code=status.HTTP_201_CREATED, tags=["rentals"])
def create_forward(
    rental_id: str, body: ForwardCreateRequest, caller: CallerDep, service: ExecsDep
) -> ExecResponse:
    """Forward TCP connections to `port` of the running rental on its node of `node_rank`, as `kubectl
    port-forward` does (`suanli port-forward`). It is `queued` until that node's agent takes it (its next
    heartbeat); attach to `.../execs/{id}/attach`: send `{"open": N}` for a connection N, then frames of 4
    bytes of N (big-endian) and its bytes, both ways; `{"close": N, "half": true}` either way passes a
    half-close on, `{"close": N}` either way ends it (the agent's may say why in `error`). The rental's
    processes share its node's network, so this reaches what they do."""
    return exec_response(service.forward(caller, rental_id, body.port, body.node_rank, body.timeout_s))


@router.get("/rentals/{rental_id}/execs", tags=["rentals"])
def list_execs(
    rental_id: str,
    caller: CallerDep,
    service: ExecsDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[ExecResponse]:
    """The rental's commands, newest first."""
    return [exec_response(found) for found in service.list(caller, rental_id, limit)]


@router.get("/rentals/{rental_id}/execs/{exec_id}", tags=["rentals"])
def get_exec(rental_id: str, exec_id: str, caller: CallerDep, service: ExecsDep) -> ExecResponse:
    """One command, shell or forward run in a rental: its state and exit code."""
    return exec_response(service.get(caller, rental_id, exec_id))


@router.post("/agents/execs/{exec_id}", tags=["agents"])
def report_exec(
    exec_id: str, body: ExecReportRequest, key: NodeKeyDep, agents: AgentsDep, service: ExecsDep
) -> ExecResponse:
    """A node's agent: it started the command or it still runs (`running`, with what it printed since),
    or how it ended (`exited`, `failed`)."""
    node = agents.authenticate(key).node
    report = ExecReport(
        body.state, body.exit_code, body.output, body.output_truncated, body.message, body.output_from_chars
    )
    found = service.report(node, exec_id, report)
    return exec_response(found)
