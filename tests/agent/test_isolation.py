"""A workload's environment: exactly its devices by UUID, MPS limits for shares, no overriding isolation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_nvml import RecordedNvml, load_fixture

from suanli.agent.assignment import Assignment
from suanli.agent.executors import write_nodes
from suanli.agent.isolation import IsolationError, master_port, workload_env
from suanli.agent.probe import DeclaredProbe, HostInventory, NvmlProbe
from suanli.domain.inventory import Node
from suanli.domain.plan import Slice
from suanli.domain.rendezvous import hashed_master_port

FLEET = Path(__file__).parents[2] / "examples" / "fleet.toml"
NOTICE = "/var/lib/suanli/rentals/r-1/control/notice.json"


def a100_host() -> HostInventory:
    return NvmlProbe(RecordedNvml(load_fixture("a100_mig")), hostname="a100").inventory()


def env_for(slices: tuple[Slice, ...], inventory: HostInventory, **env: str) -> dict[str, str]:
    assignment = Assignment("r-1", slices, ("python", "train.py"), env=env)
    return workload_env(assignment, inventory, notice_file=NOTICE)


def test_whole_gpus_are_visible_by_their_uuids_in_slice_order() -> None:
    inventory = NvmlProbe(RecordedNvml(load_fixture("h100x8")), hostname="h").inventory()
    env = env_for((Slice(3, 1000, 81920), Slice(1, 1000, 81920)), inventory, WANDB_MODE="offline")
    assert env == {
        "CUDA_VISIBLE_DEVICES": f"{inventory.gpus[3].uuid},{inventory.gpus[1].uuid}",
        "SUANLI_RENTAL_ID": "r-1",
        "SUANLI_NOTICE_FILE": NOTICE,
        "SUANLI_PLACEMENT": "1",
        "WANDB_MODE": "offline",
    }


def test_a_mig_slice_sees_its_mig_device_uuid() -> None:
    inventory = a100_host()
    env = env_for((Slice(0, 285, 20480, mig_profile="2g.20gb", mig_start=4),), inventory)
    assert env["CUDA_VISIBLE_DEVICES"] == inventory.gpus[0].mig_devices[1].uuid
    assert env["CUDA_VISIBLE_DEVICES"].startswith("MIG-")
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env


def test_a_share_gets_mps_limits_for_its_gpu() -> None:
    inventory = DeclaredProbe.from_file(FLEET, "l40s-01").inventory()
    env = env_for((Slice(2, 250, 12288),), inventory)
    uuid = inventory.gpus[2].uuid
    assert env["CUDA_VISIBLE_DEVICES"] == uuid
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{uuid}=12288M"


def test_a_share_that_holds_no_memory_gets_no_memory_limit() -> None:
    """`L40S:0.5` holds no memory by default: `=0M` would have let the workload pin no device memory."""
    inventory = DeclaredProbe.from_file(FLEET, "l40s-01").inventory()
    env = env_for((Slice(1, 500, 0),), inventory)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env


def _declared(model: str, count: int = 4) -> HostInventory:
    node = Node("n0", "r", ("r", "z", "p", "l"), 64_000, 262_144, model, count)
    return DeclaredProbe(node).inventory()


@pytest.mark.parametrize(
    ("model", "variable"),
    [("Ascend-910B", "ASCEND_RT_VISIBLE_DEVICES"), ("MI300X", "ROCR_VISIBLE_DEVICES")],
)
def test_other_vendors_devices_are_limited_by_their_runtimes_variable_by_index(
    model: str, variable: str
) -> None:
    """CANN and ROCm read neither CUDA_VISIBLE_DEVICES nor an NVIDIA UUID: a rental of NPUs 3 and 1 saw
    every NPU on its host (`ascend-01` of the sample fleet is one)."""
    assignment = Assignment(
        "r-1", (Slice(3, 1000, 65536), Slice(1, 1000, 65536)), ("train",), peers=("a", "b")
    )
    env = workload_env(assignment, _declared(model), notice_file=NOTICE)
    assert env[variable] == "3,1" and "CUDA_VISIBLE_DEVICES" not in env
    assert env["SUANLI_GPUS_PER_NODE"] == "2"
    with pytest.raises(IsolationError, match="need NVIDIA"):
        env_for((Slice(0, 500, 0),), _declared(model))


def test_each_mi250x_card_is_its_two_rocm_devices() -> None:
    """ROCm numbers each MI250X card's two GCDs as two devices: a rental of card 1 was given
    ROCR_VISIBLE_DEVICES=1, the second half of card 0, shared with the rental of card 0."""
    host = _declared("MI250X")
    first = workload_env(Assignment("r-1", (Slice(0, 1000, 131072),), ("t",)), host, notice_file=NOTICE)
    second = workload_env(Assignment("r-2", (Slice(1, 1000, 131072),), ("t",)), host, notice_file=NOTICE)
    pair = Assignment("r-3", (Slice(3, 1000, 131072), Slice(2, 1000, 131072)), ("t",), peers=("a", "b"))
    both = workload_env(pair, host, notice_file=NOTICE)
    assert (first["ROCR_VISIBLE_DEVICES"], second["ROCR_VISIBLE_DEVICES"]) == ("0,1", "2,3")
    assert both["ROCR_VISIBLE_DEVICES"] == "6,7,4,5"
    assert both["SUANLI_GPUS_PER_NODE"] == "4"  # the devices a process per device (torchrun) sees


def test_a_vendor_no_variable_limits_is_refused() -> None:
    with pytest.raises(IsolationError, match="no variable is known to limit which biren devices"):
        env_for((Slice(0, 1000, 65536),), _declared("BR100"))


def test_the_declared_probe_uses_its_declared_uuids() -> None:
    inventory = DeclaredProbe.from_file(FLEET, "a100-mig-03").inventory()
    env = env_for((Slice(5, 142, 10240, mig_profile="1g.10gb", mig_start=3),), inventory)
    assert env["CUDA_VISIBLE_DEVICES"] == inventory.gpus[5].mig_devices[3].uuid


@pytest.mark.parametrize(
    "name",
    [
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        "SUANLI_RENTAL_ID",
        "SUANLI_ANYTHING",
        "CUDA_MPS_PIPE_DIRECTORY",
    ],
    ids=lambda name: name,
)
def test_the_rental_env_cannot_override_isolation(name: str) -> None:
    inventory = a100_host()
    with pytest.raises(IsolationError, match=f"{name} is set by the platform"):
        env_for((Slice(1, 1000, 81920),), inventory, **{name: "0"})


@pytest.mark.parametrize(
    ("slices", "message"),
    [
        ((Slice(9, 1000, 81920),), "has no GPU 9"),
        ((Slice(0, 1000, 81920),), "GPU 0 is in MIG mode"),
        (
            (Slice(0, 428, 40960, mig_profile="3g.40gb", mig_start=0),),
            r"no MIG device 3g.40gb at slot 0 \(it has",
        ),
        ((Slice(1, 142, 10240, mig_profile="1g.10gb"),), "GPU 1 has no MIG device 1g.10gb"),
        (
            (Slice(0, 142, 10240, mig_profile="1g.10gb"), Slice(0, 285, 20480, mig_profile="2g.20gb")),
            "one MIG instance per process",
        ),
        ((Slice(1, 500, 40960), Slice(2, 1000, 40960)), "mixes GPU shares"),
        ((Slice(1, 500, 40960), Slice(2, 250, 20480)), "shares of different sizes"),
    ],
    ids=[
        "unknown-gpu",
        "whole-gpu-in-mig-mode",
        "no-such-mig",
        "mig-on-non-mig-gpu",
        "two-migs",
        "mixed",
        "uneven-shares",
    ],
)
def test_slices_that_cannot_be_isolated_are_refused(slices: tuple[Slice, ...], message: str) -> None:
    with pytest.raises(IsolationError, match=message):
        env_for(slices, a100_host())


def test_bad_variable_names_are_refused() -> None:
    with pytest.raises(IsolationError, match="invalid environment variable name"):
        env_for((), a100_host(), **{"1BAD": "x"})


def test_no_slices_means_no_visible_devices() -> None:
    assert env_for((), a100_host())["CUDA_VISIBLE_DEVICES"] == ""


def test_a_multi_node_rental_knows_its_rank_its_nodes_and_its_master() -> None:
    inventory = NvmlProbe(RecordedNvml(load_fixture("h100x8")), hostname="h").inventory()
    slices = tuple(Slice(i, 1000, 81920) for i in range(4))
    peers = ("gpu-a", "gpu-b", "gpu-c")
    assignment = Assignment(
        "r-1",
        slices,
        ("torchrun", "train.py"),
        peers=peers,
        node_rank=1,
        attempt=2,
        placement=3,
        master_port=24_242,
    )
    env = workload_env(assignment, inventory, notice_file=NOTICE, nodes_file="/x/nodes.json")
    assert {k: v for k, v in env.items() if k not in ("CUDA_VISIBLE_DEVICES", "SUANLI_NOTICE_FILE")} == {
        "SUANLI_RENTAL_ID": "r-1",
        "SUANLI_PLACEMENT": "3",  # placed a third time: re-queued twice
        "SUANLI_NNODES": "3",
        "SUANLI_NODE_RANK": "1",
        "SUANLI_NODES": "gpu-a,gpu-b,gpu-c",
        "SUANLI_MASTER_ADDR": "gpu-a",
        "SUANLI_MASTER_PORT": "24242",  # the server's choice
        "SUANLI_GPUS_PER_NODE": "4",
        "SUANLI_NODES_FILE": "/x/nodes.json",
        "SUANLI_RESTART_COUNT": "2",
    }
    with pytest.raises(IsolationError, match="SUANLI_NODE_RANK"):
        workload_env(
            Assignment("r-1", slices, ("x",), env={"SUANLI_NODE_RANK": "0"}, peers=peers),
            inventory,
            notice_file=NOTICE,
        )


def test_the_agent_uses_the_servers_master_port_and_the_nodes_file_says_it(tmp_path: Path) -> None:
    """Two gangs whose rank 0 shared a host both used torchrun's default 29500, and the second failed to
    bind: each rental has its own port, the one the server chose (the same on every rank and restart), else,
    from a server that names none, the one its id points at; the nodes file says it too."""
    chosen = Assignment("rnt_a", (), ("x",), peers=("gpu-a", "gpu-b"), node_rank=1, master_port=21_000)
    write_nodes(tmp_path / "nodes.json", chosen)
    said = json.loads((tmp_path / "nodes.json").read_text())
    assert (said["master_addr"], said["master_port"], said["node_rank"]) == ("gpu-a", 21_000, 1)
    unnamed = Assignment("rnt_a", (), ("x",), peers=("gpu-a",))
    assert master_port(unnamed) == hashed_master_port("rnt_a") != hashed_master_port("rnt_b")
