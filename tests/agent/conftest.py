"""Fixtures shared by the agent's tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


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
