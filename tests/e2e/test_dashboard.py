"""The web console (/ui/) in a real browser (Debian's Chromium through Playwright) against the real server and
agents: sign in with a tenant's key, find capacity, rent, follow the rental to its output, stop one, and see
bad input refused with the field named and nothing created. Skipped where no Chromium is installed, except
in CI (`.ci/run` installs it), where a missing browser fails the run."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import formatdate
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
from test_agents import ADMIN_KEY, FLEET, Platform, running_platform, wait_for_state
from test_mig_agents import FLEET as MIG_FLEET
from test_mig_agents import HAND_CARVED

from suanli.client import ApiError, Client
from suanli.wire.billing_schemas import PriceEntryRequest
from suanli.wire.plan_schemas import PlanRequest
from suanli.wire.schemas import ContractCreateRequest, ContractOfferRequest, RentalCreateRequest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists() and os.environ.get("CI") != "true":
    pytest.skip("no Chromium here (CI installs Debian's chromium)", allow_module_level=True)

from playwright.sync_api import Page, Route, expect, sync_playwright  # noqa: E402

WAIT_MS = 20_000


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """Two agents' nodes, a tenant with 100 units of credit, and a meter that charges every 0.5 s."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SUANLI_METER_INTERVAL_S", "0.5")  # the server process inherits it
        with running_platform(tmp_path_factory.mktemp("console"), FLEET, ("gpu-01", "gpu-02")) as p:
            with p.tenant() as api, Client(p.url, ADMIN_KEY) as admin:
                admin.credit(api.me().tenant.id, 100_000_000, memo="console tests")
            yield p


@pytest.fixture
def page(platform: Platform) -> Iterator[Page]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.set_default_timeout(WAIT_MS)
            yield page
        finally:
            browser.close()


def sign_in(page: Page, platform: Platform) -> None:
    page.goto(platform.url)  # / sends the browser to /ui/
    page.fill("#key", platform.tenant_key)
    page.click("#login-form button")
    expect(page.locator("#tenant-name")).to_have_text("lab (tenant)")


def rent_running(page: Page, name: str, command: str) -> str:
    """Rent an H100 from the form to run `command`; its id once its page says it runs."""
    page.fill("#rent-model", "H100-SXM-80GB")
    page.fill("#rent-name", name)
    page.fill("#rent-command", command)
    page.click("#rent-form button[type=submit]")
    expect(page.locator("#detail-summary")).to_contain_text("running", timeout=20_000)
    return page.locator("#detail-id").inner_text()


def test_a_tenant_signs_in_rents_from_an_offer_and_reads_the_output(page: Page, platform: Platform) -> None:
    page.goto(platform.url)
    page.fill("#key", "sk_not_a_key_of_this_server")
    page.click("#login-form button")
    expect(page.locator("#login-error")).to_have_text("that key is not valid here")
    sign_in(page, platform)
    expect(page.locator("#balance")).to_contain_text("available")

    offer = page.locator("#offers tbody tr").first
    expect(offer).to_contain_text("H100-SXM-80GB")
    offer.get_by_role("button", name="Use").click()
    expect(page.locator("#rent-model")).to_have_value("H100-SXM-80GB")
    page.fill("#rent-command", "echo hello from the console; echo '<b>not bold</b>'")
    with platform.tenant() as api:
        before = len(api.rentals())
    page.click("#rent-check")  # a dry run first: where and at what rate, nothing made
    expect(page.locator("#rent-trial")).to_contain_text("Would start now on gpu-01 at ")
    expect(page.locator("#rent-trial")).to_contain_text("Dry run: nothing was created.")
    with platform.tenant() as api:
        assert len(api.rentals()) == before
    page.click("#rent-form button[type=submit]")

    expect(page.locator("#detail-id")).not_to_be_empty()
    rental_id = page.locator("#detail-id").inner_text()
    expect(page.locator(f"#rentals tbody tr[data-id='{rental_id}']")).to_have_count(1)
    expect(page.locator("#detail-summary")).to_contain_text("stopped")
    log = page.locator("#detail-log")
    expect(log).to_contain_text("hello from the console")
    expect(log).to_contain_text("<b>not bold</b>")  # the tenant's output is text, never markup
    assert page.locator("#detail-log b").count() == 0
    expect(page.locator("#detail-events")).to_contain_text("placed")
    with platform.tenant() as api:
        rental = api.rental(rental_id)
    assert rental.request.command == ["sh", "-c", "echo hello from the console; echo '<b>not bold</b>'"]

    page.click("#detail-rerun")  # the same request again: a new rental, shown
    expect(page.locator("#detail-id")).not_to_have_text(rental_id)
    again_id = page.locator("#detail-id").inner_text()
    expect(page.locator("#detail-log")).to_contain_text("hello from the console")
    with platform.tenant() as api:
        assert api.rental(again_id).request == rental.request
    assert rental.request.gpu_model == "H100-SXM-80GB" and rental.request.gpus == 2

    expect(page.locator("#usage tbody")).to_contain_text(rental_id)  # charged from its start
    assert float(page.locator("#usage-total").inner_text()) > 0
    expect(page.locator("#nodes-section")).to_be_hidden()  # a tenant sees no operators' pages

    page.reload()  # the key stays for the tab
    expect(page.locator("#tenant-name")).to_have_text("lab (tenant)")
    page.click("#sign-out")
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#console")).to_be_hidden()


def test_a_command_runs_inside_a_running_rental_from_its_page(page: Page, platform: Platform) -> None:
    """The rental page's "Run in it" box: the command sees the rental's GPUs, its output shows as it comes
    (while it still runs) and then its exit code; the same box on an ended rental says why it cannot."""
    sign_in(page, platform)
    rental_id = rent_running(page, "exec-me", "sleep 60")
    command = 'echo "sees $CUDA_VISIBLE_DEVICES"; sleep 6; exit 2'
    page.fill("#exec-command", command)
    page.click("#exec-form button")
    expect(page.locator("#exec-output")).to_contain_text("sees GPU-", timeout=20_000)
    expect(page.locator("#exec-status")).to_have_text("running…")  # shown before the command ends
    expect(page.locator("#exec-status")).to_have_text("exit 2", timeout=20_000)
    expect(page.locator("#exec-output")).to_contain_text("sees GPU-")
    with platform.tenant() as api:
        (done,) = api.execs(rental_id)
        assert done.command == ["sh", "-c", command]
        api.stop(rental_id)
    expect(page.locator("#detail-summary")).to_contain_text("stopped", timeout=20_000)
    page.click("#exec-form button")
    expect(page.locator("#exec-error")).to_contain_text("a command runs inside a running rental only")


def test_a_terminal_opens_on_a_running_rental_in_a_new_tab(page: Page, platform: Platform) -> None:
    """The rental page's Terminal button: a shell on the node in a tab of its own (xterm.js over the attach
    WebSocket, the key as its subprotocol), keys typed reach it, its output shows, and its exit code once it
    ends; the button is off for a rental that does not run."""
    sign_in(page, platform)
    rental_id = rent_running(page, "shell-me", "sleep 120")
    with page.context.expect_page() as opened:
        page.click("#detail-terminal")
    terminal = opened.value
    terminal.set_default_timeout(WAIT_MS)
    expect(terminal.locator("#term-rental")).to_have_text(rental_id)
    expect(terminal.locator("#term-status")).to_contain_text("exe_", timeout=20_000)  # its first output came
    terminal.keyboard.type('echo "sees $CUDA_VISIBLE_DEVICES on $(tty)"')
    terminal.keyboard.press("Enter")
    expect(terminal.locator(".xterm-rows")).to_contain_text("sees GPU-")
    expect(terminal.locator(".xterm-rows")).to_contain_text("on /dev/pts/")  # a terminal on the node
    terminal.keyboard.type("exit 3")
    terminal.keyboard.press("Enter")
    expect(terminal.locator("#term-status")).to_have_text("ended: exit 3")
    with platform.tenant() as api:
        (shell,) = api.execs(rental_id)
        assert shell.tty and shell.stdin and shell.exit_code == 3
        api.stop(rental_id)
    expect(page.locator("#detail-summary")).to_contain_text("stopped", timeout=20_000)
    expect(page.locator("#detail-terminal")).to_be_disabled()


