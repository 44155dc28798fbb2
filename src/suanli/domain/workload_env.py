"""What a rental's own environment variables may be: names the shell can export, string values without NUL,
and none the platform sets to isolate the rental (its devices, its MPS limits, `SUANLI_*`), which a tenant
must not override. The server refuses such a rental when it is asked; the agent checks again before it runs.
A command run in a rental (`suanli exec`) gets the rental's env too: with it, it must fit what execve takes
(`execve_problem`), or the node's execve fails with E2BIG.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from suanli.domain.catalog import Vendor

# the variable that limits which of a vendor's devices a workload sees (NVIDIA's by UUID, the others' by
# device index); a vendor not here has none known, so its devices cannot be rented out isolated
VISIBLE_DEVICES: Mapping[Vendor, str] = {
    Vendor.NVIDIA: "CUDA_VISIBLE_DEVICES",
    Vendor.AMD: "ROCR_VISIBLE_DEVICES",
    Vendor.HUAWEI: "ASCEND_RT_VISIBLE_DEVICES",
}

ISOLATION_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    "CUDA_MPS_PIPE_DIRECTORY",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "ASCEND_RT_VISIBLE_DEVICES",
    "SUANLI_RENTAL_ID",
    "SUANLI_NOTICE_FILE",
)
RESERVED_PREFIXES = ("SUANLI_", "CUDA_MPS_")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# what Linux's execve takes of a rental's own strings (the same as `suanli.wire.base.EXEC_*`, which checks
# a request alone): one argument or `NAME=value` of at most MAX_ARG_STRLEN less its NUL, and the command with
# the rental's env at most half of ARG_MAX (2 MiB), the rest for the agent's own variables and the platform's
EXECVE_STRING_MAX_BYTES = 131_071
EXECVE_TOTAL_MAX_BYTES = 1_048_576


def env_problem(env: Mapping[str, str]) -> str | None:
    """Why `env` cannot be a rental's environment (the first bad variable), or None when it can."""
    for name, value in env.items():
        if not isinstance(name, str) or not _NAME.match(name):
            return f"invalid environment variable name {name!r}"
        if not isinstance(value, str) or "\0" in value:
            return f"environment variable {name} must be a string without NUL bytes"
        if name in ISOLATION_VARIABLES or name.startswith(RESERVED_PREFIXES):
            return (
                f"environment variable {name} is set by the platform to isolate the rental and cannot be "
                "overridden; remove it from the rental's env"
            )
    return None


def execve_bytes(command: Sequence[str], env: Mapping[str, str]) -> int:
    """What `command` with `env` take of execve's ARG_MAX: each argument's and NAME=value's UTF-8 and NUL."""
    strings = [*command, *(f"{name}={value}" for name, value in env.items())]
    return sum(len(text.encode()) + 1 for text in strings)


def execve_problem(command: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why execve would refuse `command` run with the rental's `env` (E2BIG on its node), naming the limit;
    None when it takes them. The agent passes a command run in a rental (`suanli exec`) the rental's env."""
    for text in command:
        if (size := len(text.encode())) > EXECVE_STRING_MAX_BYTES:
            limit = EXECVE_STRING_MAX_BYTES
            return f"an argument of {size:,} bytes: execve takes at most {limit:,} bytes in one"
    if (total := execve_bytes(command, env)) > EXECVE_TOTAL_MAX_BYTES:
        return (
            f"the command and the rental's env ({len(env)} variables), which its node passes it too, take "
            f"{total:,} bytes (each string's UTF-8 and its NUL): execve takes at most "
            f"{EXECVE_TOTAL_MAX_BYTES:,} bytes"
        )
    return None
