"""The `retrieval-eval` command: a thin layer over flows/ (SPEC 5).

Exit codes (flows/commands/exit_codes.py, one table): 0 ok, 1 a gate or check failed, 2 bad
input or usage (a message naming file, line and field; never a traceback for a user's mistake),
130 / 143 interrupted, 141 a closed pipe.
"""

from __future__ import annotations

import signal
import sys

# The signal that interrupted the command, if any: an engine that meets the signal inside a
# query raises its own error ("Query interrupted") instead of ours.
_received: list[int] = []


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every `finally` runs (a transaction
    removes its uncommitted files) before the command ends with 143."""


# Code that is also called from native code and cannot take an exception there: Polars
# builds a frame's dtypes by calling Python from Rust, and an exception raised there panics
# (printing a Rust backtrace); an import that an extension makes from C runs importlib's
# bootstrap, and the C caller prints the exception as a traceback and carries on. (DuckDB and
# Arrow turn one into an error of theirs, which `main` reads as the interrupt.) A signal that
# lands with such a frame on the main thread's stack is raised DEFER_S later, when the thread
# has left it (at most MAX_DEFERRALS times: then it is raised wherever the thread stands).
ENGINE_PACKAGES = frozenset({"polars"})
# importlib's bootstrap by both its names (the frozen one until `importlib` is imported)
IMPORT_MACHINERY = frozenset({"_frozen_importlib", "_frozen_importlib_external",
                              "importlib._bootstrap", "importlib._bootstrap_external"})
DEFER_S, MAX_DEFERRALS = 0.02, 100
_deferrals: list[None] = []
_raised: list[None] = []  # the interrupt was raised or reported


def _on_signal(signum, frame) -> None:
    # Raised once: a second signal (or the one an engine delivers again after it stopped its
    # query) must not cut the cleanup the first one started; while the first is deferred, a
    # second one (or the first, replayed by interrupts_deferred) tries again.
    _received.append(signum)
    if not _raised:
        _deliver(frame)


def _on_alarm(_signum, frame) -> None:
    if _received and not _raised:
        _deliver(frame)


def _deliver(frame) -> None:
    if len(_deferrals) < MAX_DEFERRALS and _in_engine_code(frame):
        _deferrals.append(None)
        signal.setitimer(signal.ITIMER_REAL, DEFER_S)  # SIGALRM: _on_alarm tries again
        return
    _raised.append(None)
    raise KeyboardInterrupt if _received[0] == signal.SIGINT else Terminated


def _in_engine_code(frame) -> bool:
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module in IMPORT_MACHINERY or module.partition(".")[0] in ENGINE_PACKAGES:
            return True
        frame = frame.f_back
    return False


import argparse  # noqa: E402
import errno  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

from ... import __version__  # noqa: E402
from ..inputs import config  # noqa: E402
from ..inputs.options import add_arguments, bounded, fraction, location_argument, positive_int, significance_level  # noqa: E402
from ..storage.interrupts import import_engines  # noqa: E402
from .collector import imports_done  # noqa: E402
from .exit_codes import (  # noqa: E402
    EXIT_CLOSED_PIPE,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    error_exit,
    interrupted_line,
)


METRIC_CHOICES = ("hit_at_k", "recall_at_k", "ndcg_at_k", "precision_at_k", "reciprocal_rank_at_k")
GATED_DEFAULT = ("hit_at_k", "recall_at_k", "ndcg_at_k")
SLICE_CHOICES = ("all", "locale", "category", "locale_category")


def parse_names(allowed: tuple[str, ...]):
    """An argparse type: a comma-separated list of names, each one of `allowed`."""

    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",")]
        unknown = [name for name in names if name not in allowed]  # an empty item among them
        if not names or unknown:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(allowed)}, got {text!r}")
        return list(dict.fromkeys(names))

    return parse


non_negative = bounded(float, 0.0, 10_000.0, "a number of days >= 0")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none to show; a list of names as the
    comma-separated text the option takes."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False, (), argparse.SUPPRESS) or "%(default)" in (action.help or ""):
            return action.help or ""
        if isinstance(action.default, list | tuple):
            shown = ",".join(str(item) for item in action.default).replace("%", "%%")
            return f"{action.help or ''} (default: {shown})"
        return super()._get_help_string(action)


def add_orchestration_arguments(parser: argparse.ArgumentParser, tracked_flag: bool = True) -> None:
    if tracked_flag:
        parser.add_argument("--prefect", action="store_true",
                            help="a tracked Prefect flow run (also when PREFECT_API_URL is set)")
    parser.add_argument("--task-runner", choices=("thread", "dask"), default="thread",
                        help="where a tracked run's tasks run")
    parser.add_argument("--dask-address", help="scheduler of an existing Dask cluster (implies --task-runner dask)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retrieval-eval", description="Retrieval-only quality figures from stored RAG eval artifacts.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"retrieval-eval {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str, handler) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text, formatter_class=HelpFormatter)
        sub.set_defaults(handler=handler)
        return sub

    run = command("run", "ingest runs, compute metrics, write the warehouse and the report", cmd_run)
    add_arguments(run, "run", ["runs", "source"])
    run.add_argument("--trec-run", type=location_argument, metavar="FILE",
                     help="evaluate a TREC run file (qid Q0 docno rank score tag) in place of RUNS: the same as "
                          "--source trec FILE; needs --qrels")
    add_arguments(run, "run", ["qrels", "run_id"])
    add_arguments(run, "run", ["kb", "warehouse", "report_dir", "k", "ks", "relevance_level"])
    run.add_argument("--json", action="store_true", help="print the aggregates as JSON instead of the report "
                     "(with --baseline, the gate's verdict too, under \"gate\")")
    run.add_argument("--quiet", action="store_true",
                     help="print only the report's file names (with --baseline, and the gate's one-line verdict)")
    add_arguments(run, "run", ["allow_rejects", "baseline", "tolerance", "locale_tolerance", "min_hit", "min_recall",
                               "allow_missing_cases", "decision", "alpha"])
    add_orchestration_arguments(run)

    serve = command("serve", "serve the nightly Prefect deployment (cron) until interrupted", cmd_serve)
    add_arguments(serve, "serve")  # RUNS and every option of `run`, as each night's run takes them
    serve.add_argument("--cron", default=config.NIGHTLY_CRON, help="schedule, cron syntax (UTC)")
    serve.add_argument("--crash-after", type=bounded(float, 30.0, 86_400.0, "seconds in [30, 86400]"), default=90.0,
                       help="a served flow run whose heartbeats stop this long (its process was killed) is marked "
                            "Crashed, and frees the deployment's concurrency slot")
    add_orchestration_arguments(serve, tracked_flag=False)

    check = command("check-kb", "every gold id resolves to a KB card (exit 1 if not)", cmd_check_kb)
    check.add_argument("runs", nargs="?", type=location_argument, default=config.RUNS)
    check.add_argument("--kb", type=location_argument, default=config.KB)

    gate = command("gate", "regression tolerance of a run against a baseline snapshot", cmd_gate)
    gate.add_argument("run_id")
    add_arguments(gate, "gate")
    gate.add_argument("--format", choices=("table", "markdown", "json"), default="table",
                      help="markdown fits a CI job summary or a pull-request comment; json is for CI to post")

    baseline = command("baseline", "the committed baseline snapshot", None)
    baseline_commands = baseline.add_subparsers(dest="baseline_command", required=True)
    refresh = baseline_commands.add_parser("refresh", help="write the snapshot of a run", formatter_class=HelpFormatter)
    refresh.add_argument("run_id")
    refresh.add_argument("--out", default=str(config.BASELINE),
                         help="the snapshot file to write (a path, or a URI: s3://bucket/baseline.json)")
    add_arguments(refresh, "baseline refresh")
    refresh.set_defaults(handler=cmd_baseline_refresh)
    floors = baseline_commands.add_parser("floors", help="suggest --min-hit/--min-recall from the baseline",
                                          formatter_class=HelpFormatter)
    add_arguments(floors, "baseline floors")
    floors.add_argument("--margin", type=fraction, default=0.05, help="distance under the observed figure")
    floors.set_defaults(handler=cmd_baseline_floors)

    query = command("query", "one read-only SQL statement over the warehouse views", cmd_query)
    query.add_argument("sql")
    query.add_argument("--format", choices=("table", "csv", "json"), default="table",
                       help="how the rows are printed; json is an array of row objects")
    add_arguments(query, "query")

    warehouse = command("warehouse", "integrity of the warehouse: check, rebuild, vacuum", None)
    warehouse_commands = warehouse.add_subparsers(dest="warehouse_command", required=True)
    for name, help_text, handler in (
        ("check", "verify every committed part against the log (exit 1 if any differs)", cmd_warehouse_check),
        ("rebuild", "make catalog.duckdb again from the transaction log", cmd_warehouse_rebuild),
        ("vacuum", "delete files that commits superseded, past the retention", cmd_warehouse_vacuum),
    ):
        sub = warehouse_commands.add_parser(name, help=help_text, description=help_text, formatter_class=HelpFormatter)
        add_arguments(sub, f"warehouse {name}")
        sub.set_defaults(handler=handler)
        if name == "vacuum":
            sub.add_argument("--retention-days", type=non_negative, default=config.RETENTION_DAYS,
                             help="keep superseded files this long (a reader may still be reading them)")

    compare = command("compare", "paired comparison of runs against a reference, per slice and metric", cmd_compare)
    compare.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    compare.add_argument("--reference", help="the run the others are compared with (default: the oldest given)")
    compare.add_argument("--k", type=positive_int, help="cutoff (default: the reference's headline k)")
    compare.add_argument("--metrics", type=parse_names(METRIC_CHOICES), default=list(GATED_DEFAULT),
                         help="comma-separated metrics; the first also groups the runs")
    compare.add_argument("--slices", type=parse_names(SLICE_CHOICES), default=["all", "locale"],
                         help="comma-separated slices: all, locale, category, locale_category")
    compare.add_argument("--test", choices=("randomization", "bootstrap", "t"), default="randomization",
                         help="paired test: sign-flip randomization (exact when small), bootstrap, or t")
    compare.add_argument("--correction", choices=("holm", "bh", "none"), default="holm",
                         help="multiple-testing correction over every comparison printed")
    compare.add_argument("--alpha", type=significance_level, default=0.05, help="significance level of the tests")
    compare.add_argument("--format", choices=("table", "markdown", "json", "html"), default="table",
                         help="how the comparison is printed")
    add_arguments(compare, "compare")

    export = command("export", "write a run of the warehouse for other tools: a TREC run file, trec_eval -q "
                     "figures, or its case metrics as CSV or Parquet", cmd_export)
    export.add_argument("run_id")
    export.add_argument("--format", required=True, choices=("trec-run", "trec-eval", "csv", "parquet"),
                        help="trec-run: the ranked cards as `qid Q0 docno rank score tag`; trec-eval: per-case "
                             "figures at --k as `trec_eval -q` prints them; csv, parquet: the case_metrics rows")
    export.add_argument("--out", help="the file to write, a path or a URI such as s3://bucket/run.parquet "
                        "(default: stdout; parquet needs one)")
    add_arguments(export, "export")
    export.add_argument("--k", type=positive_int,
                        help="trec-eval: the cutoff (default: the run's headline k); csv, parquet: only that "
                             "cutoff's rows (default: every cutoff)")

    schema = command("schema", "print the JSON Schema of an input or baseline file", cmd_schema)
    schema.add_argument("name", choices=("cases", "manifest", "baseline"))
    return parser


# The parser's handlers: each command's module is imported when that command runs, so that
# starting one command loads no other's engines.


@dataclass(frozen=True)
class Handler:
    """A command's function, named by its module in commands/ and imported when the command
    runs (start-up time). `engines`: the engines are imported before it runs (`run` imports
    them itself, beside its first read; `schema` needs none)."""

    module: str
    function: str
    engines: bool = True

    def __call__(self, args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(f".{self.module}", __package__), self.function)(args)


cmd_run = Handler("run", "cmd_run", engines=False)
cmd_gate = Handler("gate_and_baseline", "cmd_gate")
cmd_baseline_refresh = Handler("gate_and_baseline", "cmd_baseline_refresh")
cmd_baseline_floors = Handler("gate_and_baseline", "cmd_baseline_floors")
cmd_query = Handler("read_only", "cmd_query")
cmd_compare = Handler("read_only", "cmd_compare")
cmd_export = Handler("read_only", "cmd_export")
cmd_check_kb = Handler("read_only", "cmd_check_kb")
cmd_warehouse_check = Handler("warehouse_upkeep", "cmd_warehouse_check")
cmd_warehouse_rebuild = Handler("warehouse_upkeep", "cmd_warehouse_rebuild")
cmd_warehouse_vacuum = Handler("warehouse_upkeep", "cmd_warehouse_vacuum")
cmd_schema = Handler("schema", "cmd_schema", engines=False)


class Serving(Handler):
    """`serve`, which ends only on a signal: Prefect's runner takes SIGTERM and swallows Ctrl-C."""

    def __call__(self, args: argparse.Namespace) -> int:
        super().__call__(args)
        return _interrupted(_received[0] if _received else signal.SIGTERM)