def test_a_tenant_creates_a_key_for_a_script_and_revokes_it(page: Page, platform: Platform) -> None:
    sign_in(page, platform)
    expect(page.locator("#keys tbody tr", has_text="(this session's)").get_by_role("button")).to_be_disabled()
    page.fill("#key-label", "nightly")
    page.click("#key-form button")
    expect(page.locator("#key-secret-value")).to_contain_text("sk_")
    secret = page.locator("#key-secret-value").inner_text()
    with Client(platform.url, secret) as script:
        assert script.me().key_id.startswith("key_")  # the new key works
    row = page.locator("#keys tbody tr", has_text="nightly")
    row.get_by_role("button", name="Revoke").click()
    expect(row).to_contain_text("revoked")
    with Client(platform.url, secret) as script, pytest.raises(ApiError) as refused:
        script.me()
    assert refused.value.status == 401


def test_signing_out_leaves_nothing_of_the_tenant_for_the_next_user_of_the_tab(
    page: Page, platform: Platform
) -> None:
    """A shared computer: after sign-out the next tenant in the same tab sees none of the first one's typed
    command, dry-run result, new key's secret or rentals."""
    with Client(platform.url, ADMIN_KEY) as admin:
        other = admin.create_tenant(f"next-user-{time.monotonic_ns()}")
        other_key = admin.create_key(other.id).secret
    sign_in(page, platform)
    with platform.tenant() as api:
        api.create_rental(RentalCreateRequest(gpus=1, command=["sleep", "1"]))
    expect(page.locator("#rentals tbody tr").first).to_be_visible()
    page.fill("#rent-model", "H100-SXM-80GB")
    page.fill("#rent-name", "first-users-job")
    page.fill("#rent-command", "train --token=abc123")
    page.click("#rent-check")
    expect(page.locator("#rent-trial")).to_contain_text("Dry run: nothing was created.")
    page.fill("#key-label", "handover")
    page.click("#key-form button")
    expect(page.locator("#key-secret-value")).to_contain_text("sk_")

    page.click("#sign-out")
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#key-secret-value")).to_have_text("")
    page.fill("#key", other_key)
    page.click("#login-form button")
    expect(page.locator("#tenant-name")).to_have_text(f"{other.name} (tenant)")
    assert page.locator("#rentals tbody tr").count() == 0  # not even for a moment before the first refresh
    for box in ("#rent-model", "#rent-name", "#rent-command"):
        expect(page.locator(box)).to_have_value("")
    expect(page.locator("#rent-trial")).to_have_text("")
    expect(page.locator("#key-secret-value")).to_have_text("")
    expect(page.locator("#rentals-empty")).to_be_visible()


def test_a_key_revoked_elsewhere_returns_the_tab_to_sign_in_saying_why(
    page: Page, platform: Platform
) -> None:
    with platform.tenant() as api:
        tenant_id = api.me().tenant.id
        made = api.create_key(tenant_id, "revoked-while-open")
    page.goto(platform.url)
    page.fill("#key", made.secret or "")
    page.click("#login-form button")
    expect(page.locator("#tenant-name")).to_have_text("lab (tenant)")
    with platform.tenant() as api:
        api.revoke_key(tenant_id, made.id)
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#login-error")).to_contain_text("revoked")
    sign_in(page, platform)
    page.click("#sign-out")  # one's own sign-out needs no reason
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#login-error")).to_have_text("")


def test_a_rental_opens_from_the_keyboard_and_each_offer_says_which_it_uses(
    page: Page, platform: Platform
) -> None:
    sign_in(page, platform)
    with platform.tenant() as api:
        rental = api.create_rental(RentalCreateRequest(gpus=1, name="by-keyboard", command=["sleep", "1"]))
    opener = page.get_by_role("button", name=f"open rental {rental.id}")
    opener.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#detail-id")).to_have_text(rental.id)

    expect(page.locator("#offers tbody tr").first).to_be_visible()
    names = page.locator("#offers tbody button").evaluate_all(
        "buttons => buttons.map((b) => b.getAttribute('aria-label') ?? b.textContent)"
    )
    rows = page.locator("#offers tbody tr").evaluate_all("rows => rows.map((r) => r.cells[0].textContent)")
    assert len(set(names)) == len(names) > 1
    assert all(name.startswith(f"Use {model} ") for name, model in zip(names, rows, strict=True))


def test_a_tenant_adds_a_webhook_sees_its_secret_once_and_removes_it(page: Page, platform: Platform) -> None:
    sign_in(page, platform)
    page.fill("#webhook-url", "ftp://example.com/x")
    page.click("#webhook-form button")
    expect(page.locator("#webhook-error")).to_contain_text("not an http(s) URL")
    page.fill("#webhook-url", "https://ci.example.com/suanli")
    page.fill("#webhook-events", "failed, stoped")
    page.click("#webhook-form button")
    expect(page.locator("#webhook-error")).to_contain_text("unknown event kind 'stoped'")
    page.fill("#webhook-events", "failed, stopped")
    page.click("#webhook-form button")
    expect(page.locator("#webhook-secret-value")).to_contain_text("whsec_")
    row = page.locator("#webhooks tbody tr", has_text="https://ci.example.com/suanli")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("stopped, failed")
    with platform.tenant() as api:
        (hook,) = api.webhooks()
    assert hook.url == "https://ci.example.com/suanli" and hook.secret is None
    assert hook.events == ["stopped", "failed"]
    row.get_by_role("button", name="Remove").click()
    expect(page.locator("#webhooks")).to_be_hidden()
    with platform.tenant() as api:
        assert api.webhooks() == []


def test_a_tenant_sets_and_clears_its_own_budget(page: Page, platform: Platform) -> None:
    sign_in(page, platform)
    try:
        expect(page.locator("#budget-spent")).to_contain_text("today")  # read: it will not overwrite typing
        expect(page.locator("#budget-monthly")).to_have_value("")
        page.fill("#budget-monthly", "lots")
        page.click("#budget-form button")
        expect(page.locator("#budget-error")).to_have_text(
            "monthly budget: give an amount of 0 or more, e.g. 12.5 (at most 6 decimals)"
        )
        page.fill("#budget-monthly", "1.1234567")  # past a micro: refused, as the CLI does, not rounded
        page.click("#budget-form button")
        expect(page.locator("#budget-error")).to_contain_text("(at most 6 decimals)")
        with platform.tenant() as api:
            assert api.limits().budget_monthly_micros is None  # nothing was sent
        page.fill("#budget-monthly", "0.5")
        page.fill("#budget-daily", "0.25")
        page.click("#budget-form button")
        expect(page.locator("#budget-error")).to_have_text("")
        expect(page.locator("#budget-monthly")).to_have_value("0.5000")  # as the server has it now
        with platform.tenant() as api:
            limits = api.limits()
        assert (limits.budget_daily_micros, limits.budget_monthly_micros) == (250_000, 500_000)
        assert not limits.budget_stops_running
        page.check("#budget-stop")
        page.click("#budget-form button")
        with platform.tenant() as api:  # the box was ticked by the click: wait for the server's answer
            deadline = time.monotonic() + 5
            while not api.limits().budget_stops_running and time.monotonic() < deadline:
                time.sleep(0.1)
            assert api.limits().budget_stops_running
        expect(page.locator("#budget-stop")).to_be_checked()  # as the server has it
        page.fill("#budget-daily", "")
        page.fill("#budget-monthly", "")
        page.click("#budget-form button")  # no budget, stop checked: the server names the field
        expect(page.locator("#budget-error")).to_contain_text("give a daily or monthly budget")
        page.uncheck("#budget-stop")
        page.click("#budget-form button")
        expect(page.locator("#budget-daily")).to_have_value("")
        with platform.tenant() as api:
            assert api.limits().budget_monthly_micros is None
    finally:
        with platform.tenant() as api:
            api.set_budget()  # later tests rent as this tenant


