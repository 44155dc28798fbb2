"""The fleet file format (TOML): regions and nodes as an operator writes them, checked into a `Fleet`.

A fleet file has two parts, both required::

    [regions.cn-north]                 # one table per region; the name may not contain "/"
    jurisdiction = "CN"                # data-residency jurisdiction, a non-empty string
    grid_gco2_per_kwh = 581            # grid carbon intensity, g CO2 per kWh, a finite number 0..2000
    pue = 1.3                          # power usage effectiveness, a finite number 1..3

    [[nodes]]                          # one entry per node (or per group of nodes, see count_nodes)
    name = "h100-a-01"                 # unique in the fleet, no whitespace
    topology = "cn-north/z1/pod-a/leaf-01"   # region/zone/pod/leaf; the region must be declared above
    cpu_milli = 192000                 # host CPU in millicores, a positive integer, at most 8,192,000
    memory_mib = 2097152               # host memory in MiB, a positive integer, at most 268,435,456 (256 TiB)
    provider = "platform"              # optional, default "platform"
    labels = { interconnect = "ib" }   # optional, string values
    gpus = { model = "H100-SXM-80GB", count = 8, mode = "whole" }

`gpus` keys: `model` (a catalogue name or an unambiguous family; stored as the canonical name), `count` (a
positive integer, at most 64), `mode` (optional, `whole` by default, else `mig` or `shared`: shares need an
NVIDIA model, whose MPS limits them) and, only with `mode = "mig"` on a MIG-capable model, `mig_layout`:
either one list of MIG profile names used on every GPU (`["3g.40gb", "2g.20gb", "1g.10gb"]`) or a list of
such lists, one per GPU (as many as `count`). Each layout must fit NVIDIA's placement rules. Without
`mig_layout` a MIG node's GPUs start with no instances.

Bounds: every number is checked against what a real host or grid can be (`MAX_PUE` and the other `MAX_*`
below), so a typo like `pue = 1e308` or `memory_mib = 20971520000` is refused naming the field and the bound,
not stored to overflow energy figures or make a host that no request can be checked against; a stored fleet
is read back without them (`bounded=False`), so one stored before they were kept still loads.

Groups: an entry with `count_nodes = N` (at most 100,000) and `{i}` in its name stands for N nodes named
with `{i}` replaced by 01, 02, ... N (zero-padded to at least two digits); every other field is the same for
all of them.

Every mistake raises `FleetError` naming the source, the node (its name, or `#k` for the k-th entry without
one) and the field: TOML syntax (with line and column), unknown or missing keys, wrong types, numbers out of
range, a topology that is not four parts or names an undeclared region, an unknown GPU model or mode, a MIG
layout where it does not belong or that breaks placement rules, and duplicate node names.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace

from suanli.domain.catalog import Catalog, GpuModel, MigGeometry, Vendor
from suanli.domain.errors import CatalogError, FleetError, MigPlacementError
from suanli.domain.inventory import Fleet, GpuMode, Node, Region
from suanli.domain.mig import pack_layout

TOP_KEYS = ("regions", "nodes")
REGION_KEYS = ("jurisdiction", "grid_gco2_per_kwh", "pue")
NODE_KEYS = ("name", "topology", "cpu_milli", "memory_mib", "gpus")
NODE_OPTIONAL_KEYS = ("provider", "labels", "count_nodes")
GPU_KEYS = ("model", "count")
GPU_OPTIONAL_KEYS = ("mode", "mig_layout")
TOPOLOGY_LEVELS = ("region", "zone", "pod", "leaf")
INDEX_MARK = "{i}"
DEFAULT_PROVIDER = "platform"
MAX_PUE = 3.0  # the least efficient data centres measured run near 2.5 (Uptime Institute's mean is ~1.6)
MAX_GRID_GCO2_PER_KWH = 2000.0  # lignite, the dirtiest fuel, emits ~1,100-1,200 g/kWh
MAX_CPU_MILLI = 8_192_000  # 8,192 logical CPUs: Linux's largest NR_CPUS on x86-64 (MAXSMP)
MAX_MEMORY_MIB = 256 * 1024 * 1024  # 256 TiB: several times the largest single-system-image host
MAX_GPUS_PER_NODE = 64  # as many as a request may ask of one node (`wire.schemas.RentalCreateRequest.gpus`)
MAX_COUNT_NODES = 100_000  # one group of nodes: ten times the 10,000-GPU throughput fleet's nodes

MigLayouts = tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class _Table:
    """One TOML table being read, with where it sits so every error can name the source, node and field."""

    data: Mapping[str, object]
    source: str
    node: str = ""
    prefix: str = ""

    def error(self, key: str, message: str) -> FleetError:
        return FleetError(message, source=self.source, node=self.node, field=f"{self.prefix}{key}")

    def check_keys(self, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
        allowed = required + optional
        for key in self.data:
            if key not in allowed:
                raise self.error(key, f"unknown key; allowed keys are {', '.join(allowed)}")
        for key in required:
            if key not in self.data:
                raise self.error(key, "missing; this key is required")

    def has(self, key: str) -> bool:
        return key in self.data

    def text(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {_describe(value)}")
        if not value.strip():
            raise self.error(key, "must not be empty")
        return value

    def positive_int(self, key: str, maximum: int | None = None) -> int:
        """A positive integer, at most `maximum` when given (None: a stored fleet, read back unbounded)."""
        value = self.data.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {_describe(value)}")
        if value <= 0:
            raise self.error(key, f"must be positive, got {value}")
        if maximum is not None and value > maximum:
            raise self.error(key, f"must be at most {maximum:,}, got {value:,}")
        return value

    def number(self, key: str, minimum: float, maximum: float | None = None) -> float:
        """A finite number at least `minimum` (and at most `maximum` when given): TOML's `nan` passes any
        comparison's "not below", and a NaN or infinite PUE or carbon intensity leaves every invoice of the
        region without energy totals."""
        value = self.data.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"expected a number, got {_describe(value)}")
        if not math.isfinite(value) or value < minimum:
            raise self.error(key, f"must be a finite number at least {minimum:g}, got {value}")
        if maximum is not None and value > maximum:
            raise self.error(key, f"must be at most {maximum:g}, got {value:g}")
        return float(value)

    def table(self, key: str) -> _Table:
        value = self.data.get(key)
        if not isinstance(value, dict):
            raise self.error(key, f"expected a table, got {_describe(value)}")
        return _Table(value, self.source, self.node, f"{self.prefix}{key}.")


def parse_fleet(text: str, *, source: str, catalog: Catalog, bounded: bool = True) -> Fleet:
    """Read a fleet file's text; `source` names it in errors. Raise FleetError on the first mistake.
    `bounded`: refuse numbers above the `MAX_*` bounds (False only for a fleet stored before them)."""
    top = _Table(_load_toml(text, source), source)
    top.check_keys(TOP_KEYS)
    limits = _Bounds() if bounded else _Bounds(None, None, None, None, None, None)
    regions = _parse_regions(top, limits)
    entries = top.data["nodes"]
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise top.error("nodes", "expected an array of tables ([[nodes]])")
    if not entries:
        raise top.error("nodes", "the fleet has no nodes")
    nodes = tuple(
        node
        for index, entry in enumerate(entries)
        for node in _parse_node_entry(entry, index, source, regions, catalog, limits)
    )
    _check_unique_names(nodes, source)
    return Fleet(regions=regions, nodes=nodes)


def _load_toml(text: str, source: str) -> dict[str, object]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FleetError(f"invalid TOML: {exc}", source=source) from None


@dataclass(frozen=True, slots=True)
class _Bounds:
    """The upper bounds a fleet's numbers are checked against (None: unbounded)."""

    pue: float | None = MAX_PUE
    grid_gco2_per_kwh: float | None = MAX_GRID_GCO2_PER_KWH
    cpu_milli: int | None = MAX_CPU_MILLI
    memory_mib: int | None = MAX_MEMORY_MIB
    gpu_count: int | None = MAX_GPUS_PER_NODE
    count_nodes: int | None = MAX_COUNT_NODES


