"""Whether host-process workloads can read each other's command lines, from /proc's mount options."""

from __future__ import annotations

import pytest

from suanli.agent.proc_visibility import command_lines_visible

DEFAULT = "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"


@pytest.mark.parametrize(
    ("options", "visible"),
    [
        ("rw,nosuid,nodev,noexec,relatime", True),
        ("rw,relatime,hidepid=0", True),
        ("rw,relatime,hidepid=off", True),
        ("rw,relatime,hidepid=2", False),
        ("rw,relatime,hidepid=invisible", False),
        ("rw,relatime,hidepid=noaccess,gid=4", False),
    ],
)
def test_command_lines_are_visible_unless_proc_hides_them(options: str, visible: bool) -> None:
    mounts = "sysfs /sys sysfs rw 0 0\n" + f"proc /proc proc {options} 0 0\n"
    assert command_lines_visible(mounts) is visible


def test_only_the_proc_mount_at_slash_proc_counts() -> None:
    elsewhere = "proc /run/other/proc proc rw,hidepid=2 0 0\n" + DEFAULT
    assert command_lines_visible(elsewhere) is True