def test_a_budget_refresh_that_answers_late_leaves_what_was_typed_since(
    page: Page, platform: Platform
) -> None:
    """After a change the form reads the budget back; typed while that read is on its way (held here), the
    new text stays: CI once lost a test's typing to a refresh that answered after it."""
    sign_in(page, platform)
    held = []
    try:
        expect(page.locator("#budget-spent")).to_contain_text("today")
        page.route("**/v1/limits", lambda route: held.append(route))  # the read after the change waits here
        page.fill("#budget-daily", "0.25")
        page.click("#budget-form button")
        deadline = time.monotonic() + 10
        while not held and time.monotonic() < deadline:
            page.wait_for_timeout(20)
        assert held, "the form did not read the budget back"
        page.fill("#budget-daily", "7")
        for route in held:
            route.continue_()
        page.unroute("**/v1/limits")
        expect(page.locator("#budget-spent")).to_contain_text("today")
        page.wait_for_timeout(300)  # the late answer has been handled
        expect(page.locator("#budget-daily")).to_have_value("7")
    finally:
        with platform.tenant() as api:
            api.set_budget()  # later tests rent as this tenant


def test_a_rental_with_max_hours_shows_when_it_stops_and_is_stopped_then(
    page: Page, platform: Platform
) -> None:
    sign_in(page, platform)
    page.fill("#rent-model", "H100-SXM-80GB")
    page.fill("#rent-hours", "0.0006")  # 2 s
    page.fill("#rent-name", "short-one")
    page.fill("#rent-command", "echo up; sleep 60")
    page.click("#rent-form button[type=submit]")
    expect(page.locator("#detail-summary")).to_contain_text("(max hours)")
    expect(page.locator("#detail-summary")).to_contain_text("stopped", timeout=20_000)
    expect(page.locator("#detail-summary")).not_to_contain_text("stops at")
    expect(page.locator("#detail-events")).to_contain_text("time_limit")
    expect(page.locator("#rentals tbody tr", has_text="short-one")).to_have_count(1)


def test_a_two_node_rentals_output_is_read_one_node_at_a_time(page: Page, platform: Platform) -> None:
    """Each rank prints its node rank; "every node" shows both lines, and picking a node shows its alone."""
    sign_in(page, platform)
    page.fill("#rent-model", "H100-SXM-80GB")
    page.fill("#rent-gpus", "2")
    page.fill("#rent-nodes", "2")
    page.fill("#rent-command", 'echo "rank $SUANLI_NODE_RANK"')
    page.click("#rent-form button[type=submit]")
    expect(page.locator("#detail-summary")).to_contain_text("stopped")
    log = page.locator("#detail-log")
    expect(log).to_contain_text("rank 0")
    expect(log).to_contain_text("rank 1")
    choice = page.locator("#detail-log-node")
    expect(choice.locator("option")).to_have_count(3)  # every node, and each of the two
    rental_id = page.locator("#detail-id").inner_text()
    with platform.tenant() as api:
        by_node = {run.node: api.logs(rental_id, node=run.node).data for run in api.rental_runs(rental_id)}
    for node, text in by_node.items():
        choice.select_option(node)
        expect(log).to_have_text(text)
    choice.select_option("")
    expect(log).to_contain_text("rank 0")
    expect(log).to_contain_text("rank 1")


def test_what_was_spent_is_read_again_while_signed_in_and_what_is_typed_stays(
    page: Page, platform: Platform
) -> None:
    """The budget line ("spent ... today") was read at sign-in only and went stale as the meter charged; it
    is read again with the month's usage, and that read leaves the budget fields being typed in alone."""
    sign_in(page, platform)
    expect(page.locator("#budget-spent")).to_contain_text("today")
    reads: list[str] = []
    page.on("request", lambda request: reads.append(request.url) if "/v1/limits" in request.url else None)
    page.fill("#budget-daily", "3")
    deadline = time.monotonic() + 30
    while not reads and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert reads, "the budget line was not read again after sign-in"
    page.wait_for_timeout(500)  # its answer has been handled
    expect(page.locator("#budget-spent")).to_contain_text("today")
    expect(page.locator("#budget-daily")).to_have_value("3")


def test_bad_input_is_refused_naming_the_field_and_creates_nothing(page: Page, platform: Platform) -> None:
    sign_in(page, platform)
    with platform.tenant() as api:
        before = len(api.rentals())
    page.fill("#rent-gpus", "999")
    page.click("#rent-form button[type=submit]")
    expect(page.locator("#rent-error")).to_have_text("gpus: Input should be less than or equal to 64")
    page.fill("#rent-gpus", "1")
    page.fill("#rent-hours", "1e9")  # the server's field is max_duration_s; the page names its own box
    page.click("#rent-form button[type=submit]")
    expect(page.locator("#rent-error")).to_have_text("max hours: at most 3660 days")
    page.fill("#rent-hours", "")
    page.fill("#rent-bid", "cheap")
    page.click("#rent-form button[type=submit]")
    expect(page.locator("#rent-error")).to_have_text(
        "bid: give an amount of 0 or more, e.g. 12.5 (at most 6 decimals)"
    )
    page.fill("#rent-bid", "")
    page.fill("#rent-share", "1.5")  # the server's field is in milli (at most 999): the page says a fraction
    page.click("#rent-form button[type=submit]")
    expect(page.locator("#rent-error")).to_have_text(
        "share: a share of a GPU is between 0 and 1 (got 1.5); whole GPUs are counts"
    )
    page.fill("#rent-share", "")
    page.fill("#offers-query", "gpu=H100 count>>8")
    page.click("#offers-form button")
    expect(page.locator("#offers-error")).not_to_be_empty()
    expect(page.locator("#offers tbody tr")).to_have_count(0)  # no earlier query's rows beside the error
    page.fill("#offers-query", "gpu=H10")
    page.click("#offers-form button")
    expect(page.locator("#offers-error")).to_contain_text("no GPU in this fleet is H10; it has H100-SXM-80GB")
    with platform.tenant() as api:
        assert len(api.rentals()) == before


def test_share_memory_without_a_share_or_under_a_mib_is_refused_in_the_page(
    page: Page, platform: Platform
) -> None:
    """Share memory alone was sent, stored and ignored (a whole GPU, no limit); 0.0001 GiB was sent as 0."""
    sign_in(page, platform)
    page.fill("#rent-model", "H100-SXM-80GB")
    page.fill("#rent-share-memory", "4")
    page.click("#rent-check")
    expect(page.locator("#rent-error")).to_have_text(
        "share memory GiB: only with a share of a GPU (give Share of a GPU too)"
    )
    expect(page.locator("#rent-trial")).to_have_text("")
    page.fill("#rent-share", "0.5")
    page.fill("#rent-share-memory", "0.0001")
    page.click("#rent-check")
    expect(page.locator("#rent-error")).to_have_text(
        "share memory GiB: at least 1 MiB (0.001 GiB), got 0.0001"
    )


def test_an_outage_shows_one_notice_that_goes_once_the_server_answers_again(
    page: Page, platform: Platform
) -> None:
    """Requests that cannot reach the server show one notice while they fail; no section keeps saying
    "cannot be reached" after the server answers again."""
    sign_in(page, platform)
    page.route("**/v1/**", lambda route: route.abort())
    notice = page.locator("#offline")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("cannot be reached")
    page.wait_for_timeout(11_000)  # past a slow refresh (every 10 s): prices, usage and budget fail too
    page.unroute("**/v1/**")
    expect(notice).to_be_hidden()
    page.wait_for_timeout(2_500)
    for section in ("#budget-error", "#prices-error", "#usage-error", "#detail-error"):
        expect(page.locator(section)).to_have_text("")


