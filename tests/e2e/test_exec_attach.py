"""`suanli exec -it` with the real CLI, server and agent: a shell on the node on a real pseudo-terminal at
both ends (the CLI's in raw mode, its size passed on), ^C reaching the remote command, the shell's exit
code; piped input with `-i`, the command's stdout and stderr each on its own; a client that goes away
hangs its command up; and `suanli port-forward` to a web server the rental runs."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from test_agents import FLEET, NODES, SUANLI, Platform, running_platform, wait_for_state, wait_until

from suanli.agent.probe import declared_gpu_uuid
from suanli.client import Client
from suanli.wire.schemas import RentalCreateRequest, RentalResponse

WAIT_S = 30.0


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    with running_platform(tmp_path, FLEET, NODES[:1]) as p:
        yield p


def _cli_env(platform: Platform) -> dict[str, str]:
    env = {**os.environ, "SUANLI_URL": platform.url, "SUANLI_API_KEY": platform.tenant_key}
    env["SUANLI_CONFIG_DIR"] = str(platform.tmp / "cli")
    return env


def _in_terminal(argv: list[str], env: dict[str, str], rows: int, cols: int) -> tuple[subprocess.Popen, int]:
    """`argv` on a new pseudo-terminal of `rows` x `cols`; the process and the terminal's master side."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    return process, master


def _read_until(master: int, wanted: bytes, seen: bytearray) -> None:
    """Read the terminal into `seen` until it holds `wanted`."""
    deadline = time.monotonic() + WAIT_S
    while wanted not in seen:
        assert time.monotonic() < deadline, f"never printed {wanted!r}; printed {bytes(seen)!r}"
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
    assert wanted in seen, bytes(seen)


def _running_rental(platform: Platform):
    with platform.tenant() as api:
        request = RentalCreateRequest(gpu_model="H100-SXM-80GB", gpus=1, command=["sleep", "600"])
        rental = api.create_rental(request)
        return wait_for_state(api, rental.id, "running")


def test_a_shell_on_a_terminal_sees_the_rentals_gpu_its_size_and_ctrl_c(platform: Platform) -> None:
    running = _running_rental(platform)
    argv = [*SUANLI, "exec", "-it", running.id, "--", "bash", "--norc", "--noprofile", "-i"]
    process, master = _in_terminal(argv, _cli_env(platform), rows=33, cols=101)
    seen = bytearray()
    try:
        os.write(master, b'tty; echo "gpus=$CUDA_VISIBLE_DEVICES"; stty size\r')
        _read_until(master, b"33 101", seen)
        where = running.allocation[0]
        assert f"gpus={declared_gpu_uuid(where.node, where.slices[0].gpu_index)}".encode() in seen
        assert b"/dev/pts/" in seen  # a terminal on the node too
        os.write(master, b"sleep 100\r")
        time.sleep(1.0)
        os.write(master, b"\x03")  # ^C: to the remote sleep, not to the CLI (its terminal is raw)
        os.write(master, b"echo alive-$((6*7))\r")
        _read_until(master, b"alive-42", seen)
        os.write(master, b"exit 5\r")
        assert process.wait(timeout=WAIT_S) == 5, bytes(seen)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)
    with platform.tenant() as api:
        shown = api.execs(running.id)[0]
        assert (shown.state, shown.exit_code, shown.tty, shown.output) == ("exited", 5, True, "")


