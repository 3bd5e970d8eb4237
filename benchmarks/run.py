"""Time `retrieval-eval run` against peer tools on one synthetic dataset, whole processes.

    python benchmarks/run.py --cases 100000 --depth 20 --repeat 3            # + --with-ranx
    python benchmarks/run.py --cases 1000000 --depth 20 --repeat 1 --only retrieval-eval,duckdb-floor
    python benchmarks/run.py --sample --repeat 5                               # committed sample

The dataset (a run folder written by benchmarks/generate.py) lives under
benchmarks/work/data/<name>/ and is generated when missing; <name> defaults to
bench-<cases>-d<depth>, e.g. bench-100k-d20. Each tool is one whole process, timed from
spawn to exit with os.wait4: wall seconds, CPU seconds (user + sys) and peak RSS (the
kernel's ru_maxrss of the process and any children it waited for). The tools run in
turn, each repeat rotating the order, so that a noisy neighbour or a warming cache
does not favour one tool; the cases file is read once beforehand so every tool finds it
in the page cache. Medians are reported; peak RSS is the largest seen.

Tools (see benchmarks/README.md):
- retrieval-eval: `retrieval-eval run RUN --warehouse FRESH --report-dir FRESH`, stdout
  to /dev/null, cwd = the repository (so the default --kb, data/kb/cards.jsonl, is read),
  PREFECT_API_URL unset (the in-process path): validation, warehouse, catalog, report
  and charts included.
- pytrec_eval: benchmarks/peers/pytrec_eval_script.py (json per line + pytrec_eval).
- ranx, ranx-cold (only with --with-ranx): benchmarks/peers/ranx_script.py with numba's
  cache warm, and with an empty cache (numba compiles ranx's kernels in the process).
- duckdb-floor: benchmarks/peers/duckdb_floor.py, bare DuckDB hit@10: the floor.

After timing, each tool's printed means (for retrieval-eval: its aggregates, read back
with `retrieval-eval query`) are compared, so a fast wrong answer shows up.

The table is printed as markdown and written to benchmarks/results/<name>.md.

From a test (a few seconds; nothing is written outside `work_dir`):

    from benchmarks.run import run_harness
    rows = run_harness(cases=200, depth=5, repeat=1, work_dir=tmp_path)
    # rows: list[ToolResult]; each has .tool, .wall_s (median), .peak_rss_mb, .metrics, ...
    # run_sample(repeat=1, work_dir=tmp_path) times the committed sample the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from benchmarks.generate import SHAPES, generate  # noqa: E402


def code_fingerprint(root: Path = ROOT) -> str:
    """A short hash of the project's code as it is on disk now (flows/, transforms/, sql/ under
    `root`, their subpackages and C sources included): a table whose code changed while it
    was measured says so."""
    import hashlib

    digest = hashlib.sha256()
    for folder, pattern in (("flows", "**/*.py"), ("flows", "**/*.c"), ("transforms", "**/*.py"),
                            ("transforms", "**/*.c"), ("sql", "**/*.sql")):
        for path in sorted((root / folder).glob(pattern)):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


WORK = BENCH / "work"
RESULTS = BENCH / "results"
PEERS = BENCH / "peers"
SAMPLE_RUNS = ROOT / "data" / "runs"
K = 10

OURS, PYTREC, RANX, RANX_COLD, FLOOR = "retrieval-eval", "pytrec_eval", "ranx", "ranx-cold", "duckdb-floor"
ALL_TOOLS = (OURS, PYTREC, RANX, RANX_COLD, FLOOR)
DEFAULT_TOOLS = (OURS, PYTREC, FLOOR)
OUR_METRICS = {"hit_at_k": "hit@10", "recall_at_k": "recall@10", "ndcg_at_k": "ndcg@10", "precision_at_k": "P@10"}
METRIC_NAMES = ("hit@10", "recall@10", "ndcg@10", "P@10")
TARGETS = {"ours/pytrec_eval": 0.5, "ours/floor": 4.0, "sample_s": 3.0, "rss_1m_mb": 2048.0}
TARGET_CASES = 100_000  # SPEC 9 sets the two ratios at 100k cases; other sizes print them without a verdict


@dataclass
class Measurement:
    wall_s: float
    cpu_s: float
    peak_rss_kb: int


@dataclass
class ToolResult:
    tool: str
    runs: list[Measurement] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def wall_s(self) -> float:
        return statistics.median(m.wall_s for m in self.runs)

    @property
    def min_wall_s(self) -> float:
        return min(m.wall_s for m in self.runs)

    @property
    def cpu_s(self) -> float:
        return statistics.median(m.cpu_s for m in self.runs)

    @property
    def peak_rss_mb(self) -> float:
        return max(m.peak_rss_kb for m in self.runs) / 1024

    def as_dict(self) -> dict:
        return {**asdict(self), "wall_s": self.wall_s, "min_wall_s": self.min_wall_s, "cpu_s": self.cpu_s, "peak_rss_mb": self.peak_rss_mb}


class ToolFailed(RuntimeError):
    pass


# --------------------------------------------------------------------------- processes


def retrieval_eval_command() -> list[str]:
    exe = Path(sys.executable).parent / "retrieval-eval"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("retrieval-eval")
    return [found] if found else [sys.executable, "-m", "retrieval_eval"]


def timed(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None,
          stdout_path: Path | None = None) -> Measurement:
    """Run `cmd` to completion; its wall time, CPU time and peak RSS (children included)."""
    err_file = tempfile.TemporaryFile()
    out = open(stdout_path, "wb") if stdout_path else open(os.devnull, "wb")
    try:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err_file)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err_file.seek(0)
            tail = err_file.read().decode("utf-8", "replace")[-3000:]
            raise ToolFailed(f"{' '.join(cmd)} exited {proc.returncode}:\n{tail}")
        return Measurement(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)
    finally:
        out.close()
        err_file.close()


def tool_env() -> dict[str, str]:
    """The environment of every timed tool: this one, with bytecode caching on. A package
    installed from a wheel has its modules compiled at install time; an editable install
    under PYTHONDONTWRITEBYTECODE=1 (as on this machine) would compile the project's ~60
    modules in every timed process (~0.15 s), a cost no user pays twice."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def ours_env() -> dict[str, str]:
    """The environment of a timed `retrieval-eval run`: the plain in-process path.

    PREFECT_API_URL would turn the run into a tracked Prefect flow run; that is another
    configuration, not timed here.
    """
    return {key: value for key, value in tool_env().items() if key != "PREFECT_API_URL"}


