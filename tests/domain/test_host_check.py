"""A host's GPUs against the fleet's node: the names its probe gives, compared as catalogue models."""

from __future__ import annotations

import pytest

from suanli.domain.catalog_data import CATALOG
from suanli.domain.host_check import gpu_mismatch
from suanli.domain.inventory import Node

MI300X_NODE = Node("mi300-01", "r", ("r", "z", "p", "l"), 64_000, 262_144, "MI300X", 4)


@pytest.mark.parametrize(
    "reported",
    [
        pytest.param(["MI300X"] * 4, id="the-catalogue-name"),
        pytest.param(["mi300x"] * 4, id="any-case"),
        pytest.param(["MI300X"] * 8, id="more-than-the-fleet-rents"),
        pytest.param(["AMD Instinct MI300X"] * 4, id="a-name-the-catalogue-does-not-know"),
    ],
)
def test_a_host_with_the_fleets_gpus_matches(reported: list[str]) -> None:
    assert gpu_mismatch(MI300X_NODE, reported, CATALOG) is None


@pytest.mark.parametrize(
    ("reported", "reported_as"),
    [
        pytest.param(["MI300X"] * 2, "2x MI300X", id="fewer"),
        pytest.param(["H100-SXM-80GB"] * 4, "4x H100-SXM-80GB", id="another-model"),
        pytest.param(["MI300X", "MI300X", "MI250X", "MI300X"], "3x MI300X, 1x MI250X", id="one-other"),
        pytest.param([], "no GPUs", id="none"),
    ],
)
def test_a_host_with_other_gpus_says_how_they_differ(reported: list[str], reported_as: str) -> None:
    assert gpu_mismatch(MI300X_NODE, reported, CATALOG) == (
        f"its host reports {reported_as}; the fleet declares 4x MI300X"
    )