def test_piped_input_reaches_the_command_and_its_end_closes_the_input(platform: Platform) -> None:
    running = _running_rental(platform)
    script = "read first; echo got:$first; echo to-stderr >&2; wc -l"
    shown = subprocess.run(
        [*SUANLI, "exec", "-i", running.id, "--", "sh", "-c", script],
        input="hello\nmore\nlines\n",
        env=_cli_env(platform),
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.split() == ["got:hello", "2"]  # its stderr is not in it: on this side's stderr
    assert shown.stderr == "to-stderr\n"


def test_a_client_that_goes_away_hangs_up_its_command(platform: Platform) -> None:
    running = _running_rental(platform)
    marker = platform.tmp / "hung-up"
    script = f"trap 'echo hup > {marker}; exit 129' HUP; echo ready; while :; do sleep 0.1; done"
    argv = [*SUANLI, "exec", "-it", running.id, "--", "bash", "--norc", "-c", script]
    process, master = _in_terminal(argv, _cli_env(platform), rows=24, cols=80)
    try:
        _read_until(master, b"ready", bytearray())
        process.kill()
        process.wait()
    finally:
        os.close(master)
    wait_until(marker.exists, WAIT_S, "the command was never hung up")
    with platform.tenant() as api:
        wait_until(lambda: api.execs(running.id)[0].state == "exited", WAIT_S, "its end was never reported")
        assert api.execs(running.id)[0].exit_code == 129


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _forward(platform: Platform, rental_id: str, remote: int) -> tuple[subprocess.Popen[str], int]:
    """`suanli port-forward RENTAL 0:REMOTE` running; the local port it listens on."""
    argv = [*SUANLI, "port-forward", rental_id, f"0:{remote}"]
    process = subprocess.Popen(argv, env=_cli_env(platform), stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    line = process.stderr.readline()
    assert line.startswith("Forwarding from 127.0.0.1:"), line
    return process, int(line.split(":")[1].split()[0])


def serving_rental(api: Client, port: int, directory: Path | None = None) -> RentalResponse:
    """A running rental whose workload serves `directory` (its work dir) over HTTP on `port`, listening."""
    serve = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    serve += [] if directory is None else ["-d", str(directory)]
    rental = api.create_rental(RentalCreateRequest(gpu_model="H100-SXM-80GB", gpus=1, command=serve))
    running = wait_for_state(api, rental.id, "running")
    wait_until(lambda: _listening(port), WAIT_S, "the rental's web server never listened")
    return running


def test_port_forward_reaches_a_server_the_rental_runs(platform: Platform) -> None:
    """`suanli port-forward`: HTTP requests, two at once, reach the rental's web server on its node through
    the server; a port nothing listens on is refused with the reason; Ctrl-C ends it, and its end is told."""
    port = _free_port()
    with platform.tenant() as api:
        rental = serving_rental(api, port)
        process, local = _forward(platform, rental.id, port)
        try:
            url = f"http://127.0.0.1:{local}/"
            with httpx.Client(timeout=WAIT_S) as http:
                first = http.get(url)  # waits for the agent's next heartbeat, then goes through
                assert first.status_code == 200 and "Directory listing" in first.text
            with ThreadPoolExecutor(2) as pool:
                both = list(pool.map(lambda _: httpx.get(url, timeout=WAIT_S).status_code, range(2)))
            assert both == [200, 200]
        finally:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=WAIT_S) == 0
        wait_until(lambda: api.execs(rental.id)[0].state == "exited", WAIT_S, "its end was never reported")
        ended = api.execs(rental.id)[0]
        assert ended.port == port and ended.command == [] and "3 connection(s)" in ended.message

        closed = _free_port()  # nothing listens there
        process, local = _forward(platform, rental.id, closed)
        try:
            with pytest.raises(httpx.TransportError):
                httpx.get(f"http://127.0.0.1:{local}/", timeout=WAIT_S)
        finally:
            process.send_signal(signal.SIGINT)
            _, said = process.communicate(timeout=WAIT_S)
        assert f"cannot connect to port {closed} on the node" in said, said


# a server that reads each connection to its end, then answers with what it read and closes (as an upload
# or an RPC whose client shuts its writes to say the request is whole)
ECHO_AT_END = """import socket, sys
with socket.create_server(("127.0.0.1", int(sys.argv[1]))) as server:
    while True:
        connection, _ = server.accept()
        with connection:
            got = bytearray()
            while data := connection.recv(65536):
                got += data
            connection.sendall(bytes(got))
"""


def test_port_forward_passes_a_half_close_on_and_the_answer_comes_back(platform: Platform) -> None:
    """A client that sends its request, then shuts its writes, got nothing back through the forward (the
    agent closed the port's connection at the client's end of input); it gets the whole answer now."""
    port = _free_port()
    with platform.tenant() as api:
        command = [sys.executable, "-c", ECHO_AT_END, str(port)]
        rental = api.create_rental(RentalCreateRequest(gpu_model="H100-SXM-80GB", gpus=1, command=command))
        wait_for_state(api, rental.id, "running")
        wait_until(lambda: _listening(port), WAIT_S, "the rental's server never listened")
        process, local = _forward(platform, rental.id, port)
        try:
            sent = os.urandom(200_000)
            for _ in range(3):
                with socket.create_connection(("127.0.0.1", local), timeout=WAIT_S) as connection:
                    connection.sendall(sent)
                    connection.shutdown(socket.SHUT_WR)
                    got = bytearray()
                    while data := connection.recv(65536):
                        got += data
                assert bytes(got) == sent, f"{len(got)} of {len(sent)} bytes came back"
        finally:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=WAIT_S) == 0


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_a_shell_whose_server_goes_away_ends_with_a_message_not_a_traceback(platform: Platform) -> None:
    running = _running_rental(platform)
    argv = [*SUANLI, "exec", "-it", running.id, "--", "bash", "--norc", "--noprofile", "-i"]
    process, master = _in_terminal(argv, _cli_env(platform), rows=24, cols=80)
    seen = bytearray()
    try:
        os.write(master, b"echo up-$((2+3))\r")
        _read_until(master, b"up-5", seen)
        platform.stop_server()
        assert process.wait(timeout=WAIT_S) == 1
        _read_until(master, b"error:", seen)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)
    assert b"Traceback" not in seen, bytes(seen)