def compile_project() -> None:
    """Write the project's bytecode before anything is timed (see `tool_env`)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", r"[/\\](\.venv|benchmarks[/\\]work)[/\\]",
                    str(ROOT)], check=True, env=tool_env(), stdout=subprocess.DEVNULL)


def parse_means(text: str) -> dict[str, float]:
    means = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                means[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return means


def our_means(warehouse: Path, k: int = K) -> dict[str, float]:
    sql = "select metric, mean, n, k from aggregates where slice = 'all'"  # `query` takes no parameters
    out = subprocess.run(
        [*retrieval_eval_command(), "query", sql, "--warehouse", str(warehouse), "--format", "json"],
        check=True, capture_output=True, text=True, cwd=ROOT,
    ).stdout
    rows = [row for row in json.loads(out) if row["k"] == k]
    means = {OUR_METRICS[r["metric"]]: r["mean"] for r in rows if r["metric"] in OUR_METRICS}
    if rows:
        means["cases"] = float(rows[0]["n"])
    return means


class Runner:
    """Runs one tool once; keeps what it printed for the agreement check."""

    def __init__(self, tool: str, run_dir: Path, scratch: Path):
        self.tool = tool
        self.run_dir = run_dir
        self.cases = run_dir / "cases.jsonl"
        self.scratch = scratch
        self.numba_warm = scratch / "numba-cache-warm"

    def __call__(self, result: ToolResult, keep_output: bool) -> None:
        env = tool_env()
        if self.tool == OURS:
            env = ours_env()
            base = Path(tempfile.mkdtemp(prefix="ours-", dir=self.scratch))
            wh, rep = base / "warehouse", base / "report"
            cmd = [*retrieval_eval_command(), "run", str(self.run_dir), "--warehouse", str(wh),
                   "--report-dir", str(rep)]
            try:
                result.runs.append(timed(cmd, cwd=ROOT, env=env))
                if keep_output:
                    result.metrics = our_means(wh)
            finally:
                shutil.rmtree(base, ignore_errors=True)
            return
        script = {PYTREC: "pytrec_eval_script.py", RANX: "ranx_script.py", RANX_COLD: "ranx_script.py",
                  FLOOR: "duckdb_floor.py"}[self.tool]
        cold_cache = None
        if self.tool == RANX:
            env["NUMBA_CACHE_DIR"] = str(self.numba_warm)
        elif self.tool == RANX_COLD:
            cold_cache = Path(tempfile.mkdtemp(prefix="numba-cold-", dir=self.scratch))
            env["NUMBA_CACHE_DIR"] = str(cold_cache)
        out_path = self.scratch / f"{self.tool}.out"
        try:
            result.runs.append(timed([sys.executable, str(PEERS / script), str(self.cases)],
                                     cwd=ROOT, env=env, stdout_path=out_path))
            if keep_output:
                result.metrics = parse_means(out_path.read_text(encoding="utf-8"))
        finally:
            out_path.unlink(missing_ok=True)
            if cold_cache is not None:
                shutil.rmtree(cold_cache, ignore_errors=True)

    def warm_up(self, tiny_cases: Path) -> None:
        """Fill numba's cache for the `ranx` tool (untimed), so that it measures a warm start."""
        if self.tool == RANX:
            env = dict(os.environ, NUMBA_CACHE_DIR=str(self.numba_warm))
            timed([sys.executable, str(PEERS / "ranx_script.py"), str(tiny_cases)], cwd=ROOT, env=env)


