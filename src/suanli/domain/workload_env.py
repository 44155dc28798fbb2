"""What a rental's own environment variables may be: names the shell can export, string values without NUL,
and none the platform sets to isolate the rental (its devices, its MPS limits, `SUANLI_*`), which a tenant
must not override. The server refuses such a rental when it is asked; the agent checks again before it runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

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
