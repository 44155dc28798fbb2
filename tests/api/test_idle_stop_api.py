"""Idle stop through the real app with a hand-driven agent: a rental with `idle_stop_s` is stopped (reason
`idle`) once its GPUs' telemetry has read idle that long since they were last busy; a beat without
readings neither ends nor extends it; it needs whole GPUs."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient

from conftest import register_agent, wait_for

H100 = {"gpu_model": "H100-SXM-80GB", "gpus": 2, "command": ["python", "notebook.py"], "idle_stop_s": 600}


class Shifted:
    """The app's clock moved by `offset_s` (the agent service's `now`)."""

    def __init__(self, clock, offset_s: float) -> None:
        self.clock, self.offset_s = clock, offset_s

    def now(self):
        return self.clock.now() + timedelta(seconds=self.offset_s)


def test_a_rental_idle_past_its_limit_is_stopped_and_a_busy_gpu_keeps_it(client: TestClient, tenant) -> None:
    _, owner = tenant("idler")
    rental = client.post("/v1/rentals", json=H100, headers=owner).json()
    assert rental["request"]["idle_stop_s"] == 600
    placed = wait_for(client, rental["id"], owner, "placed")
    node, gpus = placed["allocation"][0]["node"], [s["gpu_index"] for s in placed["allocation"][0]["slices"]]
    node_headers = register_agent(client, node)
    agents = client.app.state.services.agents
    clock = agents.clock

    def beat(at_s: float, *utilization: int | None) -> str:
        agents.clock = Shifted(clock, at_s)
        try:
            telemetry = [
                {"index": i, "utilization_pct": u} for i, u in zip(gpus, utilization, strict=True) if u != -1
            ]
            body = {"workloads": [{"rental_id": rental["id"], "state": "running"}], "telemetry": telemetry}
            assert client.post("/v1/agents/heartbeat", json=body, headers=node_headers).status_code == 200
        finally:
            agents.clock = clock
        return client.get(f"/v1/rentals/{rental['id']}", headers=owner).json()["state"]

    assert beat(0, 0, 0) == "running"  # started now: idle, not yet for long
    assert beat(300, 0, 40) == "running"  # one GPU busy: the idle time starts again at 300 s
    assert beat(899, 0, 1) == "running"  # idle 599 s since the busy reading
    assert beat(2000, -1, 0) == "running"  # one GPU unread: might be busy; nothing decided
    assert beat(2001, 0, 4) == "stopping"  # idle 1,701 s, past 600 s: stopped as asked
    events = client.get(f"/v1/rentals/{rental['id']}", headers=owner).json()["events"]
    assert events[-1]["kind"] == "stopping" and events[-1]["reason"] == "idle", events[-1]
    assert "idle (under 5% utilization) for 600 s" in events[-1]["message"]


def test_idle_stop_needs_whole_gpus_and_at_least_a_minute(client: TestClient, tenant) -> None:
    _, owner = tenant("idle-bad")
    for body in (
        {"gpu_model": "L40S", "gpus": 0, "share_milli": 500, "idle_stop_s": 600},
        {"gpu_model": "A100-80GB", "mig_profile": "3g.40gb", "gpus": 0, "idle_stop_s": 600},
        {**H100, "idle_stop_s": 30},
    ):
        refused = client.post("/v1/rentals", json=body, headers=owner)
        assert refused.status_code == 422 and "idle_stop_s" in refused.text, refused.text