def _processes_running(needle: str) -> list[int]:
    """Pids of live processes whose command line holds `needle`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if needle in text and state != "Z" and int(cmdline.parent.name) != os.getpid():
            found.append(int(cmdline.parent.name))
    return found


def test_stopping_a_rental_ends_its_commands_shells_and_forwards(platform: Platform) -> None:
    """A command, a shell (with a job its job control put in a process group of its own) and a port forward
    into a rental do not outlive it: its GPUs go to the next tenant."""
    running = _running_rental(platform)
    env = _cli_env(platform)
    plain = subprocess.Popen(
        [*SUANLI, "exec", "--timeout", "10m", running.id, "--", "sleep", "1234"], env=env
    )
    argv = [*SUANLI, "exec", "-it", running.id, "--", "bash", "--norc", "--noprofile", "-i"]
    shell, master = _in_terminal(argv, env, rows=24, cols=80)
    forward, _ = _forward(platform, running.id, _free_port())
    try:
        os.write(master, b"sleep 2345 & echo job-$((1+1))\r")
        _read_until(master, b"job-2", bytearray())
        wait_until(lambda: bool(_processes_running("sleep 1234")), WAIT_S, "the command never started")
        assert _processes_running("sleep 2345")
        with platform.tenant() as api:  # the forward is open on the node: its agent ends it
            wait_until(
                lambda: [e.state for e in api.execs(running.id) if e.port is not None] == ["running"],
                WAIT_S,
                "the forward never started on the node",
            )
            api.stop(running.id)
            wait_for_state(api, running.id, "stopped")
        wait_until(lambda: not _processes_running("sleep 1234"), WAIT_S, "the command outlived its rental")
        wait_until(
            lambda: not _processes_running("sleep 2345"), WAIT_S, "the shell's job outlived its rental"
        )
        assert shell.wait(timeout=WAIT_S) != 0 and plain.wait(timeout=WAIT_S) != 0
        _, said = forward.communicate(timeout=WAIT_S)
        assert forward.returncode == 1, said
        # the agent's word (it stopped the forward) or the server's (the rental ended while it was open)
        assert "the forward ended: ended with its rental" in said or "the rental ended (stopped)" in said, (
            said
        )
    finally:
        for process in (plain, shell, forward):
            if process.poll() is None:
                process.kill()
        os.close(master)


def test_a_forward_and_a_shell_end_at_their_timeout_and_say_so(platform: Platform) -> None:
    """A forward's --timeout is kept on the node (exit 124, its connections counted, refused ones too);
    a shell past its --timeout (bash ignores TERM: KILL follows 5 s later) says it timed out."""
    running = _running_rental(platform)
    closed = _free_port()
    argv = [*SUANLI, "port-forward", "--timeout", "3s", running.id, f":{closed}"]
    forward = subprocess.Popen(argv, env=_cli_env(platform), stderr=subprocess.PIPE, text=True)
    assert forward.stderr is not None
    local = int(forward.stderr.readline().split(":")[1].split()[0])
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{local}/", timeout=WAIT_S)  # refused on the node
    _, said = forward.communicate(timeout=WAIT_S)
    assert forward.returncode == 0 and "the forward ended" in said, said
    with platform.tenant() as api:
        wait_until(lambda: api.execs(running.id)[0].state == "exited", WAIT_S, "its end was never reported")
        ended = api.execs(running.id)[0]
    assert (ended.exit_code, ended.message) == (
        124,
        f"timed out; 0 connection(s) to port {closed}, 1 refused",
    )

    argv = [
        *SUANLI,
        "exec",
        "-it",
        "--timeout",
        "2s",
        running.id,
        "--",
        "bash",
        "--norc",
        "--noprofile",
        "-i",
    ]
    shell, master = _in_terminal(argv, _cli_env(platform), rows=24, cols=80)
    seen = bytearray()
    try:
        assert shell.wait(timeout=WAIT_S) == 137
        _read_until(master, b"timed out (exit 137)", seen)
    finally:
        if shell.poll() is None:
            shell.kill()
        os.close(master)
