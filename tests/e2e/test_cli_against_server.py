"""End to end: the real `suanli server` process on SQLite, driven by the real `suanli` CLI."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
SUANLI = [sys.executable, "-m", "suanli.cli.main"]
ADMIN_KEY = "sk_e2e_admin_key_0123456789"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def server(tmp_path: Path):
    port = _free_port()
    env = {
        **os.environ,
        "SUANLI_DATABASE_URL": f"sqlite:///{tmp_path / 'suanli.db'}",
        "SUANLI_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        "SUANLI_SCHEDULER_INTERVAL_S": "0.5",
    }
    process = subprocess.Popen(
        [*SUANLI, "server", "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    else:
        process.kill()
        pytest.fail(f"server did not start: {process.communicate()[0].decode()[-2000:]}")
    yield url
    process.terminate()
    process.wait(timeout=10)


def _cli(config: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SUANLI_CONFIG_DIR": str(config), "COLUMNS": "200"}
    result = subprocess.run([*SUANLI, *args], env=env, capture_output=True, text=True, timeout=60)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def _admin_and_tenant(server: str, tmp_path: Path, name: str, *, fleet: bool) -> tuple[Path, Path]:
    """CLI configs logged in as the admin (who loaded the example fleet, if `fleet`) and as a new tenant."""
    admin, tenant = tmp_path / "admin", tmp_path / "tenant"
    _cli(admin, "login", server, "--key", ADMIN_KEY)
    if fleet:
        _cli(admin, "admin", "fleet-put", str(REPO / "examples" / "fleet.toml"))
    key = json.loads(_cli(admin, "admin", "tenant-create", name, "--json").stdout)["secret"]
    _cli(tenant, "login", server, "--key", key)
    return admin, tenant


def _placed(config: Path, rental_id: str) -> dict:
    """The rental once the scheduling loop has placed it (it runs on submit and every half second here)."""
    deadline = time.monotonic() + 15
    while True:
        rental = json.loads(_cli(config, "show", rental_id, "--json").stdout)
        if rental["state"] != "pending" or time.monotonic() > deadline:
            return rental
        time.sleep(0.3)


def test_a_new_tenant_rents_lists_shows_and_stops(server: str, tmp_path: Path) -> None:
    admin, tenant = tmp_path / "admin", tmp_path / "tenant"
    _cli(admin, "login", server, "--key", ADMIN_KEY)
    assert (
        "20 nodes, 136 GPUs"
        in _cli(admin, "admin", "fleet-put", str(REPO / "examples" / "fleet.toml")).stdout
    )
    key = json.loads(_cli(admin, "admin", "tenant-create", "acme", "--json").stdout)["secret"]

    _cli(tenant, "login", server, "--key", key)
    offers = json.loads(_cli(tenant, "offers", "gpu=H100 count>=8", "--json").stdout)
    assert offers and all(o["gpu_model"] == "H100-SXM-80GB" and o["free_gpus"] >= 8 for o in offers)
    apart = _cli(tenant, "offers", "gpu=H100", "count>=8", "--json").stdout  # terms as separate arguments
    assert json.loads(apart) == offers

    gang = json.loads(
        _cli(
            tenant, "rent", "H100:8", "--nodes", "2", "--region", "cn-north", "--json", "--", "python", "t.py"
        ).stdout
    )
    gang = _placed(tenant, gang["id"])
    assert gang["state"] == "placed"
    assert len(gang["allocation"]) == 2 and all(len(a["slices"]) == 8 for a in gang["allocation"])
    mig = _placed(tenant, json.loads(_cli(tenant, "rent", "A100-80GB:3g.40gb", "--json").stdout)["id"])
    assert mig["allocation"][0]["slices"][0]["mig_profile"] == "3g.40gb"
    carved = mig["allocation"][0]["node"]
    gpu, start = (mig["allocation"][0]["slices"][0][k] for k in ("gpu_index", "mig_start"))
    layout = _cli(admin, "admin", "mig", carved).stdout  # no agent here: laid out as the fleet declares
    assert f"3g.40gb@{start} (busy)" in layout and "fleet" in layout and "host" not in layout
    (node,) = json.loads(_cli(admin, "admin", "mig", carved, "--json").stdout)
    assert {"gpu_index": gpu, "start_slot": start, "profile": "3g.40gb", "busy": True} in node[
        "mig_instances"
    ]
    whole = _cli(admin, "admin", "mig", "h100-a-01", check=False)
    assert whole.returncode == 2 and "node: h100-a-01 is not a MIG node" in whole.stderr

    listed = json.loads(_cli(tenant, "ls", "--json").stdout)
    assert {r["id"] for r in listed} == {gang["id"], mig["id"]}
    assert "timeline" in _cli(tenant, "show", gang["id"]).stdout
    restarting = json.loads(
        _cli(tenant, "rent", "L40S:0.25", "--restart", "on-failure", "--max-restarts", "2", "--json").stdout
    )
    assert (restarting["request"]["restart"], restarting["request"]["max_restarts"]) == ("on-failure", 2)
    with_memory = json.loads(_cli(tenant, "rent", "L40S:0.5", "--share-memory", "16384", "--json").stdout)
    (piece,) = _placed(tenant, with_memory["id"])["allocation"][0]["slices"]
    assert (piece["milli"], piece["memory_mib"]) == (500, 16384)
    grown = json.loads(_cli(tenant, "resize", gang["id"], "--nodes", "3", "--json").stdout)
    assert grown["state"] == "placed" and grown["request"]["nodes"] == 3  # not re-queued: it grows in place
    wait_until_nodes = time.monotonic() + 15
    while len(grown["allocation"]) < 3 and time.monotonic() < wait_until_nodes:
        time.sleep(0.3)
        grown = json.loads(_cli(tenant, "show", gang["id"], "--json").stdout)
    assert len(grown["allocation"]) == 3 and "grown" in _cli(tenant, "show", gang["id"]).stdout
    fewer = json.loads(_cli(tenant, "resize", gang["id"], "--gpus", "4", "--json").stdout)
    assert fewer["state"] == "placed" and fewer["request"]["gpus"] == 4  # on the same 3 nodes
    while (
        any(len(a["slices"]) != 4 for a in fewer["allocation"]) and time.monotonic() < wait_until_nodes + 15
    ):
        time.sleep(0.3)
        fewer = json.loads(_cli(tenant, "show", gang["id"], "--json").stdout)
    assert [a["node"] for a in fewer["allocation"]] == [a["node"] for a in grown["allocation"]]
    assert [len(a["slices"]) for a in fewer["allocation"]] == [4, 4, 4]
    zero = _cli(tenant, "resize", gang["id"], "--gpus", "0", check=False)
    assert zero.returncode == 2 and "--gpus" in zero.stderr + zero.stdout  # a usage error: 1 or more
    assert _cli(tenant, "resize", gang["id"], check=False).returncode != 0  # neither --nodes nor --gpus
    assert json.loads(_cli(tenant, "stop", gang["id"], "--json").stdout)["state"] == "stopped"
    several = _cli(tenant, "stop", restarting["id"], "rnt_nope", with_memory["id"], "--json", check=False)
    assert several.returncode == 1 and "rnt_nope: no rental rnt_nope [404 not_found]" in several.stderr
    assert {r["id"]: r["state"] for r in json.loads(several.stdout)} == {
        restarting["id"]: "stopped",
        with_memory["id"]: "stopped",
    }


def test_a_tenant_rents_with_a_container_image_and_sees_it_in_ls_and_show(
    server: str, tmp_path: Path
) -> None:
    _, tenant = _admin_and_tenant(server, tmp_path, "acme", fleet=True)
    rented = json.loads(_cli(tenant, "rent", "H100:2", "--image", "pytorch", "--json").stdout)
    assert (rented["request"]["image"], rented["request"]["command"]) == ("pytorch", [])
    listed = _cli(tenant, "ls").stdout
    assert "image" in listed and "pytorch" in listed
    assert "image pytorch" in _cli(tenant, "show", rented["id"]).stdout
    unknown = _cli(tenant, "rent", "H100:1", "--image", "pytorch:0.0.1", check=False)
    assert unknown.returncode == 1, unknown.stdout + unknown.stderr
    assert "no pytorch 0.0.1; its versions: 2.5.1, 2.4.1" in " ".join(unknown.stderr.split())
    garbage = _cli(tenant, "rent", "H100:1", "--image", "PyTorch", check=False)
    assert garbage.returncode == 2 and "--image" in garbage.stderr


def test_exit_codes_scripts_can_trust(server: str, tmp_path: Path) -> None:
    config = tmp_path / "cfg"
    assert _cli(config, "ls", check=False).returncode == 3  # not logged in
    _cli(config, "login", server, "--key", ADMIN_KEY)
    missing = _cli(config, "show", "rnt_does_not_exist", check=False)
    assert missing.returncode == 1 and "404" in missing.stderr
    bad_query = _cli(config, "offers", "gpu=H100 count>>8", check=False)
    assert bad_query.returncode == 1 and "count" in bad_query.stderr
    assert _cli(config, "rent", "H100:lots", check=False).returncode == 2
    refused = _cli(config, "rent", "H100:1", "--bid", "2", check=False)  # the server refuses: named by option
    assert refused.returncode == 1, refused.stderr
    assert "error: --bid: a bid is for the spot tier only [400 invalid]" in refused.stderr
    unreachable = tmp_path / "gone"
    (unreachable / "profile.json").parent.mkdir()
    (unreachable / "profile.json").write_text(
        json.dumps({"url": f"http://127.0.0.1:{_free_port()}", "key": "x"})
    )
    assert _cli(unreachable, "ls", check=False).returncode == 4


def test_a_tenant_makes_a_key_for_a_script_and_revokes_it(server: str, tmp_path: Path) -> None:
    admin, tenant, script = tmp_path / "admin", tmp_path / "tenant", tmp_path / "script"
    _cli(admin, "login", server, "--key", ADMIN_KEY)
    first = json.loads(_cli(admin, "admin", "tenant-create", "keyed", "--json").stdout)["secret"]
    _cli(tenant, "login", server, "--key", first)
    made = json.loads(_cli(tenant, "keys", "create", "--label", "ci", "--json").stdout)
    assert made["secret"].startswith("sk_") and made["label"] == "ci"
    _cli(script, "login", server, "--key", made["secret"])  # the new key works
    listed = json.loads(_cli(tenant, "keys", "ls", "--json").stdout)
    assert {k["label"] for k in listed} >= {"ci"} and all(k["secret"] is None for k in listed)
    table = _cli(tenant, "keys", "ls").stdout  # the first key, which this CLI is logged in with, is marked
    assert "(this one)" in table and "ci" in table
    mine = next(k["id"] for k in listed if k["label"] != "ci")
    refused = _cli(tenant, "keys", "revoke", mine, check=False)
    assert refused.returncode == 2 and "the key this CLI is logged in with" in refused.stderr
    assert _cli(tenant, "keys", "revoke", made["id"]).stdout.strip() == f"revoked {made['id']}"
    gone = _cli(script, "ls", check=False)  # the script's key stopped working at once
    assert gone.returncode == 1 and "401" in gone.stderr, gone.stderr
    revoked = {k["id"]: k["revoked"] for k in json.loads(_cli(tenant, "keys", "ls", "--json").stdout)}
    assert revoked == {mine: False, made["id"]: True}


def test_a_webhook_into_the_servers_own_network_is_added_refused_at_delivery_and_removed(
    server: str, tmp_path: Path
) -> None:
    """The server here runs with its default, webhooks to loopback refused: `webhooks ls` says why the
    deliveries fail (an SSRF guard); `rm` removes it."""
    _, tenant = _admin_and_tenant(server, tmp_path, "hooked", fleet=False)
    added = _cli(tenant, "webhooks", "add", "http://127.0.0.1:9/hook").stdout
    assert "signing secret (shown once): whsec_" in added
    hook_id = added.split()[1]
    bad = _cli(tenant, "webhooks", "add", "ftp://example.com/x", check=False)
    assert bad.returncode == 1 and "URL: not an http(s) URL" in bad.stderr, bad.stderr
    typo = _cli(tenant, "webhooks", "add", "https://example.com/x", "--event", "stoped", check=False)
    assert typo.returncode == 1 and "--event: unknown event kind 'stoped'" in typo.stderr, typo.stderr
    kinds = ("--event", "failed", "--event", "stopped")
    picky = _cli(tenant, "webhooks", "add", "https://example.com/x", *kinds)
    assert "-> https://example.com/x (stopped, failed); signing secret" in picky.stdout, picky.stdout
    listed = _cli(tenant, "webhooks", "ls").stdout
    assert "stopped, failed" in listed and "all" in listed
    picky_id = picky.stdout.split()[1]
    changed = _cli(tenant, "webhooks", "set", picky_id, "--event", "preempting")
    assert changed.stdout.strip() == f"webhook {picky_id} -> https://example.com/x (preempting)"
    every = _cli(tenant, "webhooks", "set", picky_id, "--all-events", "--url", "https://example.com/y")
    assert every.stdout.strip() == f"webhook {picky_id} -> https://example.com/y (all events)"
    both = _cli(tenant, "webhooks", "set", picky_id, "--all-events", "--event", "lost", check=False)
    assert both.returncode == 2 and "--event and --all-events" in both.stderr
    _cli(tenant, "webhooks", "rm", picky_id)
    _cli(tenant, "rent", "L40S:1", "--", "true")  # an event to send
    deadline = time.monotonic() + 20
    while True:
        (hook,) = json.loads(_cli(tenant, "webhooks", "ls", "--json").stdout)
        if hook["failures"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert hook["failures"] >= 1 and hook["last_error"].startswith("refused: 127.0.0.1 is a non-public"), hook
    assert hook["secret"] is None and hook["retry_at"] is not None
    assert _cli(tenant, "webhooks", "rm", hook_id).stdout.strip() == f"removed {hook_id}"
    assert json.loads(_cli(tenant, "webhooks", "ls", "--json").stdout) == []


def test_commands_that_print_a_result_print_it_as_json_too(server: str, tmp_path: Path) -> None:
    """README: commands that print a result take --json; `ledger verify`, `admin undrain`, `maintenance rm`,
    `webhooks rm`, `keys revoke` and `admin key-revoke` refused it ("No such option")."""
    admin, tenant = _admin_and_tenant(server, tmp_path, "js", fleet=True)
    verified = json.loads(_cli(admin, "ledger", "verify", "--json").stdout)
    assert verified["verified"] and verified["problems"] == [] and verified["server"]["ok"], verified
    assert verified["transactions"] == verified["server"]["transactions"]
    _cli(admin, "admin", "drain", "h100-a-01")
    undrained = json.loads(_cli(admin, "admin", "undrain", "h100-a-01", "--json").stdout)
    assert undrained["name"] == "h100-a-01" and undrained["schedulable"], undrained
    window = json.loads(
        _cli(
            admin, "admin", "maintenance", "add", "h100-a-02", "--from", "+2d", "--until", "+2d4h", "--json"
        ).stdout
    )
    cancelled = json.loads(_cli(admin, "admin", "maintenance", "rm", window["id"], "--json").stdout)
    assert cancelled["id"] == window["id"] and cancelled["node"] == "h100-a-02", cancelled
    hook_id = _cli(tenant, "webhooks", "add", "https://example.com/hook").stdout.split()[1]
    removed = json.loads(_cli(tenant, "webhooks", "rm", hook_id, "--json").stdout)
    assert removed["id"] == hook_id and removed["url"] == "https://example.com/hook", removed
    spare = json.loads(_cli(tenant, "keys", "create", "--label", "spare", "--json").stdout)
    revoked = json.loads(_cli(tenant, "keys", "revoke", spare["id"], "--json").stdout)
    assert revoked["id"] == spare["id"] and revoked["revoked"] and revoked["secret"] is None, revoked
    other = json.loads(_cli(admin, "admin", "key-create", spare["tenant_id"], "--json").stdout)
    by_admin = json.loads(
        _cli(admin, "admin", "key-revoke", spare["tenant_id"], other["id"], "--json").stdout
    )
    assert by_admin["id"] == other["id"] and by_admin["revoked"], by_admin


def test_a_join_token_says_it_is_single_use_and_when_it_expires(server: str, tmp_path: Path) -> None:
    """An operator who made tokens for a batch of hosts learnt of the hour's limit only from the agent's
    refusal: the table output did not show the expiry (only --json had expires_at)."""
    admin = tmp_path / "admin"
    _cli(admin, "login", server, "--key", ADMIN_KEY)
    _cli(admin, "admin", "fleet-put", str(REPO / "examples" / "fleet.toml"))
    said = _cli(admin, "admin", "join-token", "h100-a-01").stdout.strip()
    shown = re.fullmatch(r"join token for h100-a-01 \(single use, expires (.+) UTC\): jt_\S+", said)
    assert shown is not None, said
    expires_at = datetime.strptime(shown[1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    assert abs((expires_at - datetime.now(UTC)).total_seconds() - 3600) < 60, said  # SUANLI_JOIN_TOKEN_TTL_S