def _parse_regions(top: _Table, limits: _Bounds) -> dict[str, Region]:
    regions = top.table("regions")
    if not regions.data:
        raise top.error("regions", "declare at least one region")
    return {name: _parse_region(regions, name, limits) for name in regions.data}


def _parse_region(regions: _Table, name: str, limits: _Bounds) -> Region:
    if "/" in name or not name.strip():
        raise regions.error(name, "a region name must be non-empty and contain no '/'")
    table = regions.table(name)
    table.check_keys(REGION_KEYS)
    return Region(
        name=name,
        jurisdiction=table.text("jurisdiction"),
        grid_gco2_per_kwh=table.number("grid_gco2_per_kwh", minimum=0, maximum=limits.grid_gco2_per_kwh),
        pue=table.number("pue", minimum=1, maximum=limits.pue),
    )


def _parse_node_entry(
    raw: dict[str, object],
    index: int,
    source: str,
    regions: Mapping[str, Region],
    catalog: Catalog,
    limits: _Bounds,
) -> tuple[Node, ...]:
    """One `[[nodes]]` entry: one node, or `count_nodes` of them when the name holds `{i}`."""
    name = raw.get("name")
    entry = _Table(raw, source, node=name if isinstance(name, str) and name else f"#{index + 1}")
    entry.check_keys(NODE_KEYS, NODE_OPTIONAL_KEYS)
    name = _parse_name(entry)
    topology = _parse_topology(entry, regions)
    model, gpu_count, mode, layouts = _parse_gpus(entry.table("gpus"), catalog, limits.gpu_count)
    template = Node(
        name=name,
        region=topology[0],
        topology=topology,
        cpu_milli=entry.positive_int("cpu_milli", limits.cpu_milli),
        memory_mib=entry.positive_int("memory_mib", limits.memory_mib),
        gpu_model=model.name,
        gpu_count=gpu_count,
        gpu_mode=mode,
        mig_layouts=layouts,
        provider=entry.text("provider", DEFAULT_PROVIDER),
        labels=_parse_labels(entry),
    )
    return _expand(entry, template, limits.count_nodes)


