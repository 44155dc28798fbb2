"""A user name for a workload run as a uid with no account (`--run-as-uids`): passwd and group files that
add its entry to the host's, read through nss_wrapper (Debian's `libnss-wrapper`), as OpenShift names its
arbitrary uids. Without one, `whoami` fails, a shell's prompt reads "I have no name!" and what looks the
user up (`pwd.getpwuid`, ssh, some Python packages' cache paths) raises."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

# Where distributions put the library (Debian and Ubuntu: the multiarch directory; Fedora: lib64).
LIBRARY_PATTERNS = (
    "/usr/lib/*-linux-gnu/libnss_wrapper.so",
    "/usr/lib64/libnss_wrapper.so",
    "/usr/lib/libnss_wrapper.so",
)
SYSTEM_PASSWD = Path("/etc/passwd")
SYSTEM_GROUP = Path("/etc/group")


@dataclass(frozen=True, slots=True)
class Account:
    """The entry a uid without an account gets: its name, ids, home and shell."""

    name: str
    uid: int
    gid: int
    home: Path
    shell: str
    gecos: str = ""


def nss_wrapper_library() -> Path | None:
    """This host's nss_wrapper library; None when it is not installed."""
    for pattern in LIBRARY_PATTERNS:
        for found in sorted(glob.glob(pattern)):
            return Path(found)
    return None


def login_shell() -> str:
    """bash where the host has it, else sh: what `suanli exec -it RENTAL -- $SHELL` should start."""
    return "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"


def passwd_text(system: str, account: Account) -> str:
    """The host's passwd entries with `account`'s in place of any entry of the same name or uid."""
    kept = [line for line in system.splitlines() if not _names(line, account.name, account.uid)]
    fields = (account.name, "x", account.uid, account.gid, account.gecos, account.home, account.shell)
    return "\n".join([*kept, ":".join(str(field) for field in fields)]) + "\n"


def group_text(system: str, account: Account) -> str:
    """The host's group entries with `account`'s own group (named as it, no members) in place of any
    entry of the same name or gid."""
    kept = [line for line in system.splitlines() if not _names(line, account.name, account.gid)]
    return "\n".join([*kept, f"{account.name}:x:{account.gid}:"]) + "\n"


def _names(line: str, name: str, number: int) -> bool:
    parts = line.split(":")
    return len(parts) > 2 and (parts[0] == name or parts[2] == str(number))


@dataclass(frozen=True, slots=True)
class IdentityFiles:
    """Where a rental's passwd and group files are, and the environment that makes its processes read them."""

    library: Path
    passwd: Path
    group: Path

    def env(self, preload: str | None = None) -> dict[str, str]:
        """LD_PRELOAD with the library first (then `preload`, the rental's own), and the two files."""
        libraries = " ".join(part for part in (str(self.library), preload) if part)
        return {
            "LD_PRELOAD": libraries,
            "NSS_WRAPPER_PASSWD": str(self.passwd),
            "NSS_WRAPPER_GROUP": str(self.group),
        }


def write_identity(files: IdentityFiles, account: Account) -> None:
    """Write `account`'s passwd and group files (readable by all, written by the agent alone)."""
    for path, text in (
        (files.passwd, passwd_text(_read(SYSTEM_PASSWD), account)),
        (files.group, group_text(_read(SYSTEM_GROUP), account)),
    ):
        partial = path.with_name(path.name + ".new")
        partial.write_text(text)
        partial.chmod(0o644)
        partial.replace(path)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