cmd_serve = Serving("serve", "serve_nightly")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        refuse_paths_not_utf8(args)
        if args.handler.engines:
            import_engines()
        if args.handler is not cmd_run:  # `run` once its job is imported
            imports_done()
        code = args.handler(args)
        sys.stdout.flush()  # a reader that closed the pipe is met here, not at the interpreter's exit
        return code
    except BaseException as error:
        signal.setitimer(signal.ITIMER_REAL, 0)  # an interrupt still deferred must not land here
        if _received or isinstance(error, KeyboardInterrupt):
            return _interrupted(_received[0] if _received else signal.SIGINT)
        if stdout_closed(error):
            return _closed_pipe()
        said = error_exit(error)
        if said is None:
            raise
        code, line = said
        print(line, file=sys.stderr)
        return code


# Paths that are only written to, never recorded or read back by DuckDB: any bytes will do.
WRITE_ONLY_PATHS = frozenset({"out", "report_dir"})


def refuse_paths_not_utf8(args: argparse.Namespace) -> None:
    """Exit 2, before any work, for a path given (or the working folder a relative one is in)
    that is not UTF-8 text: DuckDB reads and writes paths as UTF-8 only, and the warehouse
    records runs, KBs and baselines by their paths as text."""
    from ..warehouse.warehouse import utf8_path  # deferred: a usage error ends before the warehouse loads

    for name, value in vars(args).items():
        if isinstance(value, Path) and name not in WRITE_ONLY_PATHS:
            utf8_path(value, {"runs": "RUNS", "warehouse": "warehouse"}.get(name, "--" + name.replace("_", "-")))