# --------------------------------------------------------------------------- harness


def dataset_name(cases: int, depth: int, shape: str = "standard") -> str:
    def short(n: int) -> str:
        for div, suffix in ((1_000_000, "m"), (1_000, "k")):
            if n >= div and n % div == 0:
                return f"{n // div}{suffix}"
        return str(n)

    return f"bench-{short(cases)}-d{depth}" + ("" if shape == "standard" else f"-{shape}")


def ensure_dataset(run_dir: Path, cases: int, depth: int, seed: int, log=print, shape: str = "standard") -> Path:
    manifest = run_dir / "manifest.json"
    if manifest.exists() and (run_dir / "cases.jsonl").exists():
        config = json.loads(manifest.read_text(encoding="utf-8")).get("config", {})
        if (config.get("cases"), config.get("depth"), config.get("seed"), config.get("shape", "standard")) == (
                cases, depth, seed, shape):
            return run_dir
    log(f"generating {run_dir} ({cases} cases x {depth} chunks, seed {seed}, {shape}) ...")
    started = time.perf_counter()
    generate(cases, depth, run_dir, seed, shape=shape)
    log(f"  done in {time.perf_counter() - started:.1f} s")
    return run_dir


def warm_page_cache(path: Path) -> None:
    with open(path, "rb") as handle:
        while handle.read(64 << 20):
            pass


def time_tools(tools: list[str], run_dir: Path, repeat: int, scratch: Path, log=print) -> list[ToolResult]:
    runners = [Runner(tool, run_dir, scratch) for tool in tools]
    results = {tool: ToolResult(tool) for tool in tools}
    if RANX in tools:
        tiny = scratch / "tiny-run"
        generate(50, 5, tiny, seed=1, processes=1)
        for runner in runners:
            runner.warm_up(tiny / "cases.jsonl")
    warm_page_cache(run_dir / "cases.jsonl")
    for rep in range(repeat):
        order = runners[rep % len(runners):] + runners[: rep % len(runners)]
        for runner in order:
            runner(results[runner.tool], keep_output=rep == repeat - 1)
            m = results[runner.tool].runs[-1]
            log(f"  [{rep + 1}/{repeat}] {runner.tool:15s} {m.wall_s:7.2f} s wall "
                f"{m.cpu_s:7.2f} s cpu {m.peak_rss_kb / 1024:7.0f} MB")
    return [results[tool] for tool in tools]


