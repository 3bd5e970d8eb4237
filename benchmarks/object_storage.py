"""What object storage costs `retrieval-eval run` (SPEC 14), against a real S3 API on loopback
(moto's server, started here on a free port), as whole processes timed like benchmarks/run.py:

1. 100k × 20 (generate.py's dataset) read from and written to S3 — `run s3://bench/big/runs
   --warehouse s3://bench/big/wh-… --report-dir LOCAL` — beside the same run all on local disk.
   Each S3 repeat gets a fresh `XDG_CACHE_HOME` (a fresh machine: no part cached); a third row
   runs it again with the cache the previous S3 run left (a warm machine). SPEC 14: S3 ≤ 1.5 ×
   local.
2. A warehouse on S3 holding N runs of 315 cases (growth.py's history, uploaded): an unchanged
   re-run of all N beside one run into an empty warehouse on S3, each on a fresh machine, and
   the re-run again with a warm cache. SPEC 14: the re-run ≤ 2 × one run, with no listing or
   read per committed run: the requests moto served during each job are counted from its log.

    python benchmarks/object_storage.py --repeat 3 --runs 300

Every job runs a copy of the package taken when the script starts (flows/, transforms/, sql/
and the compiled parser, put first on PYTHONPATH): a committed run is reused only while the
code that evaluated it is unchanged (flows/warehouse/evaluation_key.py), so in a tree that is
being edited an "unchanged re-run" would otherwise evaluate every run again.

Tables go to benchmarks/results/object-storage.md (`--no-write` to only print them). moto's
server is a loopback stand-in for a bucket, with no network between: these are ratios of our
own costs (requests, copies, hashing, waiting), plus the server's CPU on the same two cores
(given in its own column).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from benchmarks.growth import make_history  # noqa: E402
from benchmarks.run import (  # noqa: E402
    RESULTS,
    ToolResult,
    WORK,
    code_fingerprint,
    compile_project,
    dataset_name,
    ensure_dataset,
    machine,
    ours_env,
    retrieval_eval_command,
    timed,
    versions,
)
from retrieval_eval.flows.job.prefect_settings import free_port  # noqa: E402

BUCKET = "bench"
READY_SECONDS = 30
SPEC_BOUND_100K = 1.5
SPEC_BOUND_RERUN = 2.0
# One request line of werkzeug's access log, as moto's server writes it.
REQUEST_LINE = re.compile(r'"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/[\d.]+" (\d{3})')
# What varies between runs and objects in a request's key, folded so that requests group by kind.
KEY_VARIES = ((re.compile(r"night-[\w-]+"), "night-*"), (re.compile(r"\d{8}T\d{6}"), "*"),
              (re.compile(r"[0-9a-f]{8,}"), "*"), (re.compile(r"%3D"), "="), (re.compile(r"&.*$"), ""))


# --------------------------------------------------------------------------- the server


@dataclass(frozen=True)
class Server:
    endpoint: str
    pid: int

    def cpu_s(self) -> float:
        """The server process's CPU time so far (user + sys): what serving the jobs cost it, on
        the same two cores as the job."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def moto_server(log_path: Path) -> Iterator[Server]:
    """moto's S3 server on a free loopback port, its request log in `log_path`."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server_script = Path(sys.executable).with_name("moto_server")
    command = [str(server_script)] if server_script.exists() else [sys.executable, "-m", "moto.server"]
    with open(log_path, "wb") as log:
        server = subprocess.Popen([*command, "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                                  stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + READY_SECONDS
            while True:
                try:
                    urllib.request.urlopen(endpoint, timeout=1).close()
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"moto_server did not answer on {endpoint}; see {log_path}") from None
                    time.sleep(0.1)
            yield Server(endpoint, server.pid)
        finally:
            server.terminate()
            server.wait(timeout=10)


def s3_environment(endpoint: str) -> dict[str, str]:
    """The AWS variables a user's environment would give for this endpoint, and nothing from
    this machine's AWS config files."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull}


class RequestLog:
    """Counts what the server served since a mark (a byte offset in its log)."""

    def __init__(self, path: Path):
        self.path = path
        self.last_kinds: Counter = Counter()  # the last `since`'s requests by kind of key

    def mark(self) -> int:
        return self.path.stat().st_size

    def since(self, mark: int) -> Counter:
        with open(self.path, "rb") as handle:
            handle.seek(mark)
            text = handle.read().decode("utf-8", "replace")
        counts: Counter = Counter()
        kinds: Counter = Counter()
        for method, target, _status in REQUEST_LINE.findall(text):
            path, _, query = target.partition("?")
            is_bucket = path.strip("/").count("/") == 0
            if method == "GET" and is_bucket and ("list-type" in query or "prefix" in query):
                method, target = "LIST", query.replace("list-type=2&", "")
            counts[method] += 1
            for pattern, replacement in KEY_VARIES:
                target = pattern.sub(replacement, target)
            kinds[f"{method} {target}"] += 1
        self.last_kinds = kinds
        return counts