def _broken_pipe(error: BaseException) -> bool:
    """EPIPE: Python's BrokenPipeError, or the plain OSError an engine raises for it (Polars'
    CSV writer says "Broken pipe (os error 32)", Rust's text for EPIPE, with no errno)."""
    if isinstance(error, BrokenPipeError):
        return True
    return isinstance(error, OSError) and (error.errno == errno.EPIPE or str(error).endswith(f"(os error {errno.EPIPE})"))


def stdout_closed(error: BaseException) -> bool:
    """The command's output went to a pipe whose reader has gone (`… | head`): a broken pipe,
    or an error raised on one, with stdout a pipe or a socket."""
    chain: BaseException | None = error
    while chain is not None and not _broken_pipe(chain):
        chain = chain.__cause__ or chain.__context__
    if chain is None:
        return False
    try:
        mode = os.fstat(sys.stdout.fileno()).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _closed_pipe() -> int:
    """End quietly, as a command that SIGPIPE ended (SPEC 16): what is still buffered for stdout
    goes nowhere, rather than failing again at the interpreter's exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_CLOSED_PIPE


def _interrupted(signum: int) -> int:
    signal.setitimer(signal.ITIMER_REAL, 0)  # an interrupt still deferred is this one
    _raised.append(None)
    print(interrupted_line(signum), file=sys.stderr)
    return EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_TERMINATED


def process_settings() -> None:
    """Settings of the command's own process, made before any engine is imported; a value the
    user set is kept. NumPy starts OpenBLAS with a spinning thread per core, and nothing here
    calls BLAS; Arrow's default allocator (mimalloc) backs its arena with huge pages that the
    kernel zeroes on first touch, where jemalloc reuses its pages (benchmarks/README.md);
    Prefect's client analytics are off, as the README says."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if sys.platform == "linux":
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    os.environ.setdefault("DO_NOT_TRACK", "1")


def console() -> int:
    """The `retrieval-eval` command (flows/commands/entry.py starts it). At exit the interpreter walks
    the whole heap for garbage one last time, for nothing: the command is over; frozen objects
    are left out of that walk."""
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGALRM, _on_alarm)
    process_settings()
    try:
        code = main()
        imports_done()  # a command that ended before its modules were imported (bad input)
        # The command is over: a signal from here on (the interpreter's exit hooks and shutdown,
        # where Python would reset its handlers to the default, which kills the process with no
        # word and no exit code of ours) is ignored. An ignored disposition is left as it is.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM):
            signal.signal(signum, signal.SIG_IGN)
    except (KeyboardInterrupt, Terminated):  # it landed just after `main` returned
        code = _interrupted(_received[0] if _received else signal.SIGINT)
    if _received and not _raised:  # the command ended while its interrupt was deferred
        code = _interrupted(_received[0])
    if _received:
        # Interrupted: everything that matters ended in `main` (a transaction removed its
        # files); the engines' threads and pending signals must not turn the interpreter's
        # own shutdown into a crash or another exit code.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    gc.freeze()
    return code
