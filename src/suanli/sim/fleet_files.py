"""Fleet files on disk: read one and parse it with the domain's fleet format, naming the file in errors."""

from __future__ import annotations

from pathlib import Path

from suanli.domain.catalog import Catalog
from suanli.domain.catalog_data import CATALOG
from suanli.domain.errors import FleetError
from suanli.domain.fleet_format import parse_fleet
from suanli.domain.inventory import Fleet


def read_fleet(path: Path, catalog: Catalog = CATALOG) -> Fleet:
    """The fleet declared in the TOML file at `path`; FleetError when it is missing, unreadable or wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FleetError("no such fleet file", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FleetError(f"cannot read the fleet file: {exc}", source=str(path)) from None
    return parse_fleet(text, source=str(path), catalog=catalog)