@pytest.mark.parametrize(
    ("box", "typed", "says"),
    [
        ("#rent-share", "0.0001", "share: at least 0.01 of a GPU, in whole percents (got 0.0001)"),
        ("#rent-share", "0.555", "share: at least 0.01 of a GPU, in whole percents (got 0.555)"),
        ("#rent-hours", "0.0001", "max hours: at least 1 second (0.0003 h), got 0.0001"),
    ],
    ids=["share-tiny", "share-not-a-percent", "hours-tiny"],
)
def test_rent_form_refusals_speak_the_units_typed(
    page: Page, platform: Platform, box: str, typed: str, says: str
) -> None:
    """Not the API's milli-units or seconds: the server's "greater than or equal to 10", "over 0 s"."""
    sign_in(page, platform)
    page.fill(box, typed)
    page.click("#rent-check")
    expect(page.locator("#rent-error")).to_have_text(says)


def test_the_rentals_table_reads_one_page_filtered_by_state(page: Page, platform: Platform) -> None:
    """It read the whole list (up to 1,000 rentals with their events) every 2 s, with no filter: now a page of
    the newest, live or ended or all, with how many it shows, and then only what changed since (the real
    server's `updated_after`): a rental made or ended meanwhile comes in; one that leaves the filter, out."""
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if "/v1/rentals?" in request.url else None)
    sign_in(page, platform)
    with platform.tenant() as api:
        ended = api.create_rental(RentalCreateRequest(gpus=1, name="ends-at-once", command=["true"]))
        live = api.create_rental(RentalCreateRequest(gpus=1, name="stays-live", command=["sleep", "60"]))
        wait_for_state(api, ended.id, "stopped")
    table = page.locator("#rentals tbody")
    expect(table.locator(f"tr[data-id='{ended.id}'] td.state")).to_have_text("stopped")
    assert "limit=50" in asked[0] and "updated_after" not in asked[0], asked
    assert asked[1:] and all("updated_after=" in url for url in asked[1:]), asked  # then only changes
    page.select_option("#rentals-state", "live")
    expect(table.locator(f"tr[data-id='{ended.id}']")).to_have_count(0)
    expect(table.locator(f"tr[data-id='{live.id}']")).to_have_count(1)
    whole = [url for url in asked if "updated_after" not in url][-1]
    assert "state=running" in whole and "state=stopped" not in whole
    expect(page.locator("#rentals-count")).to_have_text(f"{table.locator('tr').count()} live")
    page.select_option("#rentals-state", "ended")
    expect(table.locator(f"tr[data-id='{live.id}']")).to_have_count(0)
    expect(table.locator(f"tr[data-id='{ended.id}']")).to_have_count(1)
    expect(page.locator("#rentals-more")).to_be_hidden()  # fewer than a page: nothing more to read
    page.select_option("#rentals-state", "live")
    expect(table.locator(f"tr[data-id='{live.id}']")).to_have_count(1)
    with platform.tenant() as api:
        api.stop(live.id)
    expect(table.locator(f"tr[data-id='{live.id}']")).to_have_count(0)  # it changed, and left "live"
    page.select_option("#rentals-state", "all")
    expect(table.locator(f"tr[data-id='{live.id}'] td.state")).to_have_text("stopped")


def fake_rentals(count: int) -> list[dict]:
    """`count` stopped rentals as GET /v1/rentals gives them, newest first, each made a second before."""
    return [
        {
            "id": f"rnt_fake{n:04d}",
            "state": "stopped",
            "request": {"gpu_model": "L40S", "gpus": 1, "nodes": 1, "tier": "on_demand", "name": f"r{n}"},
            "allocation": [],
            "price_micros_per_hour": None,
            "charged_micros": 0,
            "pending_reason": None,
            "created_at": datetime.fromtimestamp(1_790_000_000 - n, UTC).isoformat(),
            "updated_at": datetime(2026, 1, 1, tzinfo=UTC),  # not on the wire: when the fake changed it
        }
        for n in range(count)
    ]


def fake_rentals_server(
    page: Page, platform: Platform, listed: list[dict]
) -> tuple[list[dict[str, str]], list[int]]:
    """Answer the page's GET /v1/rentals from `listed` as the server does: `limit` past `after`, a Link while
    more follow, only those changed at or after `updated_after` when asked, and a `Date`. The queries asked
    and how many rentals each answer held, in order."""
    asked: list[dict[str, str]] = []
    answered: list[int] = []

    def answer(route: Route) -> None:
        query = dict(parse_qsl(urlsplit(route.request.url).query))
        asked.append(query)
        chosen = listed
        if "updated_after" in query:
            since = datetime.fromisoformat(query["updated_after"])
            chosen = [r for r in listed if r["updated_at"] >= since]
        start = (
            next(i + 1 for i, r in enumerate(chosen) if r["id"] == query["after"]) if "after" in query else 0
        )
        end = start + int(query["limit"])
        headers = {"Date": formatdate(usegmt=True)}
        if end < len(chosen):
            url = f"{platform.url}/v1/rentals?limit={query['limit']}&after={chosen[end - 1]['id']}"
            headers["Link"] = f'<{url}>; rel="next"'
        body = [{k: v for k, v in r.items() if k != "updated_at"} for r in chosen[start:end]]
        answered.append(len(body))
        route.fulfill(json=body, headers=headers)

    page.route("**/v1/rentals?*", answer)
    return asked, answered


def test_a_refresh_reads_only_what_changed_and_shows_a_change_on_an_older_page(
    page: Page, platform: Platform
) -> None:
    """With 1,050 rows shown after "Show older", each 2-s refresh read them all again (two requests of 1,000
    and 50 rows): now one request for what changed since the last, which is nothing here, and a rental that
    fails on an older page (the 1,021st) shows its new state within a refresh or two, the rest kept."""
    listed = fake_rentals(1100)
    asked, answered = fake_rentals_server(page, platform, listed)
    sign_in(page, platform)
    rows, more = page.locator("#rentals tbody tr"), page.locator("#rentals-more")
    expect(rows).to_have_count(50)
    for shown in range(100, 1051, 50):
        more.click()
        expect(rows).to_have_count(shown)
    first = len(asked)
    page.wait_for_timeout(4500)  # two refreshes at least
    refreshes = asked[first:]
    assert 2 <= len(refreshes) <= 3, refreshes  # one request a refresh
    assert all("updated_after" in query for query in refreshes), refreshes
    assert answered[first:] == [0] * len(refreshes)  # and nothing to read: nothing changed

    older = listed[1020]
    older.update(state="failed", updated_at=datetime.now(UTC))
    cell = page.locator(f"#rentals tbody tr[data-id='{older['id']}'] td.state")
    expect(cell).to_have_text("failed", timeout=4500)  # within two refreshes
    expect(rows).to_have_count(1050)
    assert max(answered[first:]) == 1  # only it was read again
    expect(page.locator("#rentals-count")).to_have_text("the newest 1050")


