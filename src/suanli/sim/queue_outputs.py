"""`suanli sim queue` and `sim itp-check`: what they write, the JSON report and the PNG charts, and the
checks that those outputs can be written before a replay that may take minutes."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path

from suanli.sim.queue_result import QueueResult


def results_json(results: Sequence[QueueResult], notes: dict[str, object] | None = None) -> dict[str, object]:
    """`capacity_gpus` and `policies.<name>.{mean_jct_s, p95_jct_s, mean_queue_s, mean_alloc_pct, ...}`."""
    return {
        "capacity_gpus": results[0].capacity_gpus if results else 0,
        **(notes or {}),
        "policies": {r.policy: r.summary() for r in results},
    }


def write_json(path: Path, results: Sequence[QueueResult], notes: dict[str, object] | None = None) -> None:
    path.write_text(json_text(results_json(results, notes)), encoding="utf-8")


def json_text(report: object, indent: int | None = 2) -> str:
    """`report` as JSON, a figure without a value (NaN: no job completed, no arrival window) as null:
    NaN is not JSON, and strict readers refuse the whole file."""
    return json.dumps(_nan_as_none(report), indent=indent, allow_nan=False) + "\n"


def _nan_as_none(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _nan_as_none(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_nan_as_none(item) for item in value]
    return value


LINE_STYLES = ("-", "--", ":", "-.")  # policies with identical figures stay visible


def write_plots(directory: Path, results: Sequence[QueueResult], title: str = "") -> list[Path]:
    """PNG charts of GPU allocation % and queue length over virtual time, one step line per policy (a sample
    holds until the next: the replay's state changes only at events), titled with `title` (the trace and
    fleet); a policy drawn over another's identical line is told apart by its dashes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, column, label in (("allocation", 1, "GPU allocation %"), ("queue", 2, "queued jobs")):
        figure, axes = plt.subplots(figsize=(10, 4))
        for number, result in enumerate(results):
            t0 = result.samples[0][0] if result.samples else 0.0
            xs = [(s[0] - t0) / 86400 for s in result.samples]
            ys = [100 * s[1] / result.capacity_gpus if column == 1 else s[2] for s in result.samples]
            dashes = LINE_STYLES[number % len(LINE_STYLES)]
            axes.plot(xs, ys, label=result.policy, linewidth=0.8, drawstyle="steps-post", linestyle=dashes)
        if title:
            axes.set_title(f"{label}: {title}")
        axes.set_xlabel("days since the first arrival")
        axes.set_ylabel(label)
        axes.legend()
        figure.tight_layout()
        path = directory / f"{name}.png"
        figure.savefig(path, dpi=120)
        plt.close(figure)
        written.append(path)
    return written


def check_outputs(jobs: Path | None, json_path: Path | None, plot_dir: Path | None) -> None:
    """Refuse, before a replay that may take minutes, a trace that is not a file and outputs that cannot be
    written; make the JSON file's folder and the charts' folder."""
    if jobs is not None and not jobs.is_file():
        why = "is a directory" if jobs.is_dir() else "no such file"
        raise ValueError(f"--jobs {jobs}: {why}")
    if plot_dir is not None:
        if plot_dir.exists() and not plot_dir.is_dir():
            raise ValueError(f"--plot {plot_dir}: exists and is not a directory")
        _writable_folder("--plot", plot_dir, plot_dir)
    if json_path is not None:
        if json_path.is_dir():
            raise ValueError(f"--json {json_path}: is a directory")
        _writable_folder("--json", json_path, json_path.parent)
        existed = json_path.exists()
        try:  # opened for appending, as the write will open it (root passes os.access, /proc is not writable)
            json_path.open("a").close()
        except OSError as error:
            raise ValueError(f"--json {json_path}: cannot write it ({error.strerror})") from None
        if not existed:
            json_path.unlink(missing_ok=True)


def _writable_folder(option: str, given: Path, folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()  # a file made there, not only permission bits read
    except OSError as error:
        raise ValueError(f"{option} {given}: cannot write in its folder ({error.strerror})") from None