def _parse_name(entry: _Table) -> str:
    name = entry.text("name")
    if any(char.isspace() for char in name):
        raise entry.error("name", "must not contain whitespace")
    return name


def _parse_topology(entry: _Table, regions: Mapping[str, Region]) -> tuple[str, ...]:
    parts = tuple(entry.text("topology").split("/"))
    if len(parts) != len(TOPOLOGY_LEVELS) or not all(part.strip() for part in parts):
        shape = "/".join(TOPOLOGY_LEVELS)
        raise entry.error("topology", f"expected {shape} (four non-empty parts), got {'/'.join(parts)!r}")
    if parts[0] not in regions:
        known = ", ".join(sorted(regions))
        raise entry.error("topology", f"unknown region {parts[0]!r}; declared regions: {known}")
    return parts


def _parse_labels(entry: _Table) -> dict[str, str]:
    if not entry.has("labels"):
        return {}
    labels = entry.table("labels")
    for key, value in labels.data.items():
        if not isinstance(value, str):
            raise labels.error(key, f"label values must be strings, got {_describe(value)}")
    return {key: str(value) for key, value in labels.data.items()}


def _parse_gpus(
    gpus: _Table, catalog: Catalog, max_count: int | None
) -> tuple[GpuModel, int, GpuMode, MigLayouts]:
    gpus.check_keys(GPU_KEYS, GPU_OPTIONAL_KEYS)
    try:
        model = catalog.get(gpus.text("model"))
    except CatalogError as exc:
        raise gpus.error("model", str(exc)) from None
    count = gpus.positive_int("count", max_count)
    mode = _parse_mode(gpus)
    if mode is GpuMode.SHARED and model.vendor is not Vendor.NVIDIA:
        raise gpus.error(
            "mode",
            f"shares are limited with NVIDIA MPS; {model.name} is made by {model.vendor.label}: "
            f"use {_modes_of(model)}",
        )
    return model, count, mode, _parse_mig(gpus, model, count, mode)


