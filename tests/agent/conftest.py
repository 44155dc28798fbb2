"""Fixtures shared by the agent's tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from suanli.cli.main import app

FLEET = Path(__file__).parents[2] / "examples" / "fleet.toml"


@pytest.fixture
def base() -> Iterator[Path]:
    """An agent work directory other users can reach (pytest's tmp_path is under a 0700 directory), with the
    node key the agent keeps there (agent.json, 0600): for workloads run as other users or uids."""
    directory = Path(tempfile.mkdtemp(prefix="suanli-agent-"))
    key = directory / "agent.json"
    os.close(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600))
    key.write_text('{"node_key": "nk_secret"}')
    yield directory
    shutil.rmtree(directory)


def agent_cli(work_dir: Path, *options: str) -> Result:
    """`suanli agent` for a declared node of the example fleet, with `options`, as the CLI runs it."""
    args = ["agent", "--server", "http://127.0.0.1:9", "--declared", str(FLEET), "--node", "h100-a-01"]
    return CliRunner().invoke(app, [*args, "--work-dir", str(work_dir), *options])
