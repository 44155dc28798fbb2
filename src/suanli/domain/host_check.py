"""Whether a host's GPUs, as its agent's probe reports them, are the ones the fleet declares for its node.

`gpu_mismatch` is pure and lenient: a reported name is compared as the catalogue model it names (any case,
or its family where that is one model), so a probe's catalogue names always match; a name the catalogue
does not know cannot be told apart and is taken as the fleet's (a driver's new device string, such as "AMD
Instinct MI300X" or an H100 variant the probe's table lacks, must not cordon a good host): only a model the
catalogue knows as another one, or too few GPUs, is a mismatch. The host may have more GPUs than the fleet
declares (the first ones are rented).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from suanli.domain.catalog import Catalog
from suanli.domain.errors import CatalogError
from suanli.domain.inventory import Node


def gpu_mismatch(node: Node, reported_models: Sequence[str], catalog: Catalog) -> str | None:
    """Why the host's GPUs (their model names, by index) are not the node's the fleet declares, or None when
    they are: at least its count, and its first ones all of its model."""
    rented = reported_models[: node.gpu_count]
    if len(rented) == node.gpu_count and all(_names(name, node.gpu_model, catalog) for name in rented):
        return None
    return (
        f"its host reports {_summary(reported_models)}; the fleet declares {node.gpu_count}x {node.gpu_model}"
    )


def _names(reported: str, model_name: str, catalog: Catalog) -> bool:
    """Whether `reported` may name the catalogue model `model_name`: it does, or the catalogue cannot tell."""
    try:
        return catalog.get(reported).name == model_name
    except CatalogError:
        return True


def _summary(models: Sequence[str]) -> str:
    """ "2x H100-SXM-80GB, 1x T4" in the order the host lists them; "no GPUs" for none."""
    return ", ".join(f"{count}x {name}" for name, count in Counter(models).items()) or "no GPUs"
