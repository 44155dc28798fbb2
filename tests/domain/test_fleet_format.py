"""Fleet file format: each mistake names the file, node and field; the example fleet parses as declared."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from suanli.domain.catalog_data import CATALOG
from suanli.domain.errors import FleetError
from suanli.domain.fleet_format import parse_fleet
from suanli.domain.inventory import GpuMode
from suanli.domain.mig import pack_layout
from suanli.sim.fleet_files import read_fleet

SOURCE = "fleet-under-test.toml"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet.toml"

REGION = """
[regions.cn-north]
jurisdiction = "CN"
grid_gco2_per_kwh = 581
pue = 1.3
"""

BASE_NODE = {
    "name": '"n-01"',
    "topology": '"cn-north/z1/pod-a/leaf-01"',
    "cpu_milli": "64000",
    "memory_mib": "524288",
    "gpus": '{ model = "H100-SXM-80GB", count = 8 }',
}

A100_MIG = 'model = "A100-80GB", count = 2, mode = "mig"'


def node(**changes: str | None) -> str:
    """A `[[nodes]]` entry: the base node with keys replaced (TOML values as text) or dropped (None)."""
    fields = {**BASE_NODE, **changes}
    return "\n[[nodes]]\n" + "".join(
        f"{key} = {value}\n" for key, value in fields.items() if value is not None
    )


def fleet(*nodes: str, regions: str = REGION) -> str:
    return regions + "".join(nodes or (node(),))


def parse(text: str):
    return parse_fleet(text, source=SOURCE, catalog=CATALOG)


NODE_MISTAKES = [
    pytest.param(node(cpu_milli=None), "n-01", "cpu_milli", "missing", id="missing-cpu"),
    pytest.param(node(gpus=None), "n-01", "gpus", "missing", id="missing-gpus"),
    pytest.param(node(name=None), "#1", "name", "missing", id="missing-name"),
    pytest.param(node(cpus="8"), "n-01", "cpus", "allowed keys are name, topology", id="unknown-key"),
    pytest.param(node(cpu_milli='"lots"'), "n-01", "cpu_milli", "expected an integer", id="cpu-string"),
    pytest.param(node(cpu_milli="1.5"), "n-01", "cpu_milli", "expected an integer", id="cpu-float"),
    pytest.param(node(cpu_milli="true"), "n-01", "cpu_milli", "expected an integer", id="cpu-bool"),
    pytest.param(node(memory_mib="0"), "n-01", "memory_mib", "positive", id="memory-zero"),
    pytest.param(node(name='"n 01"'), "n 01", "name", "whitespace", id="name-space"),
    pytest.param(node(name="7"), "#1", "name", "expected a string", id="name-number"),
    pytest.param(node(provider='""'), "n-01", "provider", "empty", id="provider-empty"),
    pytest.param(node(labels="{ rack = 7 }"), "n-01", "labels.rack", "strings", id="label-not-string"),
    pytest.param(node(labels='"ib"'), "n-01", "labels", "expected a table", id="labels-not-table"),
    pytest.param(node(topology='"cn-north/z1/leaf-01"'), "n-01", "topology", "four", id="topology-3-parts"),
    pytest.param(
        node(topology='"cn-north/z1//leaf-01"'), "n-01", "topology", "four", id="topology-empty-part"
    ),
    pytest.param(
        node(topology='"mars/z1/pod-a/leaf-01"'),
        "n-01",
        "topology",
        "unknown region 'mars'",
        id="unknown-region",
    ),
    pytest.param(node(gpus='"8xH100"'), "n-01", "gpus", "expected a table", id="gpus-not-table"),
    pytest.param(
        node(gpus='{ model = "H100-SXM-80GB", count = 8, modee = "mig" }'),
        "n-01",
        "gpus.modee",
        "allowed keys are model, count, mode, mig_layout",
        id="unknown-gpu-key",
    ),
    pytest.param(node(gpus="{ count = 8 }"), "n-01", "gpus.model", "missing", id="missing-model"),
    pytest.param(
        node(gpus='{ model = "H1000", count = 8 }'), "n-01", "gpus.model", "known models:", id="unknown-model"
    ),
    pytest.param(
        node(gpus='{ model = "L40S", count = -1 }'), "n-01", "gpus.count", "positive", id="count-negative"
    ),
    pytest.param(
        node(gpus='{ model = "L40S", count = 4, mode = "vgpu" }'),
        "n-01",
        "gpus.mode",
        "whole, mig, shared",
        id="unknown-mode",
    ),
    pytest.param(
        node(gpus='{ model = "L40S", count = 4, mode = "mig" }'),
        "n-01",
        "gpus.mode",
        "does not support MIG",
        id="mig-mode-non-mig-model",
    ),
    pytest.param(
        node(gpus='{ model = "L40S", count = 4, mode = "mig", mig_layout = ["1g.12gb"] }'),
        "n-01",
        "gpus.mig_layout",
        "does not support MIG",
        id="mig-layout-non-mig-model",
    ),
    pytest.param(
        node(gpus='{ model = "Ascend-910B", count = 8, mode = "shared" }'),
        "n-01",
        "gpus.mode",
        "shares are limited with NVIDIA MPS; Ascend-910B is made by Huawei: use mode 'whole'",
        id="shared-mode-non-nvidia-model",
    ),
    pytest.param(
        node(gpus='{ model = "L40S", count = 4, mode = "mig" }'),
        "n-01",
        "gpus.mode",
        "L40S does not support MIG; use mode 'whole' or 'shared'",
        id="mig-mode-nvidia-model-advises-whole-or-shared",
    ),
    pytest.param(
        node(gpus='{ model = "A100-80GB", count = 2, mig_layout = ["3g.40gb"] }'),
        "n-01",
        "gpus.mig_layout",
        "mode = 'mig'",
        id="mig-layout-mode-whole",
    ),
    pytest.param(
        node(gpus=f'{{ {A100_MIG}, mig_layout = ["7g.80gb", "1g.10gb"] }}'),
        "n-01",
        "gpus.mig_layout",
        "no room",
        id="mig-layout-overfull",
    ),
    pytest.param(
        node(gpus=f'{{ {A100_MIG}, mig_layout = ["4g.40gb", "4g.40gb"] }}'),
        "n-01",
        "gpus.mig_layout",
        "no room",
        id="mig-layout-two-4g",
    ),
    pytest.param(
        node(gpus=f'{{ {A100_MIG}, mig_layout = ["9g.99gb"] }}'),
        "n-01",
        "gpus.mig_layout",
        "unknown MIG profile",
        id="mig-unknown-profile",
    ),
    pytest.param(
        node(gpus=f'{{ {A100_MIG}, mig_layout = [["7g.80gb"], ["3g.40gb", "4g.40gb", "1g.10gb"]] }}'),
        "n-01",
        "gpus.mig_layout",
        "GPU 1: no room",
        id="mig-per-gpu-one-bad",
    ),
    pytest.param(
        node(gpus=f'{{ {A100_MIG}, mig_layout = [["7g.80gb"]] }}'),
        "n-01",
        "gpus.mig_layout",
        "1 per-GPU layouts for 2 GPUs",
        id="mig-per-gpu-wrong-length",
    ),
    pytest.param(
        node(gpus=f'{{ {A100_MIG}, mig_layout = ["7g.80gb", ["7g.80gb"]] }}'),
        "n-01",
        "gpus.mig_layout",
        "one such list per GPU",
        id="mig-mixed-list",
    ),
    pytest.param(
        node(gpus=f'{{ {A100_MIG}, mig_layout = "7g.80gb" }}'),
        "n-01",
        "gpus.mig_layout",
        "expected a list",
        id="mig-layout-string",
    ),
    pytest.param(node(name='"n-{i}"'), "n-{i}", "count_nodes", "missing", id="index-without-count"),
    pytest.param(node(count_nodes="3"), "n-01", "name", "{i}", id="count-without-index"),
    pytest.param(node(name='"n-{i}"', count_nodes="0"), "n-{i}", "count_nodes", "positive", id="count-zero"),
    pytest.param(fleet(node(), node()), "n-01", "name", "duplicate", id="duplicate-name"),
    pytest.param(
        fleet(node(name='"n-{i}"', count_nodes="2"), node(name='"n-02"')),
        "n-02",
        "name",
        "duplicate",
        id="duplicate-after-expansion",
    ),
]


@pytest.mark.parametrize(("text", "node_name", "field", "words"), NODE_MISTAKES)
def test_a_node_mistake_names_the_file_the_node_and_the_field(
    text: str, node_name: str, field: str, words: str
) -> None:
    document = text if text.startswith(REGION) else fleet(text)
    with pytest.raises(FleetError) as caught:
        parse(document)
    error = caught.value
    assert (error.source, error.node, error.field) == (SOURCE, node_name, field)
    assert SOURCE in str(error)
    assert f"node {node_name!r}" in str(error)
    assert f"field {field!r}" in str(error)
    assert words in str(error)


@pytest.mark.parametrize("model", ["MI300X", "Ascend-910B"])
def test_mig_refused_on_a_non_nvidia_model_advises_only_the_modes_it_allows(model: str) -> None:
    with pytest.raises(FleetError) as caught:
        parse(fleet(node(gpus=f'{{ model = "{model}", count = 4, mode = "mig" }}')))
    message = str(caught.value)
    assert f"{model} does not support MIG; use mode 'whole'" in message
    assert "shared" not in message  # the reader refuses shares of it too


def test_the_reader_takes_a_model_no_agent_can_isolate_for_the_simulator() -> None:
    """BR100 has no visible-devices variable: the server refuses such a node (`app.fleet.check_isolatable`),
    the simulator, which runs no workloads, still loads it."""
    (loaded,) = parse(fleet(node(gpus='{ model = "BR100", count = 8 }'))).nodes
    assert (loaded.gpu_model, loaded.gpu_count) == ("BR100", 8)


FILE_MISTAKES = [
    pytest.param(REGION + "[[nodes]\n", "", "line 6", id="toml-syntax"),
    pytest.param(REGION, "nodes", "missing", id="no-nodes-key"),
    pytest.param("nodes = []\n" + REGION, "nodes", "no nodes", id="empty-nodes"),
    pytest.param(fleet(node(), regions="regions = {}\n"), "regions", "at least one", id="no-regions"),
    pytest.param(
        fleet(regions="owner = 'me'\n" + REGION), "owner", "allowed keys are regions, nodes", id="top-key"
    ),
    pytest.param(
        fleet(regions=REGION.replace("pue = 1.3", "pue = 0.9")),
        "regions.cn-north.pue",
        "at least 1",
        id="pue-below-one",
    ),
    pytest.param(
        fleet(regions=REGION.replace("581", "-5")),
        "regions.cn-north.grid_gco2_per_kwh",
        "at least 0",
        id="grid-negative",
    ),
    pytest.param(
        fleet(regions=REGION.replace("581", '"dirty"')),
        "regions.cn-north.grid_gco2_per_kwh",
        "expected a number",
        id="grid-string",
    ),
    pytest.param(
        fleet(regions=REGION.replace('jurisdiction = "CN"\n', "")),
        "regions.cn-north.jurisdiction",
        "missing",
        id="region-missing-jurisdiction",
    ),
    pytest.param(
        fleet(regions=REGION + "tz = 'Asia/Shanghai'\n"),
        "regions.cn-north.tz",
        "allowed keys are jurisdiction",
        id="region-unknown-key",
    ),
]


@pytest.mark.parametrize(("text", "field", "words"), FILE_MISTAKES)
def test_a_file_mistake_names_the_file_and_the_field(text: str, field: str, words: str) -> None:
    with pytest.raises(FleetError) as caught:
        parse(text)
    error = caught.value
    assert (error.source, error.node, error.field) == (SOURCE, "", field)
    assert str(error).startswith(SOURCE)
    assert words in str(error)


def test_a_minimal_node_gets_the_defaults() -> None:
    (parsed,) = parse(fleet()).nodes
    assert parsed.name == "n-01"
    assert parsed.region == "cn-north"
    assert parsed.topology == ("cn-north", "z1", "pod-a", "leaf-01")
    assert (parsed.gpu_model, parsed.gpu_count, parsed.gpu_mode) == ("H100-SXM-80GB", 8, GpuMode.WHOLE)
    assert (parsed.mig_layouts, parsed.provider, dict(parsed.labels)) == ((), "platform", {})


def test_the_model_name_is_the_catalogues_canonical_one() -> None:
    (parsed,) = parse(fleet(node(gpus='{ model = "h200", count = 8 }'))).nodes
    assert parsed.gpu_model == "H200-141GB"


def test_count_nodes_expands_the_index_zero_padded() -> None:
    nodes = parse(fleet(node(name='"gpu-{i}-x"', count_nodes="3"))).nodes
    assert [n.name for n in nodes] == ["gpu-01-x", "gpu-02-x", "gpu-03-x"]
    assert {(n.topology, n.gpu_count, n.cpu_milli) for n in nodes} == {(nodes[0].topology, 8, 64000)}


def test_count_nodes_widens_the_index_past_99() -> None:
    nodes = parse(fleet(node(name='"n{i}"', count_nodes="100"))).nodes
    assert (nodes[0].name, nodes[-1].name) == ("n001", "n100")


def test_one_mig_layout_is_used_on_every_gpu() -> None:
    text = fleet(node(gpus=f'{{ {A100_MIG}, mig_layout = ["4g.40gb", "2g.20gb", "1g.10gb"] }}'))
    (parsed,) = parse(text).nodes
    assert parsed.gpu_mode is GpuMode.MIG
    assert parsed.mig_layouts == (("4g.40gb", "2g.20gb", "1g.10gb"),) * 2


def test_a_list_of_lists_gives_one_mig_layout_per_gpu() -> None:
    text = fleet(node(gpus=f'{{ {A100_MIG}, mig_layout = [["7g.80gb"], ["3g.40gb", "3g.40gb"]] }}'))
    (parsed,) = parse(text).nodes
    assert parsed.mig_layouts == (("7g.80gb",), ("3g.40gb", "3g.40gb"))


def test_a_mig_node_without_a_layout_starts_with_no_instances() -> None:
    (parsed,) = parse(fleet(node(gpus=f"{{ {A100_MIG} }}"))).nodes
    assert parsed.mig_layouts == ((), ())


def test_a_valid_layout_that_needs_the_3g_instance_at_slot_4_is_accepted() -> None:
    text = fleet(node(gpus=f'{{ {A100_MIG}, mig_layout = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"] }}'))
    assert parse(text).nodes[0].mig_layouts[0] == ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")


def test_the_example_fleet_parses_with_the_declared_counts() -> None:
    example = parse_fleet(EXAMPLE.read_text(encoding="utf-8"), source=str(EXAMPLE), catalog=CATALOG)
    assert len(example.nodes) == 20
    assert {name: region.jurisdiction for name, region in example.regions.items()} == {
        "cn-north": "CN",
        "eu-west": "EU",
        "ap-southeast": "SG",
    }
    gpus_by_model = Counter()
    for parsed in example.nodes:
        gpus_by_model[parsed.gpu_model] += parsed.gpu_count
    assert gpus_by_model == {
        "H100-SXM-80GB": 64,
        "A100-80GB": 32,
        "L40S": 16,
        "Ascend-910B": 8,
        "H200-141GB": 8,
        "A100-40GB": 8,
    }
    assert example.gpu_count == 136
    assert {n.provider for n in example.nodes} == {"platform", "lion-city-gpu"}


def test_the_example_h100_pod_spans_two_infiniband_leaves() -> None:
    h100 = [n for n in read_fleet(EXAMPLE).nodes if n.gpu_model == "H100-SXM-80GB"]
    assert len(h100) == 8
    assert {n.topology[:3] for n in h100} == {("cn-north", "z1", "pod-a")}
    assert {n.topology[3] for n in h100} == {"leaf-01", "leaf-02"}
    assert {n.labels["interconnect"] for n in h100} == {"ib"}


def test_the_example_mig_layouts_pack() -> None:
    example = read_fleet(EXAMPLE)
    mig_nodes = [n for n in example.nodes if n.gpu_mode is GpuMode.MIG]
    assert len(mig_nodes) == 4
    assert len({n.mig_layouts for n in mig_nodes}) == 4
    for parsed in mig_nodes:
        geometry = CATALOG.get(parsed.gpu_model).mig
        assert geometry is not None
        assert len(parsed.mig_layouts) == parsed.gpu_count
        for layout in parsed.mig_layouts:
            assert pack_layout(geometry, layout)
    shared = [n for n in example.nodes if n.gpu_mode is GpuMode.SHARED]
    assert {n.gpu_model for n in shared} == {"L40S"}


def test_reading_a_missing_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(FleetError) as caught:
        read_fleet(missing)
    assert caught.value.source == str(missing)
    assert str(caught.value).startswith(str(missing))


def test_reading_a_file_names_it_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(fleet(node(cpu_milli='"lots"')), encoding="utf-8")
    with pytest.raises(FleetError) as caught:
        read_fleet(path)
    assert (caught.value.source, caught.value.node, caught.value.field) == (str(path), "n-01", "cpu_milli")


BOUNDED = [
    pytest.param(
        fleet(regions=REGION.replace("pue = 1.3", "pue = VALUE")),
        "",
        "regions.cn-north.pue",
        "3",
        "3.0001",
        id="pue",
    ),
    pytest.param(
        fleet(regions=REGION.replace("581", "VALUE")),
        "",
        "regions.cn-north.grid_gco2_per_kwh",
        "2000",
        "2000.5",
        id="grid",
    ),
    pytest.param(fleet(node(cpu_milli="VALUE")), "n-01", "cpu_milli", "8,192,000", "8192001", id="cpu"),
    pytest.param(
        fleet(node(memory_mib="VALUE")), "n-01", "memory_mib", "268,435,456", "268435457", id="memory"
    ),
    pytest.param(
        fleet(node(gpus='{ model = "H100-SXM-80GB", count = VALUE }')),
        "n-01",
        "gpus.count",
        "64",
        "65",
        id="gpus",
    ),
    pytest.param(
        fleet(node(name='"n-{i}"', count_nodes="VALUE")),
        "n-{i}",
        "count_nodes",
        "100,000",
        "100001",
        id="count-nodes",
    ),
]


@pytest.mark.parametrize(("template", "node_name", "field", "bound", "above"), BOUNDED)
def test_a_number_above_its_bound_is_refused_naming_the_field_and_the_bound(
    template: str, node_name: str, field: str, bound: str, above: str
) -> None:
    """`pue = 1e308` (or a host of 8 PiB, or 65 GPUs) was taken: every number of the fleet has a physical
    bound, and a value above it is refused naming the field and the bound; the bound itself is taken."""
    for value in (above, "1e308" if "." in above else "9223372036854775807"):
        with pytest.raises(FleetError) as caught:
            parse(template.replace("VALUE", value))
        assert (caught.value.node, caught.value.field) == (node_name, field)
        assert f"must be at most {bound}," in str(caught.value), str(caught.value)
    parse(template.replace("VALUE", bound.replace(",", "")))


def test_a_stored_fleet_is_read_back_without_the_bounds() -> None:
    """A fleet stored before the bounds were kept still loads (the server reads it back on every start)."""
    text = fleet(regions=REGION.replace("pue = 1.3", "pue = 4.5"))
    with pytest.raises(FleetError):
        parse(text)
    (region,) = parse_fleet(text, source=SOURCE, catalog=CATALOG, bounded=False).regions.values()
    assert region.pue == 4.5