def test_show_older_follows_the_cursor_past_the_apis_1000(page: Page, platform: Platform) -> None:
    """The table's "Show older" stopped at the API's 1,000 (no cursor): now it reads a page at a time past
    each Link's cursor, so it goes on to the 1,060th (the list here is the server's, faked)."""
    asked, _ = fake_rentals_server(page, platform, fake_rentals(1060))
    sign_in(page, platform)
    rows, more = page.locator("#rentals tbody tr"), page.locator("#rentals-more")
    expect(rows).to_have_count(50)
    expect(page.locator("#rentals-count")).to_have_text("the newest 50")
    for shown in range(100, 1051, 50):
        more.click()
        expect(rows).to_have_count(shown)
    expect(page.locator("#rentals-count")).to_have_text("the newest 1050")
    assert {"limit": "50", "after": "rnt_fake0999"} in asked  # the second page, past the first's last
    assert all(int(query["limit"]) <= 1000 for query in asked)
    more.click()  # 10 are left: the last page, with no Link
    expect(rows).to_have_count(1060)
    expect(page.locator("#rentals-count")).to_have_text("1060")
    expect(more).to_be_hidden()
    expect(page.locator("#rentals tbody tr[data-id='rnt_fake1059']")).to_have_count(1)


def test_the_months_usage_is_read_a_page_of_lines_at_a_time(page: Page, platform: Platform) -> None:
    """The usage table ("This month") read the whole invoice, every rental line of the month in one answer
    and one table (a tenant with 10,000 rentals: 10,000 rows): now the first 50 lines with the month's totals,
    plan lines and how many lines there are, and "Show more lines" reads 50 more (the invoice here is the
    server's, faked)."""
    month = datetime.now(UTC).strftime("%Y-%m")
    lines = [
        {
            "kind": "rental",
            "ref": f"rnt_fake{n:05d}",
            "description": "1 x L40S",
            "gpu_seconds": 3600.0,
            "rate_micros_per_hour": 1_000_000,
            "discounts": [],
            "amount_micros": 1_000_000,
            "energy_kwh": 0.25,
            "co2_kg": 0.1,
            "energy_source": "tdp_estimate",
            "segments": [],
        }
        for n in range(10_000)
    ]
    plan = {**lines[0], "kind": "plan", "ref": "pln_member", "description": "membership fee"}
    asked: list[dict[str, str]] = []
    sizes: list[int] = []

    def answer(route: Route) -> None:
        """The invoice as GET /v1/invoices/{month} answers it: `limit` lines past `after`, a Link while more
        follow, the month's totals on every page."""
        query = dict(parse_qsl(urlsplit(route.request.url).query))
        asked.append(query)
        start = int(query["after"].removeprefix("rnt_fake")) + 1 if "after" in query else 0
        end = start + int(query.get("limit", "1000"))
        headers = {}
        if end < len(lines):
            after = lines[end - 1]["ref"]
            url = f"{platform.url}/v1/invoices/{month}?limit={query.get('limit', '1000')}&after={after}"
            headers["Link"] = f'<{url}>; rel="next"'
        sizes.append(len(lines[start:end]))
        route.fulfill(
            json={
                "tenant_id": "ten_fake",
                "month": month,
                "lines": lines[start:end],
                "line_count": len(lines),
                "plan_lines": [plan],
                "sla_credit_lines": [],
                "total_micros": 10_001_000_000,
                "total_energy_kwh": 2500.25,
                "total_co2_kg": 1000.1,
                "notes": [],
            },
            headers=headers,
        )

    page.route(f"**/v1/invoices/{month}*", answer)
    sign_in(page, platform)
    rows = page.locator("#usage tbody tr")
    expect(rows).to_have_count(51)  # 50 rental lines and the plan's
    expect(page.locator("#usage-count")).to_have_text("(the first 50 of 10000 rental lines)")
    expect(page.locator("#usage-total")).to_have_text("10001.0000")  # the month's, not the page's
    expect(rows.last).to_contain_text("membership fee")
    assert asked and all(query.get("limit") == "50" for query in asked), asked
    page.get_by_role("button", name="Show more lines").click()
    expect(rows).to_have_count(101)
    expect(page.locator("#usage-count")).to_have_text("(the first 100 of 10000 rental lines)")
    assert max(sizes) <= 100, sizes  # never the month's 10,000 lines in one answer


def test_a_running_rental_is_stopped_from_its_page(page: Page, platform: Platform) -> None:
    sign_in(page, platform)
    page.fill("#rent-gpus", "1")
    page.fill("#rent-command", "echo up; exec sleep 300")
    page.click("#rent-form button[type=submit]")
    expect(page.locator("#detail-log")).to_contain_text("up")
    rental_id = page.locator("#detail-id").inner_text()
    expect(page.locator("#detail-gpus-block")).to_be_hidden()  # declared GPUs: no agent read anything
    # What NVML would report cannot be read here: the server's own answer gets one reading added
    with platform.tenant() as api:
        (gpu,) = api.rental_gpus(rental_id)
        (held,) = api.rental_gpu_history(rental_id)
    read = {
        "utilization_pct": 96,
        "memory_used_mib": 6000,
        "power_w": 600.5,
        "read_at": "2026-12-03T10:00:00Z",
    }
    answer = [{**gpu.model_dump(mode="json"), **read}]
    this_minute = datetime.now(UTC).replace(second=0, microsecond=0)
    minute = {
        "minute": this_minute.isoformat(),
        "utilization_pct": 96.0,
        "memory_used_mib": 6000,
        "power_w": 600.5,
    }
    history = [{**held.model_dump(mode="json"), "minutes": [minute]}]
    page.route(f"**/v1/rentals/{rental_id}/gpus", lambda route: route.fulfill(json=answer))
    page.route(f"**/v1/rentals/{rental_id}/gpus/history?*", lambda route: route.fulfill(json=history))
    expect(page.locator("#detail-gpus tbody tr")).to_have_count(1)
    cells = [f"{gpu.node}", f"{gpu.gpu_index}", "whole", "96", "█", "6,000", "600.5", "2026-12-03 10:00:00"]
    expect(page.locator("#detail-gpus tbody td")).to_have_text(cells)
    expect(page.locator("#detail-stop")).to_be_enabled()
    page.click("#detail-stop")
    with platform.tenant() as api:
        wait_for_state(api, rental_id, "stopped")
    expect(page.locator("#detail-summary")).to_contain_text("stopped")
    expect(page.locator("#detail-stop")).to_be_disabled()


def test_the_console_is_served_with_a_strict_content_security_policy(platform: Platform) -> None:
    response = httpx.get(f"{platform.url}/ui/", timeout=5)
    assert response.status_code == 200 and "suanli console" in response.text
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    terminal = httpx.get(f"{platform.url}/ui/terminal.html", timeout=5)  # xterm.js writes <style> elements
    policy = terminal.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "style-src 'self' 'unsafe-inline';" in policy
    assert httpx.get(f"{platform.url}/", timeout=5).headers["location"] == "/ui/"


def test_the_console_loads_with_no_request_refused_and_names_an_icon_it_serves(
    page: Page, platform: Platform
) -> None:
    """A browser asks for /favicon.ico when a page names no icon: every load logged a 404 in the console."""
    refused: list[str] = []
    page.on("response", lambda response: refused.append(response.url) if response.status >= 400 else None)
    page.goto(f"{platform.url}/ui/")
    expect(page.locator("#login-form")).to_be_visible()
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon is not None and httpx.get(f"{platform.url}/ui/{icon}", timeout=5).status_code == 200
    page.wait_for_timeout(500)
    assert refused == []


def test_an_operator_drains_and_undrains_a_node(page: Page, platform: Platform) -> None:
    page.goto(platform.url)
    page.fill("#key", ADMIN_KEY)
    page.click("#login-form button")
    row = page.locator("#nodes tbody tr[data-node='gpu-02']")
    expect(row).to_contain_text("schedulable")
    row.get_by_role("button", name="drain").click()
    expect(row).to_contain_text("drained")
    with Client(platform.url, ADMIN_KEY) as admin:
        assert not next(n for n in admin.nodes() if n.name == "gpu-02").schedulable
    row.get_by_role("button", name="undrain").click()
    expect(row).to_contain_text("schedulable")
    with Client(platform.url, ADMIN_KEY) as admin:
        assert next(n for n in admin.nodes() if n.name == "gpu-02").schedulable


