"""`suanli cp` with the real CLI, server and agent: a directory into a rental and back, byte for byte; a file
into its working directory and out under another name; an archive whose command ended before its client
attached; a path that is not there, refused with tar's reason. Through two server workers:
`test_attach_between_workers`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_agents import FLEET, NODES, SUANLI, Platform, running_platform
from test_exec_attach import _cli_env, _running_rental

from suanli.client.copy import PACK, _FrameReader, extract

WAIT_S = 60.0


@pytest.fixture
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    with running_platform(tmp_path_factory.mktemp("platform"), FLEET, NODES[:1]) as p:
        yield p


def _cp(platform: Platform, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SUANLI, "cp", *args], env=_cli_env(platform), capture_output=True, text=True, timeout=WAIT_S * 2
    )


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root`: a file's bytes, None for a directory."""
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        found[str(path.relative_to(root))] = None if path.is_dir() else path.read_bytes()
    return found


def test_a_directory_goes_into_a_rental_and_comes_back_the_same(platform: Platform, tmp_path: Path) -> None:
    running = _running_rental(platform)
    data = tmp_path / "data"
    (data / "sub" / "empty").mkdir(parents=True)
    (data / "sub" / "weights.bin").write_bytes(os.urandom(300_000))
    (data / "a file with spaces.txt").write_text("hello\n")
    (data / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (data / "run.sh").chmod(0o755)

    sent = _cp(platform, str(data), f"{running.id}:inputs/data")
    assert sent.returncode == 0, sent.stderr
    back = tmp_path / "back"
    received = _cp(platform, f"{running.id}:inputs/data", str(back))
    assert received.returncode == 0, received.stderr
    assert _tree(back) == _tree(data)
    assert os.access(back / "run.sh", os.X_OK)

    whole = tmp_path / "whole"  # the working directory: its contents, into a new directory here
    received = _cp(platform, f"{running.id}:.", str(whole))
    assert received.returncode == 0, received.stderr
    assert _tree(whole / "inputs" / "data") == _tree(data)

    listed = subprocess.run(
        [*SUANLI, "exec", running.id, "--", "sh", "-c", "cd inputs/data && ls && wc -c < sub/weights.bin"],
        env=_cli_env(platform),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split("\n")[:4] == ["a file with spaces.txt", "run.sh", "sub", "300000"]


def test_a_file_goes_into_the_working_directory_and_comes_out_under_another_name(
    platform: Platform, tmp_path: Path
) -> None:
    running = _running_rental(platform)
    local = tmp_path / "notes.txt"
    local.write_text("line one\nline two\n")
    assert _cp(platform, str(local), f"{running.id}:.").returncode == 0  # into a directory that is there
    out = tmp_path / "out"
    out.mkdir()
    copied = _cp(platform, f"{running.id}:notes.txt", str(out / "renamed.txt"))
    assert copied.returncode == 0, copied.stderr
    assert (out / "renamed.txt").read_text() == "line one\nline two\n"
    into = _cp(platform, f"{running.id}:notes.txt", str(out))  # into a directory here, by its name
    assert into.returncode == 0, into.stderr
    assert (out / "notes.txt").read_text() == "line one\nline two\n"


def test_an_archive_whose_command_ended_before_its_client_attached_still_arrives(
    platform: Platform, tmp_path: Path
) -> None:
    """`tar -c` needs no input, so it can end before `suanli cp`'s WebSocket is up (a flaky CI run lost
    the archive so): the server keeps the agent's output for the client that comes late."""
    running = _running_rental(platform)
    local = tmp_path / "notes.txt"
    local.write_text("line one\nline two\n")
    assert _cp(platform, str(local), f"{running.id}:.").returncode == 0
    with platform.tenant() as api:
        command = ["sh", "-c", PACK, "sh", "notes.txt"]
        queued = api.exec(running.id, command, stdin=True, separate_stderr=True)
        ended = api.wait_exec(running.id, queued.id, within_s=WAIT_S)  # it ran with no client attached
        assert (ended.state, ended.exit_code) == ("exited", 0), ended
        with api.attach_exec(running.id, queued.id) as socket:
            extract(_FrameReader(socket, None), tmp_path, "notes.txt", "late.txt")
    assert (tmp_path / "late.txt").read_text() == "line one\nline two\n"


def test_a_path_that_is_not_there_is_refused_with_the_reason(platform: Platform, tmp_path: Path) -> None:
    running = _running_rental(platform)
    missing = _cp(platform, f"{running.id}:no/such/results", str(tmp_path / "results"))
    assert missing.returncode == 1
    assert (
        f"{running.id}:no/such/results" in missing.stderr and "no such file or directory" in missing.stderr
    ), missing.stderr
    assert missing.stderr.startswith("error:"), repr(missing.stderr)  # the progress line has gone
    assert not (tmp_path / "results").exists()
    (tmp_path / "large.bin").write_bytes(os.urandom(32 * 1024 * 1024))  # still sending when it fails
    unwritable = _cp(platform, str(tmp_path), f"{running.id}:/proc/none/here")
    assert unwritable.returncode == 1 and f"{running.id}:/proc/none/here: " in unwritable.stderr
    assert "mkdir" in unwritable.stderr, unwritable.stderr
    both_local = _cp(platform, str(tmp_path), str(tmp_path / "x"))
    assert both_local.returncode == 2 and "SOURCE DEST" in both_local.stderr, both_local.stderr
