"""Speed of the queueing replay: N synthetic ITP-like jobs on a fleet of G GPUs, one policy per run, one core.

`python -m suanli.sim.queue_bench --jobs 100000 --gpus 10000 --policy suanli` prints wall seconds and jobs/s.
Jobs come from `synthetic_jobs` (cluster04's sizes, durations and arrival gaps, the clock compressed to the
offered load), all on-demand unless `--mix` draws tiers and bids (so spot is preempted with notice); the
figure that matters is jobs/s, the scheduling results are the replay's as usual.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from suanli.domain.errors import SuanliError
from suanli.sim.itp import offered_load, read_itp_jobs, synthetic_fleet, synthetic_jobs
from suanli.sim.queue import POLICIES, parse_mix, run_queue
from suanli.sim.queue_outputs import check_outputs, json_text

TEMPLATE_PATH = Path("../shared/traces/microsoft-itp-elasticflow/cluster04.csv")  # from the repository
# from the working directory, else from the repository this module is in (run from anywhere)
DEFAULT_TEMPLATE = (
    TEMPLATE_PATH if TEMPLATE_PATH.is_file() else Path(__file__).resolve().parents[3] / TEMPLATE_PATH
)


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--load", type=float, default=0.85)
    parser.add_argument("--arrivals", default="trace", choices=("trace", "poisson"))
    parser.add_argument("--template", type=Path, default=DEFAULT_TEMPLATE)
    parser.add_argument("--policy", default="suanli", choices=sorted(POLICIES))
    parser.add_argument("--mix", default=None, help="tier mix, as `sim queue --mix`")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        mix = parse_mix(args.mix)
    except ValueError as error:
        parser.error(str(error))
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: at least 1")
    if args.gpus < 8 or args.gpus % 8:
        parser.error(f"--gpus {args.gpus}: a multiple of 8, at least 8 (the fleet is nodes of 8 GPUs)")
    if not 0 < args.load <= 10:  # also refuses NaN, which never advances the clock
        parser.error(f"--load {args.load}: the offered load is a number above 0 (0.85 is 85%)")
    if not args.template.is_file():
        parser.error(f"--template {args.template}: no such file (run from the repository, or give the path)")
    if args.json is not None:
        try:
            check_outputs(None, args.json, None)
        except ValueError as error:
            parser.error(str(error))
    fleet = synthetic_fleet(args.gpus // 8, 8)
    try:
        template = read_itp_jobs(args.template)
    except (SuanliError, UnicodeDecodeError) as error:
        parser.error(f"--template {args.template}: not an ITP job CSV ({error})")
    widest = max((job.gpus for job in template), default=0)
    if widest > fleet.gpu_count:
        parser.error(
            f"--gpus {args.gpus}: the template's widest job takes {widest} GPUs; give at least as many"
        )
    jobs = synthetic_jobs(template, args.jobs, fleet.gpu_count, args.load, 0, args.arrivals)
    result = run_queue(fleet, jobs, args.policy, mix=mix)
    report = {
        "jobs": len(jobs),
        "capacity_gpus": fleet.gpu_count,
        "offered_load_pct": round(100 * offered_load(jobs, fleet.gpu_count), 2),
        "policy": args.policy,
        "tier_mix": {t.label: round(p, 6) for t, p in mix.items()},
        **result.summary(),
    }
    if len(mix) == 1:
        report.pop("per_tier")
    print(json_text(report, indent=None), end="")
    if args.json is not None:
        args.json.write_text(json_text(report), encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
