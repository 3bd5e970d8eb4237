"""The `retrieval-eval` command: a thin layer over flows/ (SPEC 5).

Exit codes: 0 ok, 1 a gate or check failed, 2 bad input or usage (a message naming file,
line and field; never a traceback for a user's mistake), 130 / 143 interrupted.
"""

from __future__ import annotations

import signal
import sys

EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143
# The signal that interrupted the command, if any: an engine that meets the signal inside a
# query raises its own error ("Query interrupted") instead of ours.
_received: list[int] = []


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every `finally` runs (a transaction
    removes its uncommitted files) before the command ends with 143."""


def _on_signal(signum, frame) -> None:
    # Raised once: a second signal (or the one an engine delivers again after it stopped its
    # query) must not cut the cleanup the first one started.
    _received.append(signum)
    if len(_received) == 1:
        raise KeyboardInterrupt if signum == signal.SIGINT else Terminated


import argparse  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

from .. import __version__  # noqa: E402
from ..transforms.errors import InputError  # noqa: E402
from . import config  # noqa: E402
from .interrupts import import_engines  # noqa: E402

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
MAX_INT = 2**31 - 1  # k, and every other count a user gives


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ks must be a comma-separated list of integers, got {text!r}") from None
    if not ks or min(ks) < 1 or max(ks) > MAX_INT:
        raise argparse.ArgumentTypeError(f"--ks values must be integers in [1, {MAX_INT}], got {text!r}")
    return ks


def bounded(cast, low, high, expected: str):
    """An argparse type: `cast(text)` within [low, high], else a usage error (exit 2)."""

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


positive_int = bounded(int, 1, MAX_INT, f"an integer in [1, {MAX_INT}]")
fraction = bounded(float, 0.0, 1.0, "a number in [0, 1]")
non_negative = bounded(float, 0.0, 10_000.0, "a number of days >= 0")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False, (), argparse.SUPPRESS) or "%(default)" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


def add_orchestration_arguments(parser: argparse.ArgumentParser, tracked_flag: bool = True) -> None:
    if tracked_flag:
        parser.add_argument("--prefect", action="store_true",
                            help="a tracked Prefect flow run (also when PREFECT_API_URL is set)")
    parser.add_argument("--task-runner", choices=("thread", "dask"), default="thread",
                        help="where a tracked run's tasks run")
    parser.add_argument("--dask-address", help="scheduler of an existing Dask cluster (implies --task-runner dask)")


def add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tolerance", type=fraction, default=config.TOLERANCE, help="allowed drop on `all`")
    parser.add_argument("--locale-tolerance", type=fraction, default=config.LOCALE_TOLERANCE,
                        help="allowed drop on each locale")
    parser.add_argument("--min-hit", type=fraction, help="absolute floor for hit@k on `all` (off unless given)")
    parser.add_argument("--min-recall", type=fraction, help="absolute floor for recall@k on `all` (off unless given)")
    parser.add_argument("--allow-missing-cases", action="store_true",
                        help="pass although cases of the baseline are missing from the run")


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
    run.add_argument("runs", nargs="?", type=Path, default=config.RUNS, help="runs root or one run folder")
    run.add_argument("--kb", type=Path, help=f"knowledge base cards.jsonl (default {config.KB} when present): "
                     "gold ids that are not cards are flagged in the report")
    run.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)
    run.add_argument("--report-dir", type=Path, default=config.REPORT_DIR)
    run.add_argument("--k", type=positive_int, help="headline k (default: each run's retrieval_top_k)")
    run.add_argument("--ks", type=parse_ks, default=(), help="k sweep, e.g. 1,2,3,5,10")
    run.add_argument("--relevance-level", type=positive_int, default=1,
                     help="the least grade a graded card needs to count as relevant")
    run.add_argument("--json", action="store_true", help="print the aggregates as JSON instead of the report")
    run.add_argument("--quiet", action="store_true", help="print only the report's file names")
    run.add_argument("--allow-rejects", action="store_true", help="load the valid records of a run with rejects")
    run.add_argument("--baseline", type=Path, help="gate the newest run against this snapshot (exit 1 when it fails)")
    add_gate_arguments(run)
    add_orchestration_arguments(run)

    serve = command("serve", "serve the nightly Prefect deployment (cron) until interrupted", cmd_serve)
    serve.add_argument("runs", nargs="?", type=Path, default=config.RUNS)
    serve.add_argument("--cron", default=config.NIGHTLY_CRON, help="schedule, cron syntax (UTC)")
    serve.add_argument("--kb", type=Path)
    serve.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)
    serve.add_argument("--report-dir", type=Path, default=config.REPORT_DIR)
    serve.add_argument("--ks", type=parse_ks, default=(), help="k sweep, e.g. 1,2,3,5,10")
    serve.add_argument("--baseline", type=Path, help="gate the newest run against this snapshot each night")
    add_gate_arguments(serve)
    add_orchestration_arguments(serve, tracked_flag=False)

    check = command("check-kb", "every gold id resolves to a KB card (exit 1 if not)", cmd_check_kb)
    check.add_argument("runs", nargs="?", type=Path, default=config.RUNS)
    check.add_argument("--kb", type=Path, default=config.KB)

    gate = command("gate", "regression tolerance of a run against a baseline snapshot", cmd_gate)
    gate.add_argument("run_id")
    gate.add_argument("--baseline", type=Path, default=config.BASELINE)
    gate.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)
    add_gate_arguments(gate)

    baseline = command("baseline", "the committed baseline snapshot", None)
    baseline_commands = baseline.add_subparsers(dest="baseline_command", required=True)
    refresh = baseline_commands.add_parser("refresh", help="write the snapshot of a run", formatter_class=HelpFormatter)
    refresh.add_argument("run_id")
    refresh.add_argument("--out", type=Path, default=config.BASELINE)
    refresh.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)
    refresh.set_defaults(handler=cmd_baseline_refresh)
    floors = baseline_commands.add_parser("floors", help="suggest --min-hit/--min-recall from the baseline",
                                          formatter_class=HelpFormatter)
    floors.add_argument("--baseline", type=Path, default=config.BASELINE)
    floors.add_argument("--margin", type=fraction, default=0.05, help="distance under the observed figure")
    floors.set_defaults(handler=cmd_baseline_floors)

    query = command("query", "one read-only SQL statement over the warehouse views", cmd_query)
    query.add_argument("sql")
    query.add_argument("--format", choices=("table", "csv", "json"), default="table")
    query.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)

    warehouse = command("warehouse", "integrity of the warehouse: check, rebuild, vacuum", None)
    warehouse_commands = warehouse.add_subparsers(dest="warehouse_command", required=True)
    for name, help_text, handler in (
        ("check", "verify every committed part against the log (exit 1 if any differs)", cmd_warehouse_check),
        ("rebuild", "make catalog.duckdb again from the transaction log", cmd_warehouse_rebuild),
        ("vacuum", "delete files that commits superseded, past the retention", cmd_warehouse_vacuum),
    ):
        sub = warehouse_commands.add_parser(name, help=help_text, description=help_text, formatter_class=HelpFormatter)
        sub.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)
        sub.set_defaults(handler=handler)
        if name == "vacuum":
            sub.add_argument("--retention-days", type=non_negative, default=config.RETENTION_DAYS,
                             help="keep superseded files this long (a reader may still be reading them)")

    schema = command("schema", "print the JSON Schema of an input or baseline file", cmd_schema)
    schema.add_argument("name", choices=("cases", "manifest", "baseline"))
    return parser


def gate_options(args: argparse.Namespace, baseline: Path):
    from .gating import GateOptions, floors_from

    return GateOptions(
        baseline=baseline,
        warehouse=args.warehouse,
        tolerance=args.tolerance,
        locale_tolerance=args.locale_tolerance,
        floors=floors_from(args.min_hit, args.min_recall),
        allow_missing_cases=args.allow_missing_cases,
    )


def job_options(args: argparse.Namespace):
    from .job import JobOptions

    return JobOptions(
        runs=args.runs,
        kb=args.kb,
        warehouse=args.warehouse,
        report_dir=args.report_dir,
        k=getattr(args, "k", None),
        ks=args.ks,
        relevance_level=getattr(args, "relevance_level", 1),
        allow_rejects=getattr(args, "allow_rejects", False),
        gate=gate_options(args, args.baseline) if args.baseline else None,
    )


def tracked(args: argparse.Namespace) -> bool:
    # Dask fan-out goes through prefect-dask, so it is always a tracked flow run.
    return args.prefect or bool(os.environ.get("PREFECT_API_URL")) or args.task_runner == "dask" or bool(args.dask_address)


def cmd_run(args: argparse.Namespace) -> int:
    if tracked(args):
        from .prefect_flows import run_tracked

        result = run_tracked(job_options(args), args.task_runner, args.dask_address)
    else:
        from .artifacts import first_cases_file
        from .case_file import Prefetch

        # The first run's file is parsed while Polars and DuckDB are imported.
        with Prefetch(first_cases_file(args.runs)) as prefetch:
            import_engines()
            from .job import InProcess, run_job

            steps = InProcess(prefetch, relevance_level=args.relevance_level)
            try:
                result = run_job(job_options(args), steps)
            finally:
                steps.close()
    return print_run(args, result)


def print_run(args: argparse.Namespace, result) -> int:
    from ..transforms.report_render import render_gate, render_json, render_terminal

    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    if args.json:
        sys.stdout.write(render_json(result.report.report))
    elif not args.quiet:
        sys.stdout.write(render_terminal(result.report.report, colour=colour))
        if result.gate is not None:
            sys.stdout.write("\n" + render_gate(result.gate, colour=colour))
    if not args.json:
        sys.stdout.write(f"\nReport written to {result.report.markdown} and {result.report.html}\n")
    return EXIT_FAILED if result.gate is not None and not result.gate.passed else EXIT_OK


def cmd_check_kb(args: argparse.Namespace) -> int:
    from .artifacts import load_run_folders
    from .kb import gold_not_in_kb

    offenders = gold_not_in_kb(args.kb, load_run_folders(args.runs))
    for row in offenders.iter_rows(named=True):
        print(f"{row['run_id']}/{row['case_id']}: {row['field']} id {row['gold_id']!r} is not a card of {args.kb}")
    if offenders.height:
        print(f"check-kb: {offenders.height} gold id(s) do not resolve", file=sys.stderr)
        return EXIT_FAILED
    print(f"check-kb: every gold id resolves to a card of {args.kb}")
    return EXIT_OK


def cmd_gate(args: argparse.Namespace) -> int:
    from ..transforms.report_render import render_gate
    from .gating import gate_run
    from .views import read_state
    from .warehouse import Warehouse

    options = gate_options(args, args.baseline)
    result = gate_run(read_state(Warehouse(args.warehouse)), args.run_id, options)
    sys.stdout.write(render_gate(result, colour=sys.stdout.isatty() and not os.environ.get("NO_COLOR")))
    return EXIT_OK if result.passed else EXIT_FAILED


def cmd_baseline_refresh(args: argparse.Namespace) -> int:
    from .gating import refresh_baseline
    from .warehouse import Warehouse

    snapshot = refresh_baseline(Warehouse(args.warehouse), args.run_id, args.out)
    print(f"baseline: wrote {args.out} from run {snapshot['run_id']} at k={snapshot['k']} "
          f"({len(snapshot['cases'])} labelled cases)")
    return EXIT_OK


def cmd_baseline_floors(args: argparse.Namespace) -> int:
    from ..transforms.gate import suggest_floors
    from .baseline_file import read_baseline

    snapshot = read_baseline(args.baseline)
    floors = suggest_floors(snapshot, args.margin)
    print(f"# observed on `all` in {snapshot['run_id']} at k={snapshot['k']}, minus {args.margin}")
    print(f"--min-hit {floors['hit_at_k']:.2f} --min-recall {floors['recall_at_k']:.2f}")
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from .prefect_flows import serve

    print(f"serving the nightly deployment ({args.cron}); Ctrl-C to stop", file=sys.stderr)
    serve(args.cron, job_options(args), args.task_runner, args.dask_address)
    return EXIT_OK


def cmd_query(args: argparse.Namespace) -> int:
    from .query import run_query
    from .warehouse import Warehouse

    run_query(Warehouse(args.warehouse), args.sql, args.format)
    return EXIT_OK


def cmd_warehouse_check(args: argparse.Namespace) -> int:
    from .warehouse import Warehouse
    from .warehouse_check import check_warehouse

    problems = check_warehouse(Warehouse(args.warehouse))
    for problem in problems:
        print(problem)
    if problems:
        print(f"warehouse check: {len(problems)} problem(s)", file=sys.stderr)
        return EXIT_FAILED
    print(f"warehouse check: every committed part of {args.warehouse} is as it was committed")
    return EXIT_OK


def cmd_warehouse_rebuild(args: argparse.Namespace) -> int:
    from .warehouse import Warehouse
    from .warehouse_check import rebuild

    state = rebuild(Warehouse(args.warehouse))
    print(f"warehouse rebuild: catalog.duckdb made from log version {state.version} ({len(state.runs)} runs)")
    return EXIT_OK


def cmd_warehouse_vacuum(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from .warehouse import Warehouse

    deleted = Warehouse(args.warehouse).vacuum(timedelta(days=args.retention_days))
    print(f"warehouse vacuum: deleted {len(deleted)} superseded file(s) older than {args.retention_days:g} day(s)")
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from .schemas import schema_text

    sys.stdout.write(schema_text(args.name))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.handler not in (cmd_run, cmd_schema):  # `run` imports them beside its first read
            import_engines()
        return args.handler(args)
    except BaseException as error:
        if _received or isinstance(error, KeyboardInterrupt):
            return _interrupted(_received[0] if _received else signal.SIGINT)
        if isinstance(error, InputError):
            print(f"retrieval-eval: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if isinstance(error, OSError):  # disk full, read-only or missing folders: the environment, said plainly
            where = f"{error.filename}: " if error.filename else ""
            print(f"retrieval-eval: {where}{error.strerror or error}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise


def _interrupted(signum: int) -> int:
    what = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    print(f"retrieval-eval: {what}; what was committed before stands, nothing after it was", file=sys.stderr)
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
    """The `retrieval-eval` command (flows/entry.py starts it). At exit the interpreter walks
    the whole heap for garbage one last time, for nothing: the command is over; frozen objects
    are left out of that walk."""
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    process_settings()
    code = main()
    if _received:
        # Interrupted: everything that matters ended in `main` (a transaction removed its
        # files); the engines' threads and pending signals must not turn the interpreter's
        # own shutdown into a crash or another exit code.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    gc.freeze()
    return code
