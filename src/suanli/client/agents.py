"""Calls a node agent makes (with the node key), and the operator's join tokens that let one register."""

from __future__ import annotations

from typing import Any

from suanli.client.calls import Call
from suanli.client.errors import checks_arguments
from suanli.client.transport import Transport, segment
from suanli.wire.agent_schemas import (
    AgentRegisterRequest,
    AgentRegisterResponse,
    ExecReportRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinTokenCreateRequest,
    JoinTokenResponse,
    LogChunkRequest,
    LogChunkResponse,
)
from suanli.wire.schemas import ExecResponse


class AgentCalls(Transport):
    """The calls on join tokens (an operator key) and the node agent's own (the node key)."""

    @checks_arguments
    def create_join_token(self, node: str, ttl_s: float | None = None) -> JoinTokenResponse:
        body = JoinTokenCreateRequest(node=node, ttl_s=ttl_s)
        return self._ask(Call("POST", "/v1/join-tokens", JoinTokenResponse, body=body))

    @checks_arguments
    def register_agent(self, token: str, inventory: dict[str, Any]) -> AgentRegisterResponse:
        body = AgentRegisterRequest(token=token, inventory=inventory)
        return self._ask(Call("POST", "/v1/agents/register", AgentRegisterResponse, body=body))

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        """Report workloads and telemetry; safe to retry (reports are states, not increments)."""
        return self._ask(Call("POST", "/v1/agents/heartbeat", HeartbeatResponse, body=request, retry=True))

    def report_exec(self, exec_id: str, report: ExecReportRequest) -> ExecResponse:
        """Say a command started or how it ended; safe to retry (a state it has already is a no-op)."""
        return self._ask(
            Call("POST", f"/v1/agents/execs/{segment(exec_id)}", ExecResponse, body=report, retry=True)
        )

    @checks_arguments
    def upload_log(self, rental_id: str, offset: int, data: bytes) -> LogChunkResponse:
        """Send one chunk read at byte `offset` of the rental's log; retried safely (the server dedups)."""
        body = LogChunkRequest(
            rental_id=rental_id,
            offset=offset,
            data=data.decode("utf-8", errors="replace"),
            size_bytes=len(data),
        )
        return self._ask(Call("POST", "/v1/agents/logs", LogChunkResponse, body=body, retry=True))
