"""A rental's GPU history through the real app: a hand-driven agent's heartbeats carry readings, folded by
GPU and minute (mean utilization and power, most memory used); the rental sees only its own GPUs' minutes,
while it holds them and after it ends; another tenant sees nothing of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import FixedClock, logged_in_as, register_agent, wait_for
from suanli.cli import gpu_commands
from suanli.cli.main import app


class _At:
    """`datetime` for the CLI, with now at `at`."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self, tz=None) -> datetime:
        return self.at


def test_a_rentals_gpu_minutes_fold_its_heartbeats_readings(client: TestClient, tenant, monkeypatch) -> None:
    _, owner = tenant("history-owner")
    _, other = tenant("history-other")
    body = {"gpu_model": "L40S", "gpus": 1, "command": ["sleep", "600"]}
    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    (allocation,) = wait_for(client, rental["id"], owner, "placed")["allocation"]
    held = allocation["slices"][0]["gpu_index"]
    headers = register_agent(client, allocation["node"])
    services = client.app.state.services  # type: ignore[attr-defined]
    start = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=2)

    def beat(at: datetime, readings: dict[int, tuple], workloads: list | None = None) -> None:
        services.agents.clock = FixedClock(at)
        telemetry = [
            {"index": i, "utilization_pct": util, "memory_used_mib": mib, "power_w": watts}
            for i, (util, mib, watts) in readings.items()
        ]
        answer = client.post(
            "/v1/agents/heartbeat",
            json={"workloads": workloads or [], "telemetry": telemetry},
            headers=headers,
        )
        assert answer.status_code == 200, answer.text

    neighbour = (held + 1) % 4  # a GPU of the node the rental does not hold
    running = [{"rental_id": rental["id"], "state": "running"}]
    beat(start + timedelta(seconds=5), {held: (50, 1000, 300.0), neighbour: (99, 9999, 999.0)}, running)
    beat(start + timedelta(seconds=20), {held: (70, 3000, 500.0)})
    beat(start + timedelta(minutes=1, seconds=5), {held: (10, 500, None)})
    services.gpu_history.clock = FixedClock(start + timedelta(minutes=3))

    url = f"/v1/rentals/{rental['id']}/gpus/history"
    (gpu,) = client.get(url, headers=owner).json()
    assert (gpu["node"], gpu["gpu_index"], gpu["whole_gpu"], gpu["until"]) == (
        allocation["node"],
        held,
        True,
        None,
    )
    shown = [
        (m["minute"][11:16], m["utilization_pct"], m["memory_used_mib"], m["power_w"]) for m in gpu["minutes"]
    ]
    first, second = f"{start:%H:%M}", f"{start + timedelta(minutes=1):%H:%M}"
    assert shown == [(first, 60.0, 3000, 400.0), (second, 10.0, 500, None)]
    (recent,) = client.get(url, params={"minutes": 3}, headers=owner).json()
    assert [m["minute"][11:16] for m in recent["minutes"]] == [second]  # the last three minutes only

    monkeypatch.setattr(gpu_commands, "logged_in", logged_in_as(client, owner["Authorization"][7:]))
    monkeypatch.setattr(gpu_commands, "datetime", _At(start + timedelta(minutes=3)))
    said = CliRunner().invoke(app, ["gpus", rental["id"], "--minutes", "5"], env={"COLUMNS": "200"})
    assert said.exit_code == 0, said.output
    row = next(line for line in said.output.splitlines() if allocation["node"] in line)
    assert " ▅▁ " in row and "35%" in row and "3,000" in row and "400" in row, said.output  # 60% then 10%
    assert client.get(url, headers=other).status_code == 404
    assert client.get(url, params={"minutes": 0}, headers=owner).status_code == 422
    client.post(f"/v1/rentals/{rental['id']}/stop", headers=owner)
    beat(
        start + timedelta(minutes=2, seconds=5),
        {held: (0, 0, 60.0)},
        [{"rental_id": rental["id"], "state": "stopped"}],
    )
    assert wait_for(client, rental["id"], owner, "stopped")["state"] == "stopped"
    (ended,) = client.get(url, headers=owner).json()  # an ended rental keeps its history
    assert ended["until"] is not None and len(ended["minutes"]) >= 2