def run_harness(
    cases: int = 200,
    depth: int = 5,
    *,
    repeat: int = 1,
    seed: int = 7,
    tools: list[str] | tuple[str, ...] | None = None,
    with_ranx: bool = False,
    name: str | None = None,
    work_dir: Path = WORK,
    results_dir: Path | None = None,
    log=None,
    shape: str = "standard",
) -> list[ToolResult]:
    """Generate (if missing) and time every tool on one dataset; returns one row per tool.

    The markdown table goes to `results_dir`/<name>.md when `results_dir` is given.
    """
    log = log or (lambda *a, **k: None)
    tools = list(tools or (DEFAULT_TOOLS if not with_ranx else (OURS, PYTREC, RANX, RANX_COLD, FLOOR)))
    unknown = set(tools) - set(ALL_TOOLS)
    if unknown:
        raise ValueError(f"unknown tools {sorted(unknown)}; choose from {ALL_TOOLS}")
    name = name or dataset_name(cases, depth, shape)
    work_dir = Path(work_dir)
    run_dir = ensure_dataset(work_dir / "data" / name, cases, depth, seed, log, shape)
    (work_dir / "scratch").mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench-", dir=work_dir / "scratch"))
    code_before = code_fingerprint()
    try:
        rows = time_tools(tools, run_dir, repeat, scratch, log)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    note = code_note(code_before, code_fingerprint())
    size_mb = (run_dir / "cases.jsonl").stat().st_size / 1e6
    size = f"{size_mb:,.0f} MB" if size_mb >= 10 else f"{size_mb:.2f} MB"
    title = f"{name}: {cases:,} cases x {depth} chunks ({size}, {shape} shape), repeat {repeat}"
    markdown = render_markdown(title, rows, agreement=True, note=note, judged=cases == TARGET_CASES)
    log("\n" + markdown)
    if results_dir is not None:
        Path(results_dir).mkdir(parents=True, exist_ok=True)
        (Path(results_dir) / f"{name}.md").write_text(markdown, encoding="utf-8")
    return rows


