"""A fleet's numbers have physical bounds through the API (SQLite and PostgreSQL): `PUT /v1/fleet` refuses one
above its bound naming the field and the bound; a fleet stored before the bounds were kept still loads."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from conftest import ADMIN, FLEET
from suanli.domain.catalog_data import CATALOG
from suanli.domain.fleet_format import parse_fleet

TOML = {"Content-Type": "application/toml"}


@pytest.mark.parametrize(
    ("pattern", "value", "field", "bound"),
    [
        (r"(?m)^pue = .*$", "pue = 1e308", "regions.cn-north.pue", "3"),
        (
            r"(?m)^grid_gco2_per_kwh = .*$",
            "grid_gco2_per_kwh = 1e308",
            "regions.cn-north.grid_gco2_per_kwh",
            "2000",
        ),
        (r"(?m)^memory_mib = .*$", "memory_mib = 1000000000000", "memory_mib", "268,435,456"),
        (r"(?m)^cpu_milli = .*$", "cpu_milli = 1000000000", "cpu_milli", "8,192,000"),
        (r"count = 8", "count = 4096", "gpus.count", "64"),
    ],
    ids=["pue", "grid", "memory", "cpu", "gpus"],
)
def test_a_fleet_number_above_its_bound_is_refused_naming_the_field_and_the_bound(
    client: TestClient, pattern: str, value: str, field: str, bound: str
) -> None:
    """`pue = 1e308` was stored (and overflowed every energy figure of its region); now 400 naming the field
    and its bound, and the fleet is unchanged."""
    before = client.get("/v1/nodes", headers=ADMIN).json()
    refused = client.put(
        "/v1/fleet", content=re.sub(pattern, value, FLEET, count=1), headers={**ADMIN, **TOML}
    )
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["field"] == field and f"must be at most {bound}," in error["message"], error
    assert client.get("/v1/nodes", headers=ADMIN).json() == before


def test_a_fleet_stored_before_the_bounds_still_loads(client: TestClient) -> None:
    """A fleet with `pue = 4.5` stored by an older server is read back (the server reads it on every start),
    though a `PUT` of it now is refused."""
    old = re.sub(r"(?m)^pue = .*$", "pue = 4.5", FLEET, count=1)
    assert client.put("/v1/fleet", content=old, headers={**ADMIN, **TOML}).status_code == 400
    names = [n.name for n in parse_fleet(old, source="old", catalog=CATALOG, bounded=False).nodes]
    services = client.app.state.services
    with services.fleet.uow() as uow:
        uow.fleet.put(old, names, datetime.now(UTC))
        uow.commit()
    nodes = client.get("/v1/nodes", headers=ADMIN)
    assert nodes.status_code == 200 and sorted(n["name"] for n in nodes.json()) == sorted(names)
