"""A GPU host's check of the real thing: NVML discovery, then the platform's server and agent on this host.

Run on a host with NVIDIA GPUs and the project's packages: `PYTHONPATH=src python3 examples/gpu_host_check.py`
(torch, if installed, lets the workloads prove what they see). It checks, and exits 1 when one fails:
1. `NvmlProbe` names the GPUs as the catalogue does, with the UUIDs `nvidia-smi -L` prints;
2. a rental of one whole GPU runs with `CUDA_VISIBLE_DEVICES` set to that GPU's UUID, and torch sees exactly
   it (and multiplies on it);
3. a spot rental that checkpoints, preempted by an on-demand rental of every GPU, saves on SIGTERM, goes back
   to the queue, is placed on this node again, resumes from its saved step, and has a run per placement.
Files go to $OUT (default /tmp/gpu-host-check): the check's and the processes' logs.
`DEVCHECK_DECLARED=FLEET.toml:NODE` runs it without NVML, on a declared node (a dry run on a CPU machine).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from suanli.agent.probe import DeclaredProbe, HostInventory, NvmlProbe
from suanli.client import Client
from suanli.wire.schemas import RentalCreateRequest

OUT = Path(os.environ.get("OUT", "/tmp/gpu-host-check"))
WORK = Path("/tmp/gpu-host-check-work")
ADMIN_KEY = "adm_gpu_host_check_0123456789"
DECLARED = os.environ.get("DEVCHECK_DECLARED")
CLI = [sys.executable, "-m", "suanli.cli.main"]
ENV = {
    **os.environ,
    "SUANLI_DATABASE_URL": f"sqlite:///{WORK}/suanli.db",
    "SUANLI_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
    "SUANLI_SCHEDULER_INTERVAL_S": "0.2",
    "SUANLI_AGENT_HEARTBEAT_INTERVAL_S": "0.5",
    "SUANLI_AGENT_MISSED_HEARTBEATS": "20",
    "SUANLI_PREEMPTION_NOTICE_S": "5",
}
# a workload that tells what it sees
SEES = """
import os
print('CUDA_VISIBLE_DEVICES=' + os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>'))
try:
    import torch
except ImportError:
    raise SystemExit(0)
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print('torch', i, p.name, 'GPU-' + str(p.uuid), p.total_memory // 2**20, 'MiB')
x = torch.randn(4096, 4096, device='cuda')
print('matmul', bool((x @ x).abs().mean() > 0))
"""
# a workload that checkpoints: it counts steps on the GPU, saves its step on SIGTERM, resumes from it
SAVER = """
import os, signal, sys, time
try:
    import torch
except ImportError:
    torch = None
state = os.path.join(os.environ['STATE_DIR'], os.environ['SUANLI_RENTAL_ID'])
step = int(open(state).read()) if os.path.exists(state) else 0
print(f'resuming at step {step} on', os.environ.get('CUDA_VISIBLE_DEVICES'), flush=True)
def save(*_):
    open(state, 'w').write(str(step))
    print(f'saved step {step}', flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, save)
x = torch.randn(8192, 8192, device='cuda') if torch else None
while step < 1500:
    if torch:
        x = torch.tanh(x @ x)
        torch.cuda.synchronize()
    else:
        time.sleep(0.01)
    step += 1
    if step % 250 == 0:
        print('step', step, flush=True)
print('done at', step, flush=True)
"""
failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok: " if ok else "FAILED: ") + what, flush=True)
    if not ok:
        failures.append(what)


def probe_host() -> HostInventory:
    if DECLARED:
        fleet, node = DECLARED.split(":")
        return DeclaredProbe.from_file(Path(fleet), node).inventory()
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    print(listed, flush=True)
    inventory = NvmlProbe().inventory()
    print("telemetry:", NvmlProbe().telemetry(), flush=True)
    for gpu in inventory.gpus:
        check(gpu.uuid in listed, f"GPU {gpu.index}: {gpu.uuid} as nvidia-smi lists it")
        check(gpu.model_name != gpu.raw_name, f"GPU {gpu.index}: {gpu.raw_name!r} is {gpu.model_name}")
    return inventory


def fleet_of(inventory: HostInventory) -> str:
    gpu = inventory.gpus[0]
    mode = "mig" if gpu.mig_mode else "whole"
    return f"""
[regions.lab]
jurisdiction = "EU"
grid_gco2_per_kwh = 380
pue = 1.2

[[nodes]]
name = "gpu-host"
topology = "lab/z1/pod-1/leaf-1"
cpu_milli = 16000
memory_mib = 131072
gpus = {{ model = "{gpu.model_name}", count = {len(inventory.gpus)}, mode = "{mode}" }}
"""


@contextmanager
def platform(port: int, name: str, with_agent: bool = True) -> Iterator[str]:
    """The server on `port` and, `with_agent`, this host's agent (it registers with $SUANLI_JOIN_TOKEN the
    first time; a restarted server keeps its database, and the agent its registration)."""
    url = f"http://127.0.0.1:{port}"
    logs = [(OUT / f"{name}-{part}.log").open("wb") for part in ("server", "agent")]
    server = subprocess.Popen([*CLI, "server", "--port", str(port)], env=ENV, stdout=logs[0], stderr=logs[0])
    agent = None
    try:
        for _ in range(150):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        if with_agent:
            args = [*CLI, "agent", "--server", url, "--work-dir", str(WORK / "agent"), "--grace", "2"]
            if DECLARED:
                args += ["--declared", str(WORK / "fleet.toml"), "--node", "gpu-host"]
            agent = subprocess.Popen(args, env=ENV, stdout=logs[1], stderr=logs[1])
            time.sleep(4)  # its first heartbeats: a restarted server times the node out from its own start
        yield url
    finally:
        for process in (agent, server):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()


def wait_ended(api: Client, rental_ids: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(api.rental(r).state in ("stopped", "failed", "lost", "preempted") for r in rental_ids):
            return
        time.sleep(0.5)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    inventory = probe_host()
    gpu = inventory.gpus[0]
    python = "python3" if DECLARED else sys.executable  # a declared dry run's venv may be private
    fleet = fleet_of(inventory)
    (WORK / "fleet.toml").write_text(fleet)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with platform(port, "setup", with_agent=False) as url:
        put = httpx.put(
            f"{url}/v1/fleet", content=fleet, headers={**admin, "Content-Type": "application/toml"}
        )
        check(put.status_code == 200, f"the fleet of this host loads: {put.text[:200]}")
        tenant = httpx.post(f"{url}/v1/tenants", json={"name": "gpu-check"}, headers=admin).json()["id"]
        keys = httpx.post(f"{url}/v1/tenants/{tenant}/keys", json={"label": "check"}, headers=admin)
        key = keys.json()["secret"]
        httpx.post(f"{url}/v1/tenants/{tenant}/credit", json={"amount_micros": 100_000_000}, headers=admin)
        token = httpx.post(f"{url}/v1/join-tokens", json={"node": "gpu-host"}, headers=admin).json()["token"]
    ENV["SUANLI_JOIN_TOKEN"] = token

    with platform(port, "sees") as url:
        api = Client(url, key)
        rental = api.create_rental(
            RentalCreateRequest(gpu_model=gpu.model_name, gpus=1, command=[python, "-c", SEES])
        )
        wait_ended(api, [rental.id], 120)
        time.sleep(2)  # the last of its log
        ended, log = api.rental(rental.id), api.logs(rental.id).data
        print(log, flush=True)
        check(ended.state == "stopped", f"the one-GPU rental ran and ended: {ended.state}")
        (seen,) = [line.split("=", 1)[1] for line in log.splitlines() if line.startswith("CUDA_VISIBLE")]
        agents_view = (
            DeclaredProbe.from_file(WORK / "fleet.toml", "gpu-host").inventory() if DECLARED else inventory
        )
        visible = {g.uuid for g in agents_view.gpus}
        check(seen in visible, f"its CUDA_VISIBLE_DEVICES is one of this host's GPUs by UUID: {seen}")
        torch_lines = [line for line in log.splitlines() if line.startswith("torch ")]
        if torch_lines:
            check(len(torch_lines) == 1 and seen in torch_lines[0], f"torch sees exactly it: {torch_lines}")
            check("matmul True" in log, "and multiplies on it")

    state_dir = WORK / "state"
    state_dir.mkdir(mode=0o777, exist_ok=True)
    state_dir.chmod(0o777)  # the workload runs as a user of its own
    with platform(port, "resume") as url:
        api = Client(url, key)
        spot = api.create_rental(
            RentalCreateRequest(
                gpu_model=gpu.model_name,
                gpus=1,
                tier="spot",
                bid_micros_per_gpu_hour=50_000_000,
                checkpoints=True,
                command=[python, "-c", SAVER],
                env={"STATE_DIR": str(state_dir)},
            )
        )
        deadline = time.monotonic() + 60
        while "step 250" not in api.logs(spot.id).data and time.monotonic() < deadline:
            time.sleep(0.5)
        print("its GPUs as read while it runs:", api.rental_gpus(spot.id), flush=True)
        every = len(inventory.gpus)
        od = api.create_rental(
            RentalCreateRequest(gpu_model=gpu.model_name, gpus=every, command=["sleep", "4"])
        )
        wait_ended(api, [spot.id, od.id], 150)
        time.sleep(2)
        ended, log = api.rental(spot.id), api.logs(spot.id).data
        print(log, [(e.kind, e.message) for e in ended.events], flush=True)
        runs = [(r.node, r.placement, r.state) for r in api.rental_runs(spot.id)]
        print("runs:", runs, "charged_micros:", ended.charged_micros, flush=True)
        saved = [line.split()[-1] for line in log.splitlines() if line.startswith("saved step")]
        check(ended.state == "stopped" and "done at 1500" in log, f"the spot rental finished: {ended.state}")
        check(
            len(saved) == 1 and f"resuming at step {saved[0]}" in log, f"it resumed where it saved: {saved}"
        )
        check(runs == [("gpu-host", 1, "stopped"), ("gpu-host", 2, "succeeded")], "a run per placement")
    print("failed: " + "; ".join(failures) if failures else "all checks passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