def frozen_package(folder: Path) -> Path:
    """A copy of the package as it is now, under `folder`/retrieval_eval (bytecode written);
    returns `folder`, the entry to put first on PYTHONPATH."""
    target = folder / "retrieval_eval"
    target.mkdir(parents=True)
    for name in ("__init__.py", "__main__.py"):
        shutil.copy2(ROOT / name, target / name)
    for name in ("flows", "transforms", "sql", "docs/schema"):
        shutil.copytree(ROOT / name, target / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(target)], check=True, stdout=subprocess.DEVNULL,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
    return folder


def put_files(folder: Path, uri: str) -> None:
    from retrieval_eval.flows.storage import open_store

    store, prefix = open_store(uri)
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        store.put(f"{prefix}/{path.relative_to(folder).as_posix()}", path, overwrite=True)


def upload(folder: Path, uri: str) -> None:
    """Every file below `folder` to the objects below `uri`, as an eval runner pushes them
    (through the project's store, so each object carries its checksum). In a process of its
    own: the put holds a whole file in memory, and a timed job forked from a parent that grew
    would report the parent's size as its peak RSS (ru_maxrss counts the fork before exec)."""
    process = multiprocessing.get_context("spawn").Process(target=put_files, args=(folder, uri))
    process.start()
    process.join()
    if process.exitcode != 0:
        raise RuntimeError(f"uploading {folder} to {uri} failed (exit {process.exitcode})")


# --------------------------------------------------------------------------- the jobs


@dataclass
class Job(ToolResult):
    """One timed job (`tool` names it) over its repeats, with the requests the server served
    and the server's CPU time during each."""

    requests: list[Counter] = field(default_factory=list)
    server_cpu_s: list[float] = field(default_factory=list)
    kinds: Counter = field(default_factory=Counter)  # the last repeat's requests by kind of key

    @property
    def name(self) -> str:
        return self.tool

    def median_requests(self, kind: str) -> float:
        return statistics.median(counts.get(kind, 0) for counts in self.requests)


def run_job(job: Job, runs: str, warehouse: str, report: Path, cache: Path, log: RequestLog, server: Server) -> None:
    """`retrieval-eval run RUNS --warehouse W --report-dir R`, with `cache` as XDG_CACHE_HOME
    (and the frozen package first on PYTHONPATH: os.environ carries it, see main)."""
    env = dict(ours_env(), XDG_CACHE_HOME=str(cache))
    cmd = [*retrieval_eval_command(), "run", runs, "--warehouse", warehouse, "--report-dir", str(report)]
    mark, server_before = log.mark(), server.cpu_s()
    job.runs.append(timed(cmd, cwd=ROOT, env=env))
    time.sleep(0.2)  # the server writes its log line after the response
    job.server_cpu_s.append(server.cpu_s() - server_before)
    job.requests.append(log.since(mark))
    job.kinds = log.last_kinds
    m = job.runs[-1]
    print(f"  {job.name:52s} {m.wall_s:6.2f} s wall {m.cpu_s:6.2f} s cpu {m.peak_rss_kb / 1024:6.0f} MB  "
          f"server {job.server_cpu_s[-1]:5.2f} s cpu  {dict(job.requests[-1])}", flush=True)


def fresh(scratch: Path, name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=scratch))


def big_run(cases: int, depth: int, repeat: int, scratch: Path, log: RequestLog, server: Server) -> list[Job]:
    """Section 1: the 100k run, local against S3 (cold and warm cache)."""
    name = dataset_name(cases, depth)
    run_dir = ensure_dataset(WORK / "data" / name, cases, depth, 7)
    runs_uri = f"s3://{BUCKET}/big/runs"
    started = time.perf_counter()
    upload(run_dir, f"{runs_uri}/{name}")
    print(f"uploaded {name} to {runs_uri} in {time.perf_counter() - started:.1f} s", flush=True)
    local, cold, warm = Job("all local"), Job("S3 in and out, fresh cache (fresh machine)"), \
        Job("S3 in and out, warm cache (the previous S3 run's)")
    for rep in range(repeat):
        order = [local, cold, warm] if rep % 2 == 0 else [cold, warm, local]
        cache = fresh(scratch, "cache")
        for job in order:
            if job is local:
                base = fresh(scratch, "local")
                run_job(local, str(run_dir), str(base / "wh"), base / "rep", fresh(scratch, "cache"), log, server)
            else:
                label = "cold" if job is cold else "warm"
                run_job(job, runs_uri, f"s3://{BUCKET}/big/wh-{label}-{rep}", fresh(scratch, "rep"), cache, log, server)
    return [local, cold, warm]


