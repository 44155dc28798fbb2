"""List prices per GPU model and tier, until the billing issue brings price books.

On-demand prices of a few models are public cloud list prices (each with its source; figures as published
in 2024, in USD micros per GPU-hour; re-check before quoting them). Every other model is priced by a stated
rule: the H100 SXM price scaled by dense BF16 TFLOPS. Spot and reserved are fixed fractions of on-demand
(our policy, not a market figure).
"""

from __future__ import annotations

from types import MappingProxyType

from suanli.domain.catalog import GpuModel

MICROS = 1_000_000
# model name -> (on-demand USD micros per GPU-hour, source)
LIST_PRICES = MappingProxyType(
    {
        "H100-SXM-80GB": (2_990_000, "Lambda GPU Cloud on-demand, 8x H100 SXM, $2.99/GPU/h (2024)"),
        "A100-80GB": (1_790_000, "Lambda GPU Cloud on-demand, 8x A100 80GB SXM, $1.79/GPU/h (2024)"),
        "A100-40GB": (1_290_000, "Lambda GPU Cloud on-demand, 8x A100 40GB SXM, $1.29/GPU/h (2024)"),
        "A10": (750_000, "Lambda GPU Cloud on-demand, 1x A10 24GB, $0.75/GPU/h (2024)"),
    }
)
REFERENCE_MODEL = "H100-SXM-80GB"
REFERENCE_TFLOPS = 989.5
FLOOR_MICROS = 100_000
ROUND_MICROS = 10_000
TIER_FACTORS = MappingProxyType({"on_demand": 1.0, "reserved": 0.7, "spot": 0.5})


def list_price(model: GpuModel, tier: str) -> int:
    """Micros per GPU-hour for `model` in `tier` (on_demand, reserved, spot)."""
    return _round(on_demand_price(model) * TIER_FACTORS[tier])


def on_demand_price(model: GpuModel) -> int:
    listed = LIST_PRICES.get(model.name)
    if listed is not None:
        return listed[0]
    scaled = LIST_PRICES[REFERENCE_MODEL][0] * model.bf16_dense_tflops / REFERENCE_TFLOPS
    return max(FLOOR_MICROS, _round(scaled))


def price_source(model: GpuModel) -> str:
    listed = LIST_PRICES.get(model.name)
    if listed is not None:
        return listed[1]
    return f"derived: {REFERENCE_MODEL} list price x BF16 TFLOPS ratio ({model.bf16_dense_tflops:g}/989.5)"


def _round(micros: float) -> int:
    return round(micros / ROUND_MICROS) * ROUND_MICROS