def _parse_mode(gpus: _Table) -> GpuMode:
    text = gpus.text("mode", GpuMode.WHOLE.value)
    try:
        return GpuMode(text)
    except ValueError:
        allowed = ", ".join(mode.value for mode in GpuMode)
        raise gpus.error("mode", f"unknown mode {text!r}; use one of {allowed}") from None


def _modes_of(model: GpuModel) -> str:
    """The modes other than MIG that `model` allows, as advice: shares only on NVIDIA (MPS limits them)."""
    return "mode 'whole' or 'shared'" if model.vendor is Vendor.NVIDIA else "mode 'whole'"


def _parse_mig(gpus: _Table, model: GpuModel, gpu_count: int, mode: GpuMode) -> MigLayouts:
    """One layout (profile names) per GPU for a MIG node; () for any other mode."""
    if mode is not GpuMode.MIG:
        if gpus.has("mig_layout"):
            raise gpus.error("mig_layout", f"only allowed with mode = 'mig' (mode is {mode.value!r})")
        return ()
    if model.mig is None:
        key = "mig_layout" if gpus.has("mig_layout") else "mode"
        raise gpus.error(key, f"{model.name} does not support MIG; use {_modes_of(model)}")
    layouts = _per_gpu_layouts(gpus, gpu_count)
    for layout in sorted(set(layouts)):
        _check_layout(gpus, model.mig, layout, layouts, gpu_count)
    return layouts


def _per_gpu_layouts(gpus: _Table, gpu_count: int) -> MigLayouts:
    raw = gpus.data.get("mig_layout", [])
    shape = "a list of MIG profile names, or one such list per GPU"
    if not isinstance(raw, list):
        raise gpus.error("mig_layout", f"expected {shape}, got {_describe(raw)}")
    if all(isinstance(item, str) for item in raw):
        return (tuple(raw),) * gpu_count
    if not all(isinstance(item, list) and all(isinstance(name, str) for name in item) for item in raw):
        raise gpus.error("mig_layout", f"expected {shape}")
    if len(raw) != gpu_count:
        raise gpus.error("mig_layout", f"has {len(raw)} per-GPU layouts for {gpu_count} GPUs")
    return tuple(tuple(item) for item in raw)


def _check_layout(
    gpus: _Table, geometry: MigGeometry, layout: tuple[str, ...], layouts: MigLayouts, gpu_count: int
) -> None:
    try:
        pack_layout(geometry, layout)
    except (CatalogError, MigPlacementError) as exc:
        positions = [str(i) for i, other in enumerate(layouts) if other == layout]
        where = "" if len(positions) == gpu_count else f"GPU {', '.join(positions)}: "
        raise gpus.error("mig_layout", f"{where}{exc}") from None


def _expand(entry: _Table, template: Node, max_count: int | None) -> tuple[Node, ...]:
    """The entry's nodes: the template itself, or `count_nodes` copies named by replacing `{i}`."""
    marked = INDEX_MARK in template.name
    if not entry.has("count_nodes"):
        if marked:
            raise entry.error("count_nodes", f"missing; the name holds {INDEX_MARK} so say how many nodes")
        return (template,)
    count = entry.positive_int("count_nodes", max_count)
    if not marked:
        raise entry.error("name", f"count_nodes needs {INDEX_MARK} in the name to number the nodes")
    width = max(2, len(str(count)))
    return tuple(
        replace(
            template, name=template.name.replace(INDEX_MARK, f"{i:0{width}d}"), labels=dict(template.labels)
        )
        for i in range(1, count + 1)
    )


def _check_unique_names(nodes: tuple[Node, ...], source: str) -> None:
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise FleetError("duplicate node name", source=source, node=node.name, field="name")
        seen.add(node.name)


def _describe(value: object) -> str:
    if value is None:
        return "nothing"
    return f"{type(value).__name__} {value!r}"