def test_an_operator_schedules_and_cancels_a_maintenance_window(page: Page, platform: Platform) -> None:
    page.goto(platform.url)
    page.fill("#key", ADMIN_KEY)
    page.click("#login-form button")
    expect(page.locator("#maintenance-node option")).to_have_count(3)  # the fleet's nodes
    page.select_option("#maintenance-node", "gpu-02")
    page.fill("#maintenance-from", "2031-01-05T02:00")
    page.fill("#maintenance-until", "2031-01-05T01:00")
    page.click("#maintenance-form button")
    expect(page.locator("#maintenance-error")).not_to_be_empty()  # ends before it starts: refused
    page.fill("#maintenance-until", "2031-01-05T06:00")
    page.fill("#maintenance-reason", "firmware")
    page.click("#maintenance-form button")
    row = page.locator("#maintenance tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("2031-01-05 02:00")
    with Client(platform.url, ADMIN_KEY) as admin:
        (window,) = admin.maintenance()
    assert (window.node, window.reason) == ("gpu-02", "firmware")
    assert window.starts_at.isoformat() == "2031-01-05T02:00:00+00:00"
    row.get_by_role("button", name="cancel").click()
    expect(row).to_have_count(0)
    with Client(platform.url, ADMIN_KEY) as admin:
        assert admin.maintenance() == []


def test_a_tenant_sees_its_compute_futures(page: Page, platform: Platform) -> None:
    sign_in(page, platform)
    expect(page.locator("#contracts")).to_be_hidden()  # none yet
    expect(page.locator("#contract-form")).to_be_visible()
    with platform.tenant() as api:
        contract = api.create_contract(
            ContractCreateRequest(
                gpu_model="H100-SXM-80GB",
                count=1,
                region="lab",
                starts_at=datetime(2031, 3, 1, tzinfo=UTC),
                ends_at=datetime(2031, 3, 1, 1, tzinfo=UTC),
            )
        )
    page.reload()
    row = page.locator("#contracts tbody tr")
    expect(row).to_have_count(1)
    for text in (contract.id, "1 x H100-SXM-80GB", "2031-03-01 00:00", "2031-03-01 01:00", "to come"):
        expect(row).to_contain_text(text)


def test_a_tenant_quotes_a_contract_then_signs_what_was_quoted(page: Page, platform: Platform) -> None:
    """The quote shows the GPU-hours and the prepaid price the API gives; Sign is only possible for an
    unchanged quoted form, signs once, and charges the quoted price; an overbooking is refused, naming the
    field, before anything can be signed."""
    window = {"gpu_model": "H100-SXM-80GB", "count": 2, "region": "lab"}
    starts_at, ends_at = datetime(2031, 4, 1, tzinfo=UTC), datetime(2031, 4, 1, 3, tzinfo=UTC)
    with platform.tenant() as api:
        quote = api.quote_contract(ContractCreateRequest(**window, starts_at=starts_at, ends_at=ends_at))
        cash_before = api.balance().cash_micros
        contracts_before = len(api.contracts())
    assert quote.payable and quote.price_micros == quote.price_micros_per_gpu_hour * 2 * 3 > 0
    sign_in(page, platform)
    page.fill("#contract-model", "H100-SXM-80GB")
    page.fill("#contract-count", "2")
    page.fill("#contract-region", "lab")
    page.fill("#contract-from", "2031-04-01T00:00")
    page.fill("#contract-until", "2031-04-01T03:00")
    expect(page.locator("#contract-sign")).to_be_disabled()
    page.click("#contract-quote")
    unit, total = quote.price_micros_per_gpu_hour / 1e6, quote.price_micros / 1e6
    expect(page.locator("#contract-quote-text")).to_have_text(
        f"2 x H100-SXM-80GB in lab, 2031-04-01 00:00 to 2031-04-01 03:00 UTC: 6 GPU-h at {unit:.4f} / GPU-h"
        f" = {total:.4f}, prepaid when you sign."
    )
    expect(page.locator("#contract-sign")).to_be_enabled()
    page.fill("#contract-count", "3")  # changed after the quote: no longer what was quoted
    expect(page.locator("#contract-sign")).to_be_disabled()
    page.fill("#contract-count", "2")
    page.click("#contract-quote")
    page.click("#contract-sign")
    expect(page.locator("#contract-quote-text")).to_contain_text(f"{total:.4f} prepaid")
    expect(page.locator("#contract-sign")).to_be_disabled()  # one click signs once
    row = page.locator("#contracts tbody tr", has_text="2031-04-01 00:00")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(f"{total:.4f}")
    with platform.tenant() as api:
        signed = [c for c in api.contracts() if c.starts_at == starts_at]
        assert [(c.count, c.ends_at, c.price_micros) for c in signed] == [(2, ends_at, quote.price_micros)]
        assert api.balance().cash_micros == cash_before - quote.price_micros

    page.fill("#contract-until", "2031-07-01T00:00")  # 2 GPUs for three months: more than its cash
    page.click("#contract-quote")
    expect(page.locator("#contract-quote-text")).to_contain_text("more than you can pay now: top up first")
    expect(page.locator("#contract-sign")).to_be_disabled()
    page.fill("#contract-count", "1000")
    page.click("#contract-quote")
    expect(page.locator("#contract-error")).to_contain_text("count:")
    expect(page.locator("#contract-sign")).to_be_disabled()
    with platform.tenant() as api:
        assert len(api.contracts()) == contracts_before + 1  # the one signed above, no more


def test_an_operator_sees_providers_payables_and_a_tenant_does_not(page: Page, platform: Platform) -> None:
    """A charged rental owes its provider: an admin sees each provider's payable and how many rentals built
    it, as the API gives them; a tenant key has no payouts section."""
    with platform.tenant() as api:
        rental = api.create_rental(RentalCreateRequest(gpus=1, command=["sleep", "1"]))
        wait_for_state(api, rental.id, "stopped")
    sign_in(page, platform)
    expect(page.locator("#payouts-section")).to_be_hidden()
    page.click("#sign-out")
    page.fill("#key", ADMIN_KEY)
    page.click("#login-form button")
    expect(page.locator("#payouts-section")).to_be_visible()
    with Client(platform.url, ADMIN_KEY) as admin:
        payouts = [p for p in admin.payouts() if p.lines]
    assert any(line.ref == rental.id for p in payouts for line in p.lines)
    expect(page.locator("#payouts tbody tr")).to_have_count(len(payouts))
    for payout in payouts:
        row = page.locator(f"#payouts tbody tr[data-provider='{payout.provider}']")
        expect(row).to_contain_text(str(len(payout.lines)))
        shown = float(row.locator("td").nth(2).inner_text())
        assert shown > 0 and shown <= payout.payable_micros / 1e6 + 1e-4  # the meter may have charged since


def test_a_tenant_reads_the_list_prices_in_force_and_those_to_come(page: Page, platform: Platform) -> None:
    """One row per model and region, as the API's price book has them; an entry an admin adds for a later
    date shows with it, beside the price in force."""
    with Client(platform.url, ADMIN_KEY) as admin:
        admin.set_prices(
            [
                PriceEntryRequest(
                    gpu_model="H100-SXM-80GB",
                    region="lab",
                    tier="on_demand",
                    price_micros_per_gpu_hour=3_500_000,
                    effective_from=datetime(2031, 1, 1, tzinfo=UTC),
                )
            ]
        )
        book = admin.prices()
    listed = {(p.gpu_model, p.mig_profile, p.region) for p in book}
    sign_in(page, platform)
    page.click("#prices-section summary")
    expect(page.locator("#prices tbody tr")).to_have_count(len(listed))
    everywhere = page.locator("#prices tbody tr[data-model='H100-SXM-80GB'][data-region='*']")
    for tier, column in (("on_demand", 2), ("reserved", 3), ("spot", 4)):
        (entry,) = [p for p in book if (p.gpu_model, p.region, p.tier) == ("H100-SXM-80GB", "*", tier)]
        shown = f"{entry.price_micros_per_gpu_hour / 1e6:.4f}"
        expect(everywhere.locator("td").nth(column)).to_have_text(shown)
    lab = page.locator("#prices tbody tr[data-model='H100-SXM-80GB'][data-region='lab']")
    expect(lab.locator("td").nth(1)).to_have_text("lab")
    expect(lab.locator("td").nth(2)).to_have_text("3.5000 from 2031-01-01 00:00")


def test_a_tenant_sees_its_plans(page: Page, platform: Platform) -> None:
    """A revenue-share plan an admin puts the tenant on shows with its terms and that it is in force, and the
    offers say their prices include its discount. (The plan's discount changes the tenant's prices.)"""
    sign_in(page, platform)
    expect(page.locator("#plans-section")).to_be_hidden()  # none yet
    with platform.tenant() as api:
        tenant_id = api.me().tenant.id
    with Client(platform.url, ADMIN_KEY) as admin:
        plan = admin.create_plan(
            tenant_id, PlanRequest(kind="revenue_share", discount_bp=1500, revenue_share_bp=500)
        )
    page.reload()
    row = page.locator("#plans tbody tr")
    expect(row).to_have_count(1)
    terms = "15.00% off on-demand and reserved; 5.00% of reported revenue"
    for text in (plan.id, "revenue share", terms, plan.starts_at.strftime("%Y-%m-%d %H:%M"), "in force"):
        expect(row).to_contain_text(text)
    # the offers are the tenant's prices now: the plan's discount is taken off on-demand, and said so
    note = "Prices include your plan's discount: 15.00% off on_demand."
    expect(page.locator("#offers-discount")).to_have_text(note)


def test_an_operator_puts_a_tenant_on_a_plan(page: Page, platform: Platform) -> None:
    """An admin picks a tenant, gives a membership's terms and sees the plan made; the fee is posted from the
    tenant's cash. A bad percentage is refused in the page, naming the field, and makes nothing."""
    with Client(platform.url, ADMIN_KEY) as admin:
        member = admin.create_tenant("studio", "tenant")
        admin.credit(member.id, 20_000_000, memo="membership fee")
    page.goto(platform.url)
    page.fill("#key", ADMIN_KEY)
    page.click("#login-form button")
    expect(page.locator("#tenants-section")).to_be_visible()
    expect(page.locator(f"#tenants tbody tr[data-tenant='{member.id}']")).to_contain_text("studio")
    page.select_option("#plan-tenant", member.id)
    page.fill("#plan-discount", "150")
    page.click("#plan-form button")
    expect(page.locator("#plan-error")).to_have_text("discount %: give a percentage from 0 to 100")
    page.fill("#plan-discount", "12.5")
    page.fill("#plan-fee", "5")
    page.click("#plan-form button")
    expect(page.locator("#plan-made")).to_contain_text(f"for {member.id}: 12.50% off on-demand; fee 5.0000")
    with Client(platform.url, ADMIN_KEY) as admin:
        (plan,) = admin.plans(member.id)
        assert (plan.kind, plan.discount_bp, plan.fee_micros) == ("membership", 1250, 5_000_000)
        assert admin.balance(member.id).cash_micros == 15_000_000
    expect(page.locator("#plan-made")).to_contain_text(plan.id)


def test_an_operator_adds_a_later_price_and_a_tenant_cannot(page: Page, platform: Platform) -> None:
    sign_in(page, platform)
    page.click("#prices-section summary")
    expect(page.locator("#price-form")).to_be_hidden()  # a tenant reads the book only
    page.click("#sign-out")
    page.fill("#key", ADMIN_KEY)
    page.click("#login-form button")
    page.click("#prices-section summary")
    page.fill("#price-model", "H100-SXM-80GB")
    page.fill("#price-region", "lab")
    page.select_option("#price-tier", "reserved")
    page.fill("#price-amount", "-1")
    page.click("#price-form button")
    expect(page.locator("#price-form-error")).to_have_text(
        "price / GPU-h: give an amount of 0 or more, e.g. 12.5 (at most 6 decimals)"
    )
    page.fill("#price-amount", "2.45")
    page.fill("#price-from", "2031-02-01T00:00")
    page.fill("#price-source", "console test")
    page.click("#price-form button")
    lab = page.locator("#prices tbody tr[data-model='H100-SXM-80GB'][data-region='lab']")
    expect(lab.locator("td").nth(3)).to_have_text("2.4500 from 2031-02-01 00:00")
    with Client(platform.url, ADMIN_KEY) as admin:
        added = [p for p in admin.prices() if p.source == "console test"]
    assert [(p.region, p.tier, p.price_micros_per_gpu_hour) for p in added] == [
        ("lab", "reserved", 2_450_000)
    ]
    assert added[0].effective_from_s == int(datetime(2031, 2, 1, tzinfo=UTC).timestamp())
    page.fill("#price-model", "Z99")
    page.fill("#price-from", "")
    page.click("#price-form button")
    expect(page.locator("#price-form-error")).to_contain_text("model: entry 0: unknown GPU model 'Z99'")


def test_a_refused_price_stays_shown_until_the_operator_changes_the_form(
    page: Page, platform: Platform
) -> None:
    """The price list is read again every 10 s; that refresh used to wipe the form's refusal with it."""
    page.goto(platform.url)
    page.fill("#key", ADMIN_KEY)
    page.click("#login-form button")
    page.click("#prices-section summary")
    page.fill("#price-model", "NOPE")
    page.fill("#price-amount", "1")
    page.click("#price-form button")
    refusal = page.locator("#price-form-error")
    expect(refusal).to_contain_text("unknown GPU model 'NOPE'")
    page.wait_for_timeout(11_000)  # past the next slow refresh, which reads the price list again
    expect(refusal).to_contain_text("unknown GPU model 'NOPE'")
    page.fill("#price-model", "H100-SXM-80GB")
    expect(refusal).to_have_text("")


def test_an_operator_transfers_a_contract_and_the_buyer_pays_its_value(
    page: Page, platform: Platform
) -> None:
    window = ContractCreateRequest(
        gpu_model="H100-SXM-80GB",
        count=1,
        region="lab",
        starts_at=datetime(2031, 6, 1, tzinfo=UTC),
        ends_at=datetime(2031, 6, 1, 2, tzinfo=UTC),
    )
    with platform.tenant() as api:
        contract = api.create_contract(window)
        seller_cash = api.balance().cash_micros
    with Client(platform.url, ADMIN_KEY) as admin:
        buyer = admin.create_tenant("buyer", "tenant")
        admin.credit(buyer.id, 50_000_000, memo="buys a contract")
    page.goto(platform.url)
    page.fill("#key", ADMIN_KEY)
    page.click("#login-form button")
    row = page.locator(f"#contracts tbody tr[data-contract='{contract.id}']")
    expect(row).to_contain_text(contract.tenant_id)
    page.select_option("#transfer-contract", contract.id)
    page.select_option("#transfer-tenant", buyer.id)
    page.click("#transfer-form button")
    expect(page.locator("#transfer-done")).to_have_text(f"{contract.id} is now held by {buyer.id}.")
    expect(row).to_contain_text(buyer.id)
    with Client(platform.url, ADMIN_KEY) as admin:
        assert admin.balance(buyer.id).cash_micros == 50_000_000 - contract.price_micros  # nothing earned yet
    with platform.tenant() as api:
        assert api.balance().cash_micros == seller_cash + contract.price_micros
        assert contract.id not in {c.id for c in api.contracts()}
    page.click("#transfer-form button")  # the same contract to the same buyer again: refused, named
    expect(page.locator("#transfer-error")).to_contain_text("to_tenant_id")


def test_an_operator_offers_a_contract_and_the_tenant_accepts_one_and_declines_another(
    page: Page, platform: Platform
) -> None:
    """An admin offers the tenant a contract at a negotiated price from the console; the tenant sees it with
    Accept and Decline, accepts (signed at that price, paid from its cash), and declines a second offer."""
    with platform.tenant() as api:
        tenant_id = api.me().tenant.id
        cash_before = api.balance().cash_micros
    page.goto(platform.url)
    page.fill("#key", ADMIN_KEY)
    page.click("#login-form button")
    page.select_option("#offer-tenant", tenant_id)
    page.fill("#offer-model", "H100-SXM-80GB")
    page.fill("#offer-count", "2")
    page.fill("#offer-region", "lab")
    page.fill("#offer-from", "2031-08-01T00:00")
    page.fill("#offer-until", "2031-08-02T00:00")
    page.fill("#offer-price", "12.5")
    page.click("#offer-form button")
    made = page.locator("#contract-offers tbody tr", has_text="2031-08-01 00:00")
    expect(made).to_contain_text("12.5000")
    expect(made).to_contain_text("open")
    offer_id = made.get_attribute("data-offer")
    with Client(platform.url, ADMIN_KEY) as admin:
        second = admin.offer_contract(
            ContractOfferRequest(
                tenant_id=tenant_id,
                gpu_model="H100-SXM-80GB",
                count=1,
                region="lab",
                starts_at=datetime(2031, 9, 1, tzinfo=UTC),
                ends_at=datetime(2031, 9, 2, tzinfo=UTC),
                price_micros=3_000_000,
            )
        )

    page.click("#sign-out")
    sign_in(page, platform)
    row = page.locator(f"#contract-offers tbody tr[data-offer='{offer_id}']")
    row.get_by_role("button", name="accept").click()
    expect(page.locator("#offer-done")).to_contain_text("12.5000 prepaid")
    expect(row).to_contain_text("accepted: ctr_")
    expect(page.locator("#contracts tbody tr", has_text="2031-08-01 00:00")).to_contain_text("12.5000")
    page.locator(f"#contract-offers tbody tr[data-offer='{second.id}']").get_by_role(
        "button", name="decline"
    ).click()
    expect(page.locator(f"#contract-offers tbody tr[data-offer='{second.id}']")).to_contain_text("declined")
    with platform.tenant() as api:
        assert api.balance().cash_micros == cash_before - 12_500_000
        states = {o.id: o.state for o in api.contract_offers()}
    assert states == {offer_id: "accepted", second.id: "declined"}


def test_an_operator_sees_each_mig_gpu_laid_out_as_its_host_has_it(
    page: Page, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The fleet declares 4g@0, 2g@4, 1g@6; the host was carved by hand into 3g@0 and 1g@4: once the agent
    has said so, the nodes table shows the host's instances, and a rented one as busy."""
    tmp = tmp_path_factory.mktemp("mig-console")
    (tmp / "host.toml").write_text(HAND_CARVED)
    agent_args = ["--declared", str(tmp / "host.toml")]
    with running_platform(tmp, MIG_FLEET, ["mig-01"], agent_args=agent_args) as platform:
        page.goto(platform.url)
        page.fill("#key", ADMIN_KEY)
        page.click("#login-form button")
        row = page.locator("#nodes tbody tr[data-node='mig-01']")
        expect(row).to_contain_text("1 x A100-80GB (mig)")
        expect(row.locator("ul.mig li")).to_have_text(["GPU 0: 3g.40gb@0, 1g.10gb@4, as the host has it"])
        with platform.tenant() as api:
            spec = RentalCreateRequest(gpu_model="A100-80GB", mig_profile="3g.40gb", command=["sleep", "30"])
            rental = api.create_rental(spec)
            wait_for_state(api, rental.id, "running")
            page.reload()  # the nodes are read every few ticks; a reload (signed in still) reads them now
            expect(row.locator("ul.mig li")).to_have_text(
                ["GPU 0: 3g.40gb@0 (busy), 1g.10gb@4, as the host has it"]
            )
            api.stop(rental.id)


def _the_one_offer(page: Page, query: str):
    """Search the offers for `query` and return its one row."""
    page.fill("#offers-query", query)
    page.click("#offers-form button")
    offer = page.locator("#offers tbody tr")
    expect(offer).to_have_count(1)
    return offer


def test_a_tenant_finds_a_mig_slice_in_the_offers_and_rents_it_from_there(
    page: Page, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The A100 is carved 4g@0, 2g@4, 1g@6, all idle: the offers list two 3g.40gb at 3/7 of the GPU-hour
    price; "Use" fills in the model and profile, the rental runs on a MIG instance, and the offers then
    list one 3g.40gb left."""
    with running_platform(tmp_path_factory.mktemp("mig-offers"), MIG_FLEET, ["mig-01"]) as platform:
        sign_in(page, platform)
        offer = _the_one_offer(page, "profile=3g.40gb tier=on_demand")
        expect(offer.locator("td")).to_have_text(
            ["A100-80GB", "3g.40gb", "lab (EU)", "on_demand", "2", "2", "1", "0.7671", "Use"]
        )
        offer.get_by_role("button", name="Use").click()
        expect(page.locator("#rent-profile")).to_have_value("3g.40gb")
        expect(page.locator("#rent-model")).to_have_value("A100-80GB")
        page.fill("#rent-command", "echo visible=$CUDA_VISIBLE_DEVICES; exec sleep 300")
        page.click("#rent-form button[type=submit]")
        expect(page.locator("#detail-log")).to_contain_text("visible=MIG-")
        rental_id = page.locator("#detail-id").inner_text()
        with platform.tenant() as api:
            assert api.rental(rental_id).request.mig_profile == "3g.40gb"
            page.click("#offers-form button")
            expect(offer.locator("td").nth(4)).to_have_text("1")
            api.stop(rental_id)


SHARED_FLEET = MIG_FLEET.replace(
    'gpus = { model = "A100-80GB", count = 1, mode = "mig", mig_layout = ["4g.40gb", "2g.20gb", "1g.10gb"] }',
    'gpus = { model = "L40S", count = 1, mode = "shared" }',
)


def test_a_tenant_rents_a_share_from_the_offers_and_the_room_left_shows(
    page: Page, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """One L40S in shared mode: the share row offers up to 0.99 of it; "Use" fills in that share, the
    tenant asks for half with 16 GiB, the rental runs, and the row then offers at most 0.50 and 32 GiB."""
    assert SHARED_FLEET != MIG_FLEET
    with running_platform(tmp_path_factory.mktemp("shares"), SHARED_FLEET, ["mig-01"]) as platform:
        sign_in(page, platform)
        offer = _the_one_offer(page, "profile=share tier=on_demand")
        expect(offer.locator("td").nth(1)).to_have_text("share ≤ 0.99 · 48 GiB")  # a whole GPU is a count
        offer.get_by_role("button", name="Use").click()
        expect(page.locator("#rent-share")).to_have_value("0.99")
        page.click("#rent-check")  # what "Use" filled in is a share the page and the API take
        expect(page.locator("#rent-trial")).to_contain_text("Would start now on mig-01")
        expect(page.locator("#rent-error")).to_have_text("")
        page.fill("#rent-share", "0.5")
        page.fill("#rent-share-memory", "16")
        page.fill("#rent-command", "echo up; exec sleep 300")
        page.click("#rent-form button[type=submit]")
        expect(page.locator("#detail-log")).to_contain_text("up")
        rental_id = page.locator("#detail-id").inner_text()
        with platform.tenant() as api:
            request = api.rental(rental_id).request
            assert (request.share_milli, request.share_memory_mib) == (500, 16 * 1024)
            page.click("#offers-form button")
            expect(offer.locator("td").nth(1)).to_have_text("share ≤ 0.50 · 32 GiB")
            api.stop(rental_id)
