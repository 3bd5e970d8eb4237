"""Before and after in one run: `retrieval-eval run` of another checkout (installed in a venv of
its own) and of this one, with pytrec_eval, timed in rounds that alternate their order, on one
dataset of benchmarks/run.py. Whole processes, as in run.py; medians.

    git worktree add /tmp/before <commit>
    python3 -m venv /tmp/before/.venv && /tmp/before/.venv/bin/pip install -e /tmp/before
    python benchmarks/paired.py --before /tmp/before --cases 100000 --depth 20 --rounds 6

Each install runs from its own checkout (its default KB, as for a user) into a fresh
warehouse; the table goes to stdout.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from benchmarks.generate import SHAPES  # noqa: E402
from benchmarks.run import (  # noqa: E402
    WORK,
    compile_project,
    dataset_name,
    ensure_dataset,
    ours_env,
    retrieval_eval_command,
    timed,
    tool_env,
    warm_page_cache,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout with its own .venv")
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--shape", choices=tuple(SHAPES), default="standard")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    run_dir = ensure_dataset(WORK / "data" / dataset_name(args.cases, args.depth, args.shape), args.cases, args.depth,
                             seed=7, shape=args.shape)
    compile_project()
    warm_page_cache(run_dir / "cases.jsonl")
    commands = {
        "before": ([str(args.before / ".venv" / "bin" / "retrieval-eval")], args.before.resolve()),
        "after": (retrieval_eval_command(), ROOT),
        "pytrec_eval": ([sys.executable, str(BENCH / "peers" / "pytrec_eval_script.py")], ROOT),
    }
    results: dict[str, list] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as scratch:
        for round_no in range(args.rounds):
            order = list(commands) if round_no % 2 == 0 else list(reversed(commands))
            for name in order:
                cmd, cwd = commands[name]
                if name == "pytrec_eval":
                    results[name].append(timed([*cmd, str(run_dir / "cases.jsonl")], cwd=cwd, env=tool_env()))
                    continue
                warehouse = Path(scratch) / "wh"
                shutil.rmtree(warehouse, ignore_errors=True)
                shutil.rmtree(Path(scratch) / "rep", ignore_errors=True)
                results[name].append(timed([*cmd, "run", str(run_dir), "--warehouse", str(warehouse), "--report-dir",
                                            str(Path(scratch) / "rep")], cwd=cwd, env=ours_env()))
    wall = {name: statistics.median(m.wall_s for m in runs) for name, runs in results.items()}
    cpu = {name: statistics.median(m.cpu_s for m in runs) for name, runs in results.items()}
    print(f"| {dataset_name(args.cases, args.depth, args.shape)}, {args.rounds} rounds | wall s (median) | each | "
          "CPU s (median) | peak RSS MB | ÷ pytrec_eval (wall) |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for name, runs in results.items():
        each = ", ".join(f"{m.wall_s:.2f}" for m in runs)
        print(f"| {name} | {wall[name]:.2f} | {each} | {cpu[name]:.2f} | {max(m.peak_rss_kb for m in runs) // 1024} | "
              f"{wall[name] / wall['pytrec_eval']:.2f} |")
    print(f"\nafter ÷ before: {wall['after'] / wall['before']:.2f} on wall time, {cpu['after'] / cpu['before']:.2f} on CPU time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
