"""A value the SDK's request model refuses is a usage error naming the option (exit 2), never a traceback;
the check happens before anything is sent, so no server is needed (the saved profile points nowhere)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from suanli.cli.main import app


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["keys", "create", "--label", "x" * 101, "--tenant", "ten_x"],
            "--label: String should have at most 100",
        ),
        (["webhooks", "add", "https://x.example/" + "a" * 3000], "URL: "),
        (["budget", "--daily", "99999999999999"], "--daily: at most 1,000,000,000.0000"),  # in units
        (["admin", "tenant-create", "x" * 300], "NAME: String should have at most"),
        (["rent", "H100:1", "--max-duration", "99999d", "--", "true"], "--max-duration: at most 3660 days"),
        (["rent", "H100:1", "--idle-stop", "10s", "--", "true"], "--idle-stop: at least 60 s"),
        (["rent", "H100:1", "--name", "a b", "--", "true"], "--name: use letters, digits"),
        (["rent", "H100:1", "--max-restarts", "2", "--", "true"], "--max-restarts 2: only with --restart"),
        (["invoice", "2026/12"], "'2026/12' is not a month as yyyy-mm"),
        (["invoice", "２０２６-12"], "is not a month as yyyy-mm"),  # fullwidth digits
        (["report-revenue", "26-12", "5"], "'26-12' is not a month as yyyy-mm"),
        (["admin", "credit", "ten_x", "١٢"], "not an amount"),  # Arabic-Indic digits
        (["admin", "credit", "ten_x", "-5"], "AMOUNT: an amount is not negative"),  # not "No such option"
        (["budget", "--daily", "0.00000001"], "--daily: an amount has at most six decimals"),
        (["report-revenue", "2026-11", "-5"], "REVENUE: an amount is not negative"),
        (["rent", "H100:1", "--tier", "spot", "--bid=-1", "--", "true"], "--bid: an amount is not negative"),
        (["port-forward", "rnt_x", "jupyter"], "[LOCAL:]REMOTE: 'jupyter' is not a port"),
        (["port-forward", "rnt_x", "9000:70000"], "a port is 1 to 65535"),
        (["exec", "-t", "rnt_x", "--", "bash"], "--tty: a terminal needs --stdin too (-it)"),
        (
            ["exec", "-it", "--timeout", "9h", "rnt_x", "--", "bash"],
            "--timeout: '9h' is too long: at most 8h",
        ),
        (["exec", "--timeout", "2h", "rnt_x", "--", "ls"], "at most 1h (8h with -i)"),
        (["port-forward", "--timeout", "9h", "rnt_x", "8888"], "--timeout: '9h' is too long: at most 8h"),
    ],
    ids=[
        "key-label",
        "webhook-url",
        "budget",
        "tenant-name",
        "max-duration",
        "idle-stop",
        "name",
        "restarts",
        "month-slash",
        "month-fullwidth",
        "revenue-month",
        "amount-digits",
        "negative-credit",
        "budget-decimals",
        "negative-revenue",
        "negative-bid",
        "forward-port",
        "forward-range",
        "tty-alone",
        "shell-timeout",
        "exec-timeout",
        "forward-timeout",
    ],
)
def test_a_refused_value_names_its_option_and_exits_2(tmp_path: Path, args: list[str], says: str) -> None:
    env = {"SUANLI_CONFIG_DIR": str(tmp_path), "SUANLI_URL": "http://127.0.0.1:9", "SUANLI_API_KEY": "sk_x"}
    done = CliRunner().invoke(app, args, env=env)
    assert done.exit_code == 2, done.output
    assert says in " ".join(done.output.split()) and "Traceback" not in done.output, done.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["exec", "rnt_x", "ls", "-la"], ("No such option: -l.", "suanli exec rnt_x -- ls -la")),
        (
            ["exec", "--timeout", "5m", "-i", "rnt_x", "python", "-c", "print(1)"],
            ("No such option: -c.", "suanli exec --timeout 5m -i rnt_x -- python -c 'print(1)'"),
        ),
    ],
    ids=["ls-la", "quoted"],
)
def test_an_exec_whose_command_has_options_says_where_the_command_goes(
    tmp_path: Path, args: list[str], says: tuple[str, ...]
) -> None:
    env = {"SUANLI_CONFIG_DIR": str(tmp_path), "SUANLI_URL": "http://127.0.0.1:9", "SUANLI_API_KEY": "sk_x"}
    done = CliRunner(env={"COLUMNS": "200"}).invoke(app, args, env=env)
    assert done.exit_code == 2 and "goes after --" in done.output, done.output
    assert all(part in done.output for part in says), done.output


@pytest.mark.parametrize(
    "args",
    [
        ["exec", "rnt_x", "--tiemout", "5m", "--", "ls"],
        ["exec", "-x", "rnt_x"],
        ["exec", "-l", "rnt_x", "ls"],
    ],
)
def test_a_misspelt_exec_option_of_its_own_is_only_refused(args: list[str]) -> None:
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2 and "No such option" in done.output
    assert "goes after --" not in " ".join(done.output.split()), done.output


def test_a_port_forward_names_an_address_it_cannot_use(tmp_path: Path) -> None:
    env = {"SUANLI_CONFIG_DIR": str(tmp_path), "SUANLI_URL": "http://127.0.0.1:9", "SUANLI_API_KEY": "sk_x"}
    runner = CliRunner(env={"COLUMNS": "200"})
    unknown = runner.invoke(
        app, ["port-forward", "--address", "no-such-host.invalid", "rnt_x", "8888"], env=env
    )
    assert unknown.exit_code == 2, unknown.output
    assert "--address: 'no-such-host.invalid' is not an address here" in unknown.output, unknown.output
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        busy = runner.invoke(app, ["port-forward", "rnt_x", f"{port}:8888"], env=env)
    assert busy.exit_code == 2, busy.output
    assert f"[LOCAL:]REMOTE: cannot listen on 127.0.0.1:{port}" in busy.output, busy.output


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0 and done.output == f"suanli {version('suanli')}\n"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("notaurl", "SUANLI_URL: 'notaurl' is not a server URL; expected http://HOST:PORT"),
        ("ftp://host", "SUANLI_URL: 'ftp://host' is not a server URL"),
        ("http://[::1", "SUANLI_URL: 'http://[::1' is not a URL"),
    ],
    ids=["word", "scheme", "unparsable"],
)
def test_a_server_url_that_cannot_be_one_is_a_usage_error_not_an_unreachable_server(
    tmp_path: Path, url: str, says: str
) -> None:
    env = {"SUANLI_CONFIG_DIR": str(tmp_path), "SUANLI_URL": url, "SUANLI_API_KEY": "sk_x"}
    done = CliRunner().invoke(app, ["ls"], env=env)
    assert done.exit_code == 2 and says in " ".join(done.output.split()), done.output
    login = CliRunner().invoke(app, ["login", url], env={"SUANLI_CONFIG_DIR": str(tmp_path)})
    assert (
        login.exit_code == 2 and "is not a" in login.output and "Key" not in login.output
    )  # before the prompt
    assert not (tmp_path / "profile.json").exists()


def test_the_sdk_refuses_a_base_url_that_cannot_be_a_servers() -> None:
    from suanli.client import Client

    with pytest.raises(ValueError, match="base_url 'localhost:8000' is not a server URL"):
        Client("localhost:8000")


def test_port_forward_ports_read_as_kubectls() -> None:
    from suanli.cli.exec_commands import _ports

    assert [_ports(text) for text in ("8888", "9000:8888", ":8888", "0:8888")] == [
        (8888, 8888),
        (9000, 8888),
        (0, 8888),  # any free local port
        (0, 8888),
    ]


@pytest.fixture
def not_suanli() -> Iterator[str]:
    """Another HTTP server on a loopback port (a typo'd port): it answers every path with an HTML 404."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("args", [["ls"], ["balance"]])
def test_a_url_that_is_not_a_suanli_server_is_said_in_one_line_not_as_its_html(
    tmp_path: Path, not_suanli: str, args: list[str]
) -> None:
    env = {"SUANLI_CONFIG_DIR": str(tmp_path), "SUANLI_URL": not_suanli, "SUANLI_API_KEY": "sk_x"}
    done = CliRunner().invoke(app, args, env=env)
    assert done.exit_code != 0
    assert "<" not in done.output and "Traceback" not in done.output, done.output
    assert f"{not_suanli} answered GET" in done.output and "is it a suanli server?" in done.output