def history(n_runs: int, repeat: int, scratch: Path, log: RequestLog, server: Server) -> list[Job]:
    """Section 2: an unchanged re-run against a remote warehouse of `n_runs` runs."""
    folder = WORK / "data" / f"growth-{n_runs}"
    runs = make_history(folder, n_runs)
    runs_uri = f"s3://{BUCKET}/history/runs"
    warehouse = f"s3://{BUCKET}/history/wh"
    upload(runs, runs_uri)
    newest = sorted(runs.iterdir())[-1].name
    first = Job(f"commit of {n_runs} runs (untimed setup)")
    run_job(first, runs_uri, warehouse, fresh(scratch, "rep"), fresh(scratch, "cache"), log, server)
    one = Job("one run into an empty warehouse on S3, fresh cache")
    rerun = Job(f"unchanged re-run of {n_runs} runs, fresh cache")
    warm = Job(f"unchanged re-run of {n_runs} runs, warm cache")
    for rep in range(repeat):
        run_job(one, f"{runs_uri}/{newest}", f"s3://{BUCKET}/history/one-{rep}", fresh(scratch, "rep"),
                fresh(scratch, "cache"), log, server)
        cache = fresh(scratch, "cache")
        run_job(rerun, runs_uri, warehouse, fresh(scratch, "rep"), cache, log, server)
        run_job(warm, runs_uri, warehouse, fresh(scratch, "rep"), cache, log, server)
    return [one, rerun, warm]


# --------------------------------------------------------------------------- the tables


REQUEST_KINDS = ("LIST", "HEAD", "GET", "PUT", "POST", "DELETE")


def table(jobs: list[Job], base: Job, bound: float) -> list[str]:
    lines = ["| job | wall s (median) | wall s (each run) | CPU s (median) | peak RSS MB | ÷ first row (wall) "
             "| ÷ first row (CPU) | server CPU s (median) | requests served (median per job: " + ", ".join(REQUEST_KINDS)
             + ") |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for job in jobs:
        each = ", ".join(f"{m.wall_s:.2f}" for m in job.runs)
        requests = ", ".join(f"{job.median_requests(kind):g}" for kind in REQUEST_KINDS)
        lines.append(f"| {job.name} | {job.wall_s:.2f} | {each} | {job.cpu_s:.2f} | {job.peak_rss_mb:,.0f} "
                     f"| {job.wall_s / base.wall_s:.2f} | {job.cpu_s / base.cpu_s:.2f} "
                     f"| {statistics.median(job.server_cpu_s):.2f} | {requests} |")
    lines.append("")
    for job in jobs[1:]:
        ratio = job.wall_s / base.wall_s
        lines.append(f"- {job.name} ÷ {base.name} = {ratio:.2f} on median wall time "
                     f"(SPEC 14: ≤ {bound:g}: {'met' if ratio <= bound else 'NOT met'}), "
                     f"{job.cpu_s / base.cpu_s:.2f} on CPU time")
    return lines


def request_kinds(jobs: list[Job], top: int = 12) -> list[str]:
    """Each job's requests in its last repeat, grouped by kind of key (run ids, timestamps and
    digests folded to *), the most frequent first."""
    lines = []
    for job in jobs:
        lines += [f"Requests of *{job.name}* (last repeat), by kind:", "", "| requests | kind |", "| ---: | --- |"]
        lines += [f"| {n} | `{kind}` |" for kind, n in job.kinds.most_common(top)]
        rest = sum(job.kinds.values()) - sum(n for _, n in job.kinds.most_common(top))
        lines += [f"| {rest} | (other kinds) |"] if rest else []
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=("big", "history"), help="one section only")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    compile_project()
    WORK.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="object-storage-", dir=WORK))
    sections: list[str] = []
    try:
        package = frozen_package(scratch / "code")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH")]))
        code = code_fingerprint(package / "retrieval_eval")
        with moto_server(scratch / "moto.log") as server:
            endpoint = server.endpoint
            os.environ.update(s3_environment(endpoint))
            for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL_S3"):
                os.environ.pop(name, None)
            urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT"), timeout=10).close()
            log = RequestLog(scratch / "moto.log")
            if args.only in (None, "big"):
                jobs = big_run(args.cases, args.depth, args.repeat, scratch, log, server)
                sections += [f"### {args.cases:,} cases × {args.depth} chunks: local disk against the loopback S3, "
                             f"repeat {args.repeat}", "", *table(jobs, jobs[0], SPEC_BOUND_100K), ""]
            if args.only in (None, "history"):
                jobs = history(args.runs, args.repeat, scratch, log, server)
                sections += [f"### A warehouse on the loopback S3 holding {args.runs} runs of 315 cases, "
                             f"repeat {args.repeat}", "", *table(jobs, jobs[0], SPEC_BOUND_RERUN), "",
                             *request_kinds(jobs)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    header = ["## Object storage (SPEC 14): `retrieval-eval run` against moto's S3 server on loopback", "",
              f"Machine: {machine()}. {versions()}. Measured {time.strftime('%Y-%m-%d %H:%M %Z')}; "
              f"load average after the runs {load}.", "",
              f"Project code fingerprint (flows/, transforms/, sql/): {code}, a copy taken when the script "
              f"started (benchmarks/object_storage.py: `frozen_package`).", ""]
    markdown = "\n".join(header + sections)
    print("\n" + markdown)
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "object-storage.md").write_text(markdown, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
