"""Profile one `retrieval-eval run` with py-spy and say where its wall time goes.

    pip install py-spy
    python benchmarks/profile.py --cases 100000 --depth 20            # dataset made if missing
    python benchmarks/profile.py --cases 1000000 --depth 20 --memory  # where the RSS peak is

py-spy samples each Python thread 100 times a second, idle samples included, so each
thread's numbers add up to wall time: a DuckDB statement shows as the Python line that
runs it (its own worker threads are not sampled separately). A run's ingest and per-batch
work run in a worker thread while the main thread hashes the input and then waits, so the
summary has one table per thread. The raw stacks are kept in
benchmarks/work/profile/<name>.txt (flame-graph "collapsed" format); the summary prints
wall seconds per pipeline step and per hot source line of flows/ and transforms/, with
that line's text as it is when the profile ends.

With --memory, the run is not sampled for time: every 0.25 s its resident memory
(VmRSS, children included) is read and `py-spy dump` names the project line it is in;
the summary gives the largest RSS seen in each pipeline step and line.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from benchmarks.generate import SHAPES  # noqa: E402
from benchmarks.run import WORK, dataset_name, ensure_dataset  # noqa: E402

RATE = 100
OUTSIDE = "(no project frame: interpreter start-up, imports)"
OTHER = "(start-up, imports, argument parsing)"


def is_project(path: str) -> bool:
    return path.startswith(("flows/", "transforms/")) or "/flows/" in path or "/transforms/" in path


def step_label(frames: list[tuple[str, str]]) -> str:
    """'orchestrator > transform' for (function, path) frames given outermost first.

    The orchestrator is the innermost function of flows/ on the stack (the pipeline step
    that is running), the transform the first function of transforms/ it called.
    """
    flows_at = [i for i, (_, path) in enumerate(frames) if is_project(path) and "flows/" in path]
    if not flows_at:
        inside = [func for func, path in frames if is_project(path)]
        return inside[0] if inside else OTHER
    i = flows_at[-1]
    step = frames[i][0]
    below = [func for func, path in frames[i + 1:] if is_project(path)]
    if step in ("<module>",):
        return OTHER
    return f"{step} > {below[0]}" if below else step


def record(run_dir: Path, out: Path, scratch: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="profile-", dir=scratch))
    try:
        subprocess.run(
            [py_spy(), "record", "--idle", "--threads", "--format", "raw", "--rate", str(RATE), "-o", str(out), "--",
             sys.executable, "-m", "retrieval_eval", "run", str(run_dir),
             "--warehouse", str(base / "warehouse"), "--report-dir", str(base / "report")],
            check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def py_spy() -> str:
    return shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")


def tree_rss_kb(pid: int) -> int:
    """VmRSS of `pid` and its descendants, in KB (0 once it has exited)."""
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            with open(f"/proc/{current}/status", encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            with open(f"/proc/{current}/task/{current}/children", encoding="utf-8") as handle:
                pending += [int(child) for child in handle.read().split()]
        except (OSError, ValueError):
            continue
    return total


def where_now(pid: int) -> tuple[str, str]:
    """(pipeline step, innermost project line) the main thread of `pid` is in."""
    done = subprocess.run([py_spy(), "dump", "--json", "--pid", str(pid)], capture_output=True, text=True)
    try:
        threads = json.loads(done.stdout)
    except json.JSONDecodeError:
        return "?", "?"
    main = next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0] if threads else None)
    if not main:
        return "?", "?"
    frames = main["frames"]  # innermost first
    project = [f for f in frames if is_project(f["filename"])]
    line = f"{project[0]['name']} ({short_path(project[0]['filename'])}:{project[0]['line']})" if project else OUTSIDE
    return step_label([(f["name"], short_path(f["filename"])) for f in reversed(frames)]), line


def short_path(path: str) -> str:
    for folder in ("flows/", "transforms/"):
        at = path.rfind("/" + folder)
        if at >= 0:
            return path[at + 1:]
    return path


def memory_trace(run_dir: Path, scratch: Path, interval: float = 0.25) -> str:
    base = Path(tempfile.mkdtemp(prefix="memory-", dir=scratch))
    samples: list[tuple[float, int, str, str]] = []
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "retrieval_eval", "run", str(run_dir),
             "--warehouse", str(base / "warehouse"), "--report-dir", str(base / "report")],
            cwd=ROOT, stdout=subprocess.DEVNULL,
        )
        started = time.perf_counter()
        while proc.poll() is None:
            rss = tree_rss_kb(proc.pid)
            step, line = where_now(proc.pid)
            rss = max(rss, tree_rss_kb(proc.pid))
            samples.append((time.perf_counter() - started, rss, step, line))
            time.sleep(interval)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    peak_step: dict[str, int] = {}
    peak_line: dict[str, int] = {}
    for _, rss, step, line in samples:
        peak_step[step] = max(peak_step.get(step, 0), rss)
        peak_line[line] = max(peak_line.get(line, 0), rss)
    out = [f"{len(samples)} samples over {samples[-1][0] if samples else 0:.1f} s; "
           f"largest RSS sampled {max((s[1] for s in samples), default=0) / 1024:,.0f} MB", "",
           "| pipeline step | largest RSS sampled, MB |", "| --- | ---: |"]
    out += [f"| {k} | {v / 1024:,.0f} |" for k, v in sorted(peak_step.items(), key=lambda kv: -kv[1])]
    out += ["", "| project line | largest RSS sampled, MB |", "| --- | ---: |"]
    out += [f"| {k} | {v / 1024:,.0f} |" for k, v in sorted(peak_line.items(), key=lambda kv: -kv[1])[:12]]
    return "\n".join(out) + "\n"


def frame_parts(frame: str) -> tuple[str, str, int]:
    """'func (path/file.py:12)' → (func, path, line)."""
    func, _, where = frame.rpartition(" (")
    path, _, line = where.rstrip(")").rpartition(":")
    return func, path, int(line) if line.isdigit() else 0


def summarize(raw: Path, top: int = 15) -> str:
    """One table of pipeline steps and one of hot lines per sampled thread."""
    threads: dict[str, list[tuple[list[str], int]]] = collections.defaultdict(list)
    for text in raw.read_text(encoding="utf-8").splitlines():
        stack, _, count = text.rpartition(" ")
        thread, *frames = stack.split(";")
        name = thread.partition("): ")[2] or thread
        threads[name].append((frames[1:], int(count)))  # frames[0]: the process
    out = []
    for name, samples in sorted(threads.items(), key=lambda kv: -sum(n for _, n in kv[1])):
        out.append(f"### Thread {name}\n")
        out.append(_summarize_thread(samples, top))
    return "\n".join(out)


def _summarize_thread(samples: list[tuple[list[str], int]], top: int) -> str:
    total = 0
    by_line: collections.Counter[str] = collections.Counter()
    by_step: collections.Counter[str] = collections.Counter()
    for frames, n in samples:
        total += n
        project = [f for f in frames if frame_parts(f)[1].startswith(("flows/", "transforms/"))]
        by_line[project[-1] if project else OUTSIDE] += n
        by_step[step_label([frame_parts(f)[:2] for f in frames])] += n
    lines = [f"Wall time sampled: {total / RATE:.2f} s", "", "| pipeline step | wall s | share |",
             "| --- | ---: | ---: |"]
    for step, n in by_step.most_common():
        lines.append(f"| {step} | {n / RATE:.2f} | {100 * n / total:.0f}% |")
    lines += ["", "| hot line (innermost project frame) | source | wall s | share |", "| --- | --- | ---: | ---: |"]
    for frame, n in by_line.most_common(top):
        func, path, line = (frame, "", 0) if frame == OUTSIDE else frame_parts(frame)
        source = ""
        if line and (ROOT / path).is_file():
            all_lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
            if 0 < line <= len(all_lines):
                source = all_lines[line - 1].strip().replace("|", "\\|")[:90]
        where = f"{func} ({path}:{line})" if line else func
        lines.append(f"| {where} | `{source}` | {n / RATE:.2f} | {100 * n / total:.0f}% |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="py-spy profile of one retrieval-eval run")
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--shape", choices=tuple(SHAPES), default="standard",
                        help="the generator's artifact shape (benchmarks/generate.py)")
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--memory", action="store_true", help="trace resident memory per step instead")
    parser.add_argument("--raw", type=Path, help="summarize an existing raw profile instead of recording")
    args = parser.parse_args(argv)
    if args.raw:
        print(summarize(args.raw))
        return 0
    name = dataset_name(args.cases, args.depth, args.shape)
    run_dir = ensure_dataset(args.work / "data" / name, args.cases, args.depth, args.seed, shape=args.shape)
    if args.memory:
        (args.work / "scratch").mkdir(parents=True, exist_ok=True)
        print(memory_trace(run_dir, args.work / "scratch"))
        return 0
    out_dir = args.work / "profile"
    out_dir.mkdir(parents=True, exist_ok=True)
    (args.work / "scratch").mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{name}.txt"
    record(run_dir, out, args.work / "scratch")
    print(summarize(out))
    print(f"raw stacks: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
