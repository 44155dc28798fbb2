"""What execve takes of a command run in a rental with the rental's env (`domain.workload_env`)."""

from __future__ import annotations

import pytest

from suanli.domain.workload_env import EXECVE_STRING_MAX_BYTES, EXECVE_TOTAL_MAX_BYTES, execve_problem
from suanli.wire.schemas import EXEC_STRING_MAX_BYTES, EXEC_TOTAL_MAX_BYTES

LONGEST = "x" * EXECVE_STRING_MAX_BYTES  # 131,072 bytes with its NUL


def test_the_limits_are_those_the_wire_checks_a_request_alone_against() -> None:
    assert (EXECVE_STRING_MAX_BYTES, EXECVE_TOTAL_MAX_BYTES) == (EXEC_STRING_MAX_BYTES, EXEC_TOTAL_MAX_BYTES)


@pytest.mark.parametrize(
    ("command", "env", "words"),
    [
        (["echo", LONGEST + "x"], {}, "at most 131,071 bytes in one"),
        (["echo", *[LONGEST] * 4], {f"V{n}": LONGEST[3:] for n in range(4)}, "1,048,581 bytes"),
        ([LONGEST] * 8, {"A": "b"}, "1,048,580 bytes"),  # 8 x 131,072 + "A=b" and its NUL
    ],
    ids=["one-argument", "command-and-env", "one-variable-over"],
)
def test_a_command_execve_would_refuse_with_the_rentals_env_names_the_limit(
    command: list[str], env: dict[str, str], words: str
) -> None:
    problem = execve_problem(command, env)
    assert problem is not None and words in problem, problem


@pytest.mark.parametrize(
    ("command", "env"),
    [
        (["echo", *[LONGEST] * 3], {f"V{n}": LONGEST[3:] for n in range(4)}),
        ([LONGEST] * 8, {}),  # 1,048,576 exactly
        (["nvidia-smi"], {}),
    ],
    ids=["under", "exactly-the-limit", "short"],
)
def test_a_command_that_fits_with_the_rentals_env_has_no_problem(
    command: list[str], env: dict[str, str]
) -> None:
    assert execve_problem(command, env) is None
