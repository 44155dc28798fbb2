"""GPU discovery: NVML answers recorded from real host shapes; the declared probe from the sample fleet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fake_nvml import RecordedNvml, load_fixture

from suanli.agent.probe import (
    DeclaredProbe,
    HostInventory,
    NvmlProbe,
    ProbeError,
    catalog_name,
    inventory_from_dict,
    mig_profile_from_name,
)
from suanli.domain.catalog_data import CATALOG

FLEET = Path(__file__).parents[2] / "examples" / "fleet.toml"
UUID_SHAPE = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def probe(name: str) -> tuple[NvmlProbe, RecordedNvml]:
    nvml = RecordedNvml(load_fixture(name))
    return NvmlProbe(nvml, hostname=nvml.host["hostname"]), nvml


def test_an_8xh100_host_is_eight_catalogue_h100s_by_uuid() -> None:
    nvml_probe, nvml = probe("h100x8")
    inventory = nvml_probe.inventory()
    assert inventory.hostname == "hgx-h100-07"
    assert (inventory.driver_version, inventory.cuda_version) == ("550.54.15", "12.4")
    assert [gpu.index for gpu in inventory.gpus] == list(range(8))
    assert {gpu.model_name for gpu in inventory.gpus} == {"H100-SXM-80GB"}
    assert {gpu.raw_name for gpu in inventory.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert [gpu.uuid for gpu in inventory.gpus] == [d["uuid"] for d in nvml.host["devices"]]
    assert all(gpu.memory_mib == 81559 and not gpu.mig_mode for gpu in inventory.gpus)
    assert nvml.initialised == 0  # every nvmlInit was matched by nvmlShutdown


def test_an_a100_in_mig_mode_lists_its_mig_devices_by_uuid_profile_and_placement() -> None:
    nvml_probe, nvml = probe("a100_mig")
    inventory = nvml_probe.inventory()
    first, second, pcie, t4 = inventory.gpus
    assert first.mig_mode and first.model_name == "A100-80GB"
    recorded = nvml.host["devices"][0]["mig_devices"]
    assert [(m.profile, m.start_slot, m.gpu_instance_id, m.uuid) for m in first.mig_devices] == [
        ("4g.40gb", 0, 2, recorded[0]["uuid"]),
        ("2g.20gb", 4, 3, recorded[1]["uuid"]),
        ("1g.10gb", 6, 9, recorded[2]["uuid"]),
    ]
    geometry = CATALOG.get(first.model_name).mig
    assert geometry is not None and all(geometry.has_profile(m.profile) for m in first.mig_devices)
    assert not second.mig_mode and second.mig_devices == ()
    assert pcie.model_name == "A100-40GB"
    assert (t4.model_name, t4.mig_mode) == ("T4", False)  # MIG mode NOT_SUPPORTED means no MIG


def test_an_ascend_host_has_no_nvml_and_says_to_declare_it() -> None:
    host = load_fixture("ascend_910b")
    nvml_probe = NvmlProbe(RecordedNvml(host), hostname=host["hostname"])
    with pytest.raises(ProbeError, match=r"NVML is not usable.*--declared"):
        nvml_probe.inventory()
    assert {catalog_name(name) for name in host["npu_names"]} == {"Ascend-910B"}


def test_telemetry_reads_what_nvml_has_and_none_for_what_it_lacks() -> None:
    readings = probe("h100x8")[0].telemetry()
    assert readings[0].utilization_pct == 97 and readings[0].memory_used_mib == 74000
    assert readings[0].power_w == 612.0
    t4 = probe("a100_mig")[0].telemetry()[3]
    assert (t4.utilization_pct, t4.power_w) == (None, None)


def test_nvml_counts_the_processes_running_on_each_mig_device() -> None:
    nvml_probe, nvml = probe("a100_mig")
    nvml.host["devices"][0]["mig_devices"][2]["processes"] = [4242, 4243]  # two on the 1g.10gb
    (first, *_) = nvml_probe.inventory().gpus
    assert [(m.profile, m.processes) for m in first.mig_devices] == [
        ("4g.40gb", 0),
        ("2g.20gb", 0),
        ("1g.10gb", 2),
    ]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM-80GB"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA  h200", "H200-141GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("Tesla V100-SXM2-32GB", "V100M32"),
        ("NVIDIA H100 NVL", "NVIDIA H100 NVL"),  # not in the catalogue: reported as it is
    ],
    ids=lambda value: value,
)
def test_device_names_map_to_catalogue_names(raw: str, expected: str) -> None:
    assert catalog_name(raw) == expected
    assert expected not in CATALOG or CATALOG.get(expected).name == expected


def test_mig_profile_comes_from_the_mig_device_name() -> None:
    assert mig_profile_from_name("NVIDIA A100-SXM4-80GB MIG 3g.40gb") == "3g.40gb"
    assert mig_profile_from_name("NVIDIA A100-SXM4-80GB") is None
    # a media-extension instance takes its base profile's slots: placed and reused as that profile
    assert mig_profile_from_name("NVIDIA A100-SXM4-40GB MIG 1g.5gb+me") == "1g.5gb"


def test_declared_probe_reads_a_node_of_the_sample_fleet_with_stable_nvidia_shaped_uuids() -> None:
    inventory = DeclaredProbe.from_file(FLEET, "h100-a-01").inventory()
    assert inventory.hostname == "h100-a-01" and len(inventory.gpus) == 8
    assert all(re.fullmatch(f"GPU-{UUID_SHAPE}", gpu.uuid) for gpu in inventory.gpus)
    assert len({gpu.uuid for gpu in inventory.gpus}) == 8
    assert DeclaredProbe.from_file(FLEET, "h100-a-01").inventory() == inventory
    other = DeclaredProbe.from_file(FLEET, "h100-a-02").inventory()
    assert not {gpu.uuid for gpu in inventory.gpus} & {gpu.uuid for gpu in other.gpus}
    assert {(gpu.model_name, gpu.memory_mib) for gpu in inventory.gpus} == {("H100-SXM-80GB", 81920)}


def test_declared_probe_carries_the_fleet_files_mig_layout() -> None:
    inventory = DeclaredProbe.from_file(FLEET, "a100-mig-01").inventory()
    gpu = inventory.gpus[3]
    assert gpu.mig_mode
    assert [(m.start_slot, m.profile, m.gpu_instance_id) for m in gpu.mig_devices] == [
        (0, "4g.40gb", 1),
        (4, "2g.20gb", 2),
        (6, "1g.10gb", 3),
    ]
    assert all(re.fullmatch(f"MIG-{UUID_SHAPE}", m.uuid) for m in gpu.mig_devices)
    sliced = DeclaredProbe.from_file(FLEET, "a100-mig-03").inventory()
    assert len(sliced.gpus[0].mig_devices) == 1 and len(sliced.gpus[7].mig_devices) == 7
    all_uuids = [m.uuid for g in sliced.gpus for m in g.mig_devices]
    assert len(set(all_uuids)) == len(all_uuids)


def test_declared_probe_names_the_nodes_when_the_name_is_unknown() -> None:
    with pytest.raises(ProbeError, match=r"no node named 'nope'.*h100-a-01"):
        DeclaredProbe.from_file(FLEET, "nope")


def test_an_inventory_survives_its_plain_form() -> None:
    for inventory in (
        probe("a100_mig")[0].inventory(),
        DeclaredProbe.from_file(FLEET, "l40s-01").inventory(),
    ):
        assert inventory_from_dict(inventory.to_dict()) == inventory
        assert isinstance(inventory, HostInventory)
