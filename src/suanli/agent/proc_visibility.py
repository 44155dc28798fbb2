"""Whether host-process workloads can read each other's command lines: /proc mounted without `hidepid` lets
any uid list every process's arguments (`ps`), though distinct uids keep environments and signals apart."""

from __future__ import annotations

from pathlib import Path

PROTECTING = frozenset(
    {"1", "2", "4", "noaccess", "invisible", "ptraceable"}
)  # hidepid values that hide them


def command_lines_visible(mounts: str) -> bool:
    """From /proc/mounts' text: whether the proc file system at /proc lets every uid read every command
    line (no `hidepid` that hides them)."""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/proc" and fields[2] == "proc":
            options = dict(option.partition("=")[::2] for option in fields[3].split(","))
            return options.get("hidepid", "0") not in PROTECTING
    return True  # no /proc mount seen: assume the default, visible


def host_command_lines_visible(mounts: Path = Path("/proc/mounts")) -> bool:
    try:
        return command_lines_visible(mounts.read_text())
    except OSError:
        return True
