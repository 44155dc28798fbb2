"""Domain errors, one tree so callers know what to catch.

SuanliError
 +-- CatalogError            unknown GPU model or MIG profile
 +-- MigPlacementError       a MIG instance at a start slot NVIDIA does not allow, or overlapping another
 +-- FleetError              a fleet description that is not valid (names the source, node and field)
 +-- RequestError            a request that can never be valid (bad shape, bad numbers)
 +-- ContractError           a compute future that is malformed or that the fleet cannot honour
"""


class SuanliError(Exception):
    """Base of every error the domain raises on purpose."""


class CatalogError(SuanliError):
    """A GPU model or MIG profile that the catalogue does not know."""


class MigPlacementError(SuanliError):
    """A MIG layout that breaks NVIDIA's placement rules."""


class FleetError(SuanliError):
    """A fleet description with a mistake; `source`, `node` and `field` say where."""

    def __init__(self, message: str, *, source: str = "", node: str = "", field: str = "") -> None:
        self.source, self.node, self.field = source, node, field
        where = ", ".join(
            part
            for part in (source, f"node {node!r}" if node else "", f"field {field!r}" if field else "")
            if part
        )
        super().__init__(f"{where}: {message}" if where else message)


class RequestError(SuanliError):
    """A request that no fleet could ever satisfy as written; `field` names the culprit."""

    def __init__(self, message: str, *, field: str = "") -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class ContractError(SuanliError):
    """A compute future (contract) that is malformed, overbooks the fleet, or cannot be transferred;
    `field` names the term at fault when it is not the count."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
