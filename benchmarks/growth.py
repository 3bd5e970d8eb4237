"""How the cost of `retrieval-eval run` grows with the warehouse's history (SPEC 9): with N
nightly runs of the sample's shape committed (315 cases each), time an unchanged re-run and a
run that adds one new run, beside one run into an empty warehouse. Whole processes, as in
benchmarks/run.py; CPU time is given beside the wall time (steadier on a shared machine).

    python benchmarks/growth.py --runs 300 --repeat 5

The runs are copies of the committed sample's four runs under new ids and dates, in
benchmarks/work/data/growth-<N>/ (made when missing); the table goes to
benchmarks/results/growth-<N>.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from benchmarks.run import (  # noqa: E402
    RESULTS,
    SAMPLE_RUNS,
    WORK,
    compile_project,
    ours_env,
    retrieval_eval_command,
    timed,
)


def make_history(folder: Path, n_runs: int) -> Path:
    """N run folders, night-000 … (copies of the sample's runs), one a day."""
    runs = folder / "runs"
    if runs.is_dir() and len(list(runs.iterdir())) == n_runs:
        return runs
    shutil.rmtree(folder, ignore_errors=True)
    sources = sorted(p for p in SAMPLE_RUNS.iterdir() if (p / "manifest.json").is_file())
    for i in range(n_runs):
        source = sources[i % len(sources)]
        run_id = f"night-{i:03d}"
        target = runs / run_id
        target.mkdir(parents=True)
        manifest = json.loads((source / "manifest.json").read_text())
        manifest.update(run_id=run_id, created_at=f"{2026 + i // 336}-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}T02:00:00Z")
        (target / "manifest.json").write_text(json.dumps(manifest))
        shutil.copy(source / "cases.jsonl", target / "cases.jsonl")
    return runs


def run(runs: Path, warehouse: Path, report: Path):
    cmd = [*retrieval_eval_command(), "run", str(runs), "--warehouse", str(warehouse), "--report-dir", str(report)]
    return timed(cmd, cwd=ROOT, env=ours_env())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    compile_project()
    folder = WORK / "data" / f"growth-{args.runs}"
    runs = make_history(folder, args.runs)
    scratch = Path(tempfile.mkdtemp(prefix="growth-", dir=WORK))
    try:
        warehouse, report = scratch / "wh", scratch / "rep"
        first = run(runs, warehouse, report)
        print(f"history of {args.runs} runs committed in {first.wall_s:.1f} s", flush=True)
        newest = sorted(runs.iterdir())[-1]
        extra = scratch / "extra" / "night-new"
        results: dict[str, list] = {"one run into an empty warehouse": [], f"unchanged re-run of {args.runs} runs": [],
                                    f"{args.runs} runs + one new run": []}
        for rep in range(args.repeat):
            empty = scratch / f"empty-{rep}"
            results["one run into an empty warehouse"].append(run(newest, empty / "wh", empty / "rep"))
            results[f"unchanged re-run of {args.runs} runs"].append(run(runs, warehouse, report))
            shutil.rmtree(extra.parent, ignore_errors=True)
            shutil.copytree(newest, extra)
            manifest = json.loads((extra / "manifest.json").read_text())
            manifest.update(run_id=f"night-new-{rep}", created_at=f"2030-01-{1 + rep:02d}T02:00:00Z")
            (extra / "manifest.json").write_text(json.dumps(manifest))
            added = runs / f"night-new-{rep}"
            shutil.move(str(extra), str(added))
            results[f"{args.runs} runs + one new run"].append(run(runs, warehouse, report))
            shutil.rmtree(added)
            for name, measured in results.items():
                print(f"  [{rep + 1}/{args.repeat}] {name:40s} {measured[-1].wall_s:6.2f} s wall "
                      f"{measured[-1].cpu_s:6.2f} s cpu", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    base_wall = statistics.median(m.wall_s for m in results["one run into an empty warehouse"])
    base_cpu = statistics.median(m.cpu_s for m in results["one run into an empty warehouse"])
    lines = [f"### Growth: {args.runs} nightly runs of 315 cases committed, repeat {args.repeat}", "",
             "| job | wall s (median) | CPU s (median) | peak RSS MB | ÷ one run (wall) | ÷ one run (CPU) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, measured in results.items():
        wall = statistics.median(m.wall_s for m in measured)
        cpu = statistics.median(m.cpu_s for m in measured)
        rss = max(m.peak_rss_kb for m in measured) / 1024
        lines.append(f"| {name} | {wall:.2f} | {cpu:.2f} | {rss:,.0f} | {wall / base_wall:.2f} | {cpu / base_cpu:.2f} |")
    table = "\n".join(lines) + "\n"
    print("\n" + table)
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"growth-{args.runs}.md").write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