def run_sample(repeat: int = 3, *, work_dir: Path = WORK, results_dir: Path | None = None,
               log=None) -> list[ToolResult]:
    """Time `retrieval-eval run` on the committed sample (data/runs), cwd = the repository."""
    log = log or (lambda *a, **k: None)
    (Path(work_dir) / "scratch").mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="sample-", dir=Path(work_dir) / "scratch"))
    result = ToolResult(OURS)
    code_before = code_fingerprint()
    try:
        for rep in range(repeat):
            base = Path(tempfile.mkdtemp(prefix="ours-", dir=scratch))
            cmd = [*retrieval_eval_command(), "run", str(SAMPLE_RUNS.relative_to(ROOT)),
                   "--warehouse", str(base / "warehouse"), "--report-dir", str(base / "report")]
            result.runs.append(timed(cmd, cwd=ROOT, env=ours_env()))
            m = result.runs[-1]
            log(f"  [{rep + 1}/{repeat}] sample {m.wall_s:6.2f} s wall {m.cpu_s:6.2f} s cpu "
                f"{m.peak_rss_kb / 1024:5.0f} MB")
            shutil.rmtree(base, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    n_lines = sum(1 for f in SAMPLE_RUNS.glob("*/cases.jsonl") for _ in open(f, "rb"))
    title = f"sample: data/runs ({len(list(SAMPLE_RUNS.glob('*/manifest.json')))} runs, {n_lines} cases), repeat {repeat}"
    markdown = render_markdown(title, [result], agreement=False,
                               note=code_note(code_before, code_fingerprint()))
    verdict = "met" if result.wall_s <= TARGETS["sample_s"] else "NOT met"
    markdown += f"\nTarget: sample <= {TARGETS['sample_s']:g} s — {verdict} (median {result.wall_s:.2f} s).\n"
    log("\n" + markdown)
    if results_dir is not None:
        Path(results_dir).mkdir(parents=True, exist_ok=True)
        (Path(results_dir) / "sample.md").write_text(markdown, encoding="utf-8")
    return [result]


# --------------------------------------------------------------------------- report


def code_note(before: str, after: str) -> str:
    if before == after:
        return f"Project code fingerprint (flows/, transforms/, sql/): {before}."
    return (f"Project code fingerprint (flows/, transforms/, sql/): {before} at the start, {after} at the "
            f"end: **the code changed while this was measured**, so the runs are of more than one version.")


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = ""
    try:
        for line in open("/proc/meminfo", encoding="utf-8"):
            if line.startswith("MemTotal"):
                ram = f", {int(line.split()[1]) / 1024 / 1024:.1f} GiB RAM"
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({cpu}){ram}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ("retrieval-eval", "duckdb", "polars", "pytrec-eval-terrier", "ranx", "numba"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            pass
    return ", ".join(found)


def render_markdown(title: str, rows: list[ToolResult], *, agreement: bool, note: str = "",
                    judged: bool = True) -> str:
    by_tool = {row.tool: row for row in rows}
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        f"### {title}",
        "",
        f"Machine: {machine()}. {versions()}. Measured {time.strftime('%Y-%m-%d %H:%M %Z')}; "
        f"load average after the runs {load}.",
        "",
        *([note, ""] if note else []),
        "| tool | wall s (median) | wall s (min) | wall s (each run) | CPU s (median) | peak RSS MB "
        "| ours ÷ tool, wall | ours ÷ tool, CPU |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    ours = by_tool.get(OURS)
    for row in rows:
        each = ", ".join(f"{m.wall_s:.2f}" for m in row.runs)
        wall_ratio = f"{ours.wall_s / row.wall_s:.2f}" if ours and row is not ours else ""
        cpu_ratio = f"{ours.cpu_s / row.cpu_s:.2f}" if ours and row is not ours else ""
        lines.append(
            f"| {row.tool} | {row.wall_s:.2f} | {row.min_wall_s:.2f} | {each} | {row.cpu_s:.2f} "
            f"| {row.peak_rss_mb:,.0f} | {wall_ratio} | {cpu_ratio} |"
        )
    lines.append("")
    if ours:
        for peer, key in ((PYTREC, "ours/pytrec_eval"), (FLOOR, "ours/floor")):
            if peer in by_tool:
                other = by_tool[peer]
                ratio = ours.wall_s / other.wall_s
                verdict = "met" if ratio <= TARGETS[key] else "NOT met"
                target = (f"target <= {TARGETS[key]:g}: {verdict}" if judged
                          else f"SPEC 9 sets its target at {TARGET_CASES:,} cases")
                lines.append(
                    f"- {key} = {ratio:.2f} on median wall time ({target}); "
                    f"{ours.min_wall_s / other.min_wall_s:.2f} on best wall time, "
                    f"{ours.cpu_s / other.cpu_s:.2f} on CPU time"
                )
        lines.append("")
    if agreement:
        lines += [
            "Means over labelled cases printed by each tool (k = 10), from the last repeat:",
            "",
            "| tool | cases | " + " | ".join(METRIC_NAMES) + " |",
            "| --- | ---: | " + " | ".join("---:" for _ in METRIC_NAMES) + " |",
        ]
        for row in rows:
            cells = [f"{row.metrics[m]:.6f}" if m in row.metrics else "–" for m in METRIC_NAMES]
            n = f"{row.metrics['cases']:,.0f}" if "cases" in row.metrics else "–"
            lines.append(f"| {row.tool} | {n} | " + " | ".join(cells) + " |")
        worst = max_disagreement(rows)
        lines += ["", f"Largest difference between tools on a shared metric: {worst:.2e}.", ""]
    return "\n".join(lines)


def max_disagreement(rows: list[ToolResult]) -> float:
    worst = 0.0
    for name in (*METRIC_NAMES, "cases"):
        values = [row.metrics[name] for row in rows if name in row.metrics]
        if len(values) > 1:
            worst = max(worst, max(values) - min(values))
    return worst


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time retrieval-eval against peer tools, whole processes.")
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dataset", help="dataset name (default bench-<cases>-d<depth>[-<shape>])")
    parser.add_argument("--shape", choices=tuple(SHAPES), default="standard",
                        help="the generator's artifact shape (benchmarks/generate.py)")
    parser.add_argument("--with-ranx", action="store_true", help="also time ranx (warm and cold numba cache)")
    parser.add_argument("--only", help=f"comma-separated tools, from {','.join(ALL_TOOLS)}")
    parser.add_argument("--sample", action="store_true", help="time retrieval-eval on the committed sample only")
    parser.add_argument("--work", type=Path, default=WORK, help="data and scratch folder")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where <name>.md is written")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    results_dir = None if args.no_write else args.results
    log = lambda *a: print(*a, flush=True)  # noqa: E731
    compile_project()
    if args.sample:
        run_sample(args.repeat, work_dir=args.work, results_dir=results_dir, log=log)
        return 0
    tools = [t.strip() for t in args.only.split(",")] if args.only else None
    try:
        run_harness(args.cases, args.depth, repeat=args.repeat, seed=args.seed, tools=tools,
                    with_ranx=args.with_ranx, name=args.dataset, work_dir=args.work,
                    results_dir=results_dir, log=log, shape=args.shape)
    except ToolFailed as error:
        print(f"benchmark failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
