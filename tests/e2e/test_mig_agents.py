"""End to end on a carved A100 host (a server on SQLite and one `suanli agent` with a declared probe): a
MIG rental placed where its instance does not exist yet runs once the agent has made it, and sees it alone."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_agents import ADMIN_KEY, Platform, running_platform, wait_for_state, wait_until

from suanli.agent.probe import declared_mig_uuid
from suanli.client import Client
from suanli.wire.schemas import RentalCreateRequest

FLEET = """
[regions.lab]
jurisdiction = "EU"
grid_gco2_per_kwh = 380
pue = 1.25

[[nodes]]
name = "mig-01"
topology = "lab/z1/pod-a/leaf-01"
cpu_milli = 64000
memory_mib = 262144
gpus = { model = "A100-80GB", count = 1, mode = "mig", mig_layout = ["4g.40gb", "2g.20gb", "1g.10gb"] }
"""


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    with running_platform(tmp_path, FLEET, ["mig-01"]) as p:
        yield p


def test_a_mig_slice_placed_where_no_instance_exists_runs_on_the_instance_the_agent_makes(
    platform: Platform,
) -> None:
    """The GPU is carved 4g+2g+1g; a 7g.80gb rental needs all of it: the agent destroys the three idle
    instances, makes the 7g at slot 0, and the workload sees exactly that MIG device."""
    with platform.tenant() as api:
        assert visible_devices(api, "7g.80gb") == declared_mig_uuid("mig-01", 0, 0, "7g.80gb")


def visible_devices(api: Client, profile: str) -> str:
    """Rent an A100 MIG slice of `profile` for a command that prints CUDA_VISIBLE_DEVICES; what it printed."""
    code = "import os; print('CVD=' + os.environ['CUDA_VISIBLE_DEVICES'])"
    spec = RentalCreateRequest(
        gpu_model="A100-80GB", mig_profile=profile, command=[sys.executable, "-c", code]
    )
    rental = api.create_rental(spec)
    done = wait_for_state(api, rental.id, "stopped")
    assert any(e.kind == "stopped" and "exit code 0" in e.message for e in done.events), done.events
    wait_until(lambda: "CVD=" in api.logs(rental.id).data, 5, "logs")
    return api.logs(rental.id).data.strip().removeprefix("CVD=")


HAND_CARVED = FLEET.replace(
    'mig_layout = ["4g.40gb", "2g.20gb", "1g.10gb"]', 'mig_layout = ["3g.40gb", "1g.10gb"]'
)


def test_a_mig_slice_goes_to_the_instance_the_host_was_carved_with_by_hand(tmp_path: Path) -> None:
    """The fleet declares 4g@0, 2g@4, 1g@6; the host was carved by hand into 3g@0 and 1g@4. The agent
    reports that layout, so a 1g.10gb rental runs on the host's 1g at slot 4 and nothing is made; without
    the report the scheduler would pick the declared 1g at slot 6, which the agent would have to make."""
    host = tmp_path / "host.toml"
    host.write_text(HAND_CARVED)
    agent_args = ["--declared", str(host)]  # the last --declared is the host's
    with (
        running_platform(tmp_path, FLEET, ["mig-01"], agent_args=agent_args) as platform,
        Client(platform.url, ADMIN_KEY) as admin,
    ):

        def laid_out_as_the_host() -> bool:
            (node,) = admin.nodes()
            return node.mig_host_gpus == [0]

        wait_until(laid_out_as_the_host, 30, "the agent's MIG report")
        (node,) = admin.nodes()
        assert [(i.start_slot, i.profile, i.busy) for i in node.mig_instances] == [
            (0, "3g.40gb", False),
            (4, "1g.10gb", False),
        ]
        with platform.tenant() as api:
            assert visible_devices(api, "1g.10gb") == declared_mig_uuid("mig-01", 0, 4, "1g.10gb")
    assert "making MIG" not in (tmp_path / "agent-mig-01.log").read_text()
