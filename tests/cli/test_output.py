"""What the CLI prints comes out as the text it was given: a command, a message or a path holding Rich markup
(`[bold]`) or an emoji code (`:x:`) is shown as it is, not styled, replaced or dropped."""

from __future__ import annotations

from rich.console import Console

from suanli.cli.output import error_text, table

TRICKY = "python -c 'print([bold]x)' :x: [/]"


def _shown(renderable, width: int = 200) -> str:
    console = Console(record=True, width=width)
    console.print(renderable)
    return console.export_text()


def test_table_cells_are_shown_as_they_are() -> None:
    shown = _shown(table("rentals", ["id", "command"], [["rnt_1", TRICKY], ["rnt_2", None]]))
    assert TRICKY in shown and "rnt_2" in shown


def test_a_narrow_terminal_wraps_cells_and_cuts_none() -> None:
    """At 80 columns the rentals table is too wide: the id wraps onto the next line, whole, instead of
    being cut to `rnt_0814…`, which no `suanli logs` could take."""
    rental_id = "rnt_0814c67dd16ddc45"
    row = [rental_id, "running", "A100-80GB:3g.40gb", 1, "on_demand", "", "", "h100-a-01, h100-a-02"]
    columns = ["id", "state", "shape", "nodes", "tier", "image", "pending", "on"]
    shown = _shown(table("Rentals", columns, [row]), width=80)
    assert "…" not in shown
    first_column = "".join(line.split("│")[1].strip() for line in shown.splitlines() if line.startswith("│"))
    assert first_column == rental_id


def test_error_messages_are_shown_as_they_are() -> None:
    assert _shown(error_text(f"--jobs {TRICKY}: not found")).strip() == f"error: --jobs {TRICKY}: not found"


def test_option_values_the_request_refuses_are_named_by_option_not_a_traceback() -> None:
    """Checked before anything is sent (no server here): exit 2 and one line per bad option."""
    from typer.testing import CliRunner

    from suanli.cli.main import app

    runner = CliRunner()
    rent = runner.invoke(app, ["rent", "H100:1", "--max-duration", str(10**11), "--cpu", "-5"])
    assert rent.exit_code == 2, rent.output
    assert "--max-duration: at most 3660 days" in rent.output
    assert "--cpu: Input should be greater than or equal to 0" in rent.output
    share = runner.invoke(app, ["rent", "L40S:0.5", "--share-memory", "-1"])
    assert share.exit_code == 2, share.output
    assert "--share-memory: Input should be greater than or equal to 0" in share.output
    whole = runner.invoke(app, ["rent", "H100:1", "--share-memory", "1024"])
    assert whole.exit_code == 2 and "--share-memory 1024: only with a share of a GPU" in whole.output
    for args, says in (
        (["rent", "L40S:0.5", "--idle-stop", "30m"], "--idle-stop: needs whole GPUs"),
        (["rent", "H100:1", "--idle-stop", "soon"], "--idle-stop: not a duration: 'soon'"),
        (["rent", "H100:1", "--idle-stop", "30s"], "--idle-stop: at least 60 s"),
    ):
        idle = runner.invoke(app, args)
        assert idle.exit_code == 2 and says in idle.output, idle.output
    far = ["contracts", "create", "--gpu", "H100", "--count", "1", "--region", "x"]
    contract = runner.invoke(app, [*far, "--from", "2030-01-01T00:00", "--until", "9999-12-31T23:00"])
    assert contract.exit_code == 2 and "--until: must be before the year 9000" in contract.output


def test_the_offers_table_names_each_rows_unit() -> None:
    """A whole GPU, a MIG profile, or on a shares row the largest share one GPU has free and that GPU's free
    memory."""
    from suanli.cli.platform_commands import _offers_table
    from suanli.wire.schemas import OfferResponse

    common = dict(
        region="eu-west", jurisdiction="EU", tier="on_demand", interconnect=None, free_gpus=4,
        max_gpus_per_node=4, nodes_with_free_gpus=1, price_micros_per_gpu_hour=1_000_000,
    )  # fmt: skip
    share = dict(shares=True, largest_share_milli=250, share_memory_mib=16_384)
    offers = [
        OfferResponse(gpu_model="L40S", **common),
        OfferResponse(gpu_model="L40S", **share, **common),
        OfferResponse(gpu_model="A100-80GB", mig_profile="3g.40gb", **common),
    ]
    lines = _shown(_offers_table(offers)).splitlines()
    units = [line.split("│")[2].strip() for line in lines if line.startswith("│")]
    assert units == ["GPU", "share<=0.25 16GiB", "3g.40gb"]


def test_the_offers_table_says_when_the_tenants_plan_discount_is_in_its_prices() -> None:
    from suanli.cli.platform_commands import _offers_table
    from suanli.wire.schemas import OfferResponse

    common = dict(
        gpu_model="H100", region="cn-north", jurisdiction="CN", interconnect="ib", free_gpus=8,
        max_gpus_per_node=8, nodes_with_free_gpus=1,
    )  # fmt: skip
    member = [
        OfferResponse(tier="on_demand", price_micros_per_gpu_hour=2_691_000, plan_discount_bp=1000, **common),
        OfferResponse(tier="spot", price_micros_per_gpu_hour=1_500_000, **common),
    ]
    shown = _shown(_offers_table(member))
    assert "prices include your plan's discount: 10.00% off on_demand" in shown
    assert "discount" not in _shown(_offers_table(member[1:]))


def test_the_share_of_a_limit_spent_reads_100_percent_only_once_it_is_reached() -> None:
    """99.99% of a budget showed 100% (rounded), while rentals still started; it is floored to a tenth."""
    from suanli.cli.plan_commands import used_percent

    limit = 250_000_000
    shown = [used_percent(spent, limit) for spent in (0, 1, limit // 3, limit - 25_000, limit - 1, limit)]
    assert shown == ["0%", "0%", "33.3%", "99.9%", "99.9%", "100%"]
    assert used_percent(limit // 2, limit) == "50%" and used_percent(limit + limit // 8, limit) == "112.5%"
    assert used_percent(0, 0) == "100%" and used_percent(1, 0) == "100%"  # a zero cap holds everything


def test_the_budget_table_shows_99_99_percent_spent_as_99_9_not_100() -> None:
    from suanli.cli.plan_commands import _budget_table
    from suanli.wire.plan_schemas import LimitsResponse

    found = LimitsResponse(
        tenant_id="ten_1", gpu_quota={}, daily_cap_micros=None, monthly_cap_micros=None,
        budget_daily_micros=10_000_000, budget_monthly_micros=250_000_000, spent_today_micros=9_999_000,
        spent_month_micros=250_000_000, fair_share_weight=1.0,
    )  # fmt: skip
    used = {
        cells[0]: cells[3]
        for line in _shown(_budget_table(found)).splitlines()
        if line.startswith("│") and len(cells := [c.strip() for c in line.strip("│").split("│")]) == 4
    }
    assert used == {"own daily budget": "99.9%", "own monthly budget": "100%"}, used
