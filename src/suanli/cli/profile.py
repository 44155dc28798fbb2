"""The CLI's login profile: server URL and API key, in the user's config directory (mode 0600)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

PROFILE_FILE = "profile.json"


@dataclass(frozen=True)
class Profile:
    url: str
    key: str


def config_dir() -> Path:
    """`SUANLI_CONFIG_DIR` when set (tests, several logins side by side), else the platform's config dir."""
    override = os.environ.get("SUANLI_CONFIG_DIR")
    return Path(override) if override else Path(platformdirs.user_config_dir("suanli"))


def profile_path() -> Path:
    return config_dir() / PROFILE_FILE


def save(profile: Profile) -> Path:
    path = profile_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump({"url": profile.url, "key": profile.key}, handle)
    return path


def load() -> Profile | None:
    """The saved profile; `SUANLI_URL` and `SUANLI_API_KEY` override it field by field."""
    path = profile_path()
    stored: dict[str, str] = {}
    if path.is_file():
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError):
            stored = {}
    url = os.environ.get("SUANLI_URL") or stored.get("url")
    key = os.environ.get("SUANLI_API_KEY") or stored.get("key")
    return Profile(url, key) if url and key else None
