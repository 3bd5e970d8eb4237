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
import json  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

from ... import __version__  # noqa: E402
from ...transforms.errors import InputError  # noqa: E402
from ..inputs import config  # noqa: E402
from ..inputs.options import add_arguments, bounded, fraction, positive_int, significance_level, values_of  # noqa: E402
from ..storage.interrupts import import_engines  # noqa: E402
from .entry import interrupted_line  # noqa: E402

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE  # as a shell reports a command that SIGPIPE ended


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
    add_arguments(run, "run", ["runs"])
    run.add_argument("--trec-run", type=Path, metavar="FILE",
                     help="evaluate a TREC run file (qid Q0 docno rank score tag) in place of RUNS; needs --qrels")
    run.add_argument("--qrels", type=Path, metavar="FILE", help="the TREC judgments (qid iter docno rel) of --trec-run")
    run.add_argument("--run-id", help="the run id of --trec-run (default: the run file's name without extension)")
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
    check.add_argument("runs", nargs="?", type=Path, default=config.RUNS)
    check.add_argument("--kb", type=Path, default=config.KB)

    gate = command("gate", "regression tolerance of a run against a baseline snapshot", cmd_gate)
    gate.add_argument("run_id")
    add_arguments(gate, "gate")
    gate.add_argument("--format", choices=("table", "markdown", "json"), default="table",
                      help="markdown fits a CI job summary or a pull-request comment; json is for CI to post")

    baseline = command("baseline", "the committed baseline snapshot", None)
    baseline_commands = baseline.add_subparsers(dest="baseline_command", required=True)
    refresh = baseline_commands.add_parser("refresh", help="write the snapshot of a run", formatter_class=HelpFormatter)
    refresh.add_argument("run_id")
    refresh.add_argument("--out", type=Path, default=config.BASELINE, help="the snapshot file to write")
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
    export.add_argument("--out", type=Path, help="the file to write (default: stdout; parquet needs one)")
    add_arguments(export, "export")
    export.add_argument("--k", type=positive_int,
                        help="trec-eval: the cutoff (default: the run's headline k); csv, parquet: only that "
                             "cutoff's rows (default: every cutoff)")

    schema = command("schema", "print the JSON Schema of an input or baseline file", cmd_schema)
    schema.add_argument("name", choices=("cases", "manifest", "baseline"))
    return parser


def gate_options(args: argparse.Namespace):
    """The gate's options of a command's arguments (flows/inputs/options.py); None without --baseline."""
    from ..outputs.gating import gate_options as gate_options_of

    return gate_options_of(values_of(args))


def job_options(args: argparse.Namespace):
    """The job's options of `run`'s or `serve`'s arguments (flows/inputs/options.py), and the TREC
    run that `run` may take in place of RUNS."""
    from ..job.job import job_options as job_options_of

    return replace(job_options_of(values_of(args)), trec_run=getattr(args, "trec_run", None),
                   qrels=getattr(args, "qrels", None), run_id=getattr(args, "run_id", None))


def colour_wanted() -> bool:
    """Colour on a terminal, unless NO_COLOR is set (https://no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def tracked(args: argparse.Namespace) -> bool:
    # Dask fan-out goes through prefect-dask, so it is always a tracked flow run.
    return args.prefect or bool(os.environ.get("PREFECT_API_URL")) or args.task_runner == "dask" or bool(args.dask_address)


def check_trec_arguments(args: argparse.Namespace) -> None:
    """--trec-run and --qrels go together, in place of RUNS, in this process (the Prefect
    steps read run folders only); --run-id names a TREC run."""
    if args.trec_run is None:
        given = [option for option, value in (("--qrels", args.qrels), ("--run-id", args.run_id)) if value is not None]
        if given:
            raise InputError(f"run: {' and '.join(given)} {'are' if len(given) > 1 else 'is'} only for --trec-run FILE")
        return
    if args.qrels is None:
        raise InputError("run: --trec-run needs --qrels FILE (the judgments to evaluate it against)")
    if args.runs is not None:
        raise InputError(f"run: give either RUNS ({args.runs}) or --trec-run, not both")
    if args.prefect or args.task_runner == "dask" or args.dask_address:
        raise InputError("run: --trec-run runs in this process; it does not take --prefect, --task-runner dask "
                         "or --dask-address")


def cmd_run(args: argparse.Namespace) -> int:
    check_trec_arguments(args)
    if args.trec_run is None and tracked(args):
        return run_with_prefect(args)
    from ..sources.artifacts import first_cases_file
    from ..sources.case_file import Prefetch

    # The first run's file is parsed while Polars and DuckDB are imported.
    with Prefetch(first_cases_file(args.runs or config.RUNS) if args.trec_run is None else None) as prefetch:
        import_engines()
        from ..job.job import InProcess, run_job

        imports_done()
        steps = InProcess(prefetch)
        try:
            result = run_job(job_options(args), steps)
        finally:
            steps.close()
    return print_run(args, result)


def run_with_prefect(args: argparse.Namespace) -> int:
    """`run` as a tracked flow run; a lost API ends it with one warning line, the report of
    what the warehouse holds, and exit 2 (the gate's verdict when the run was committed)."""
    from ..job.prefect_settings import check_api, prefect_environment

    prefect_environment()
    if os.environ.get("PREFECT_API_URL"):
        check_api(os.environ["PREFECT_API_URL"])  # before Prefect's import, which costs seconds
    import_engines()
    imports_done()
    from ..job.prefect_flows import LostApi, run_tracked
    from ..warehouse.warehouse import Warehouse

    options = job_options(args)
    warehouse = Warehouse(options.warehouse)
    before = warehouse.state().version if warehouse.exists() else 0
    try:
        return print_run(args, run_tracked(options, args.task_runner, args.dask_address))
    except LostApi as lost:
        print(f"retrieval-eval: warning: {lost}; the warehouse holds what was committed", file=sys.stderr)
        return report_after_lost_api(args, options, warehouse, before)


def report_after_lost_api(args: argparse.Namespace, options, warehouse, version_before: int) -> int:
    """The report (and the gate, when this run's commit landed) of what the warehouse holds."""

    from ..inputs.baseline_file import read_baseline
    from ..job.job import InProcess, checked_kb, newest_run_id
    from ..outputs.reports import ReportOptions

    state = warehouse.state() if warehouse.exists() else None
    if state is None or not state.runs:
        return EXIT_BAD_INPUT
    committed = state.version > version_before
    steps = InProcess()
    try:
        baseline = read_baseline(options.gate.baseline) if options.gate and committed else None
        kb = checked_kb(options)
        report = steps.report(state, ReportOptions(warehouse.root, options.report_dir, kb, options.charts, baseline))
        gate = None
        if baseline is not None:
            from ..sources.artifacts import load_run_folders

            newest = newest_run_id(load_run_folders(options.runs))
            gate = steps.gate(state, newest, options.gate, baseline, kb)
    finally:
        steps.close()
    from ..job.job import JobResult

    code = print_run(args, JobResult([], state, report, gate))
    return EXIT_FAILED if code == EXIT_FAILED else EXIT_BAD_INPUT


def print_run(args: argparse.Namespace, result) -> int:
    """The run's output in the mode asked for; the gate's verdict is in every mode: the whole gate
    after the report, under "gate" in --json (the document `gate --format json` prints), one
    line with --quiet."""
    from ...transforms.gate import gate_json
    from ...transforms.gate_render import render_gate, render_gate_verdict
    from ...transforms.report_render import report_json, render_terminal

    colour = colour_wanted()
    gate = result.gate
    if args.json:
        document = report_json(result.report.report)
        if gate is not None:
            document["gate"] = gate_json(gate)
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    elif not args.quiet:
        sys.stdout.write(render_terminal(result.report.report, colour=colour))
        if gate is not None:
            sys.stdout.write("\n" + render_gate(gate, colour=colour))
    if not args.json:
        sys.stdout.write(("" if args.quiet else "\n") + f"Report written to {result.report.markdown} and {result.report.html}\n")
    if args.quiet and gate is not None:
        sys.stdout.write(render_gate_verdict(gate))
    return EXIT_FAILED if gate is not None and not gate.passed else EXIT_OK


def cmd_check_kb(args: argparse.Namespace) -> int:
    from ...transforms.escaping import terminal_text
    from ..sources.artifacts import load_run_folders
    from ..inputs.kb import gold_not_in_kb

    offenders = gold_not_in_kb(args.kb, load_run_folders(args.runs))
    kb = terminal_text(str(args.kb))
    for row in offenders.iter_rows(named=True):
        print(terminal_text(f"{row['run_id']}/{row['case_id']}: {row['field']} id {row['gold_id']!r} is not a card of ")
              + kb)
    if offenders.height:
        print(f"check-kb: {offenders.height} gold id(s) do not resolve", file=sys.stderr)
        return EXIT_FAILED
    print(f"check-kb: every gold id resolves to a card of {kb}")
    return EXIT_OK


def cmd_gate(args: argparse.Namespace) -> int:
    from ...transforms.gate_render import render_gate, render_gate_json, render_gate_markdown
    from ..inputs.baseline_file import read_baseline
    from ..outputs.gating import gate_run
    from ..job.job import given_kb
    from ..warehouse.committed import read_state
    from ..warehouse.warehouse import Warehouse

    options = gate_options(args)
    baseline = read_baseline(args.baseline)
    result = gate_run(read_state(Warehouse(args.warehouse)), args.run_id, options, baseline, given_kb(args.kb))
    if args.format == "json":
        sys.stdout.write(render_gate_json(result))
    elif args.format == "markdown":
        sys.stdout.write(render_gate_markdown(result))
    else:
        sys.stdout.write(render_gate(result, colour=colour_wanted()))
    return EXIT_OK if result.passed else EXIT_FAILED


def cmd_baseline_refresh(args: argparse.Namespace) -> int:
    from ..outputs.gating import refresh_baseline
    from ..warehouse.warehouse import Warehouse

    snapshot = refresh_baseline(Warehouse(args.warehouse), args.run_id, args.out)
    # on stderr: with `--out /dev/stdout` the snapshot is the command's output, whole
    print(f"baseline: wrote {args.out} from run {snapshot['run_id']} at k={snapshot['k']} "
          f"({len(snapshot['cases'])} labelled cases)", file=sys.stderr)
    return EXIT_OK


def cmd_baseline_floors(args: argparse.Namespace) -> int:
    from ...transforms.gate import suggest_floors
    from ..inputs.baseline_file import read_baseline

    snapshot = read_baseline(args.baseline).snapshot
    floors = suggest_floors(snapshot, args.margin)
    print(f"# observed on `all` in {snapshot['run_id']} at k={snapshot['k']}, minus {args.margin}")
    print(f"--min-hit {floors['hit_at_k']:.2f} --min-recall {floors['recall_at_k']:.2f}")
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from ..job.prefect_flows import serve
    from ..job.prefect_settings import prefect_environment

    prefect_environment()
    try:
        serve(args.cron, job_options(args), args.task_runner, args.dask_address, crash_after_s=args.crash_after)
    except SystemExit as stop:  # Prefect's runner takes SIGTERM, and exits 0 on it before it has started
        if stop.code not in (0, None):
            raise
    # Serving ends only on a signal, which Prefect's runner takes (SIGTERM) or swallows (Ctrl-C).
    return _interrupted(_received[0] if _received else signal.SIGTERM)


def cmd_query(args: argparse.Namespace) -> int:
    from ..outputs.query import run_query
    from ..warehouse.warehouse import Warehouse

    run_query(Warehouse(args.warehouse), args.sql, args.format)
    return EXIT_OK


def cmd_warehouse_check(args: argparse.Namespace) -> int:
    from ..warehouse.warehouse import Warehouse
    from ..warehouse.warehouse_check import check_warehouse

    checked = check_warehouse(Warehouse(args.warehouse))
    problems = checked.problems
    for problem in problems:
        print(problem)
    if checked.uncommitted:
        print(f"warehouse check: {len(checked.uncommitted)} file(s) of a transaction that has not ended (a writer "
              f"running now, or killed: the next `retrieval-eval run` removes them), e.g. {checked.uncommitted[0]}",
              file=sys.stderr)
    if problems:
        print(f"warehouse check: {len(problems)} problem(s)", file=sys.stderr)
        return EXIT_FAILED
    print(f"warehouse check: every committed part of {args.warehouse} is as it was committed")
    return EXIT_OK


def cmd_warehouse_rebuild(args: argparse.Namespace) -> int:
    from ..warehouse.warehouse import Warehouse
    from ..warehouse.warehouse_check import rebuild

    state = rebuild(Warehouse(args.warehouse))
    print(f"warehouse rebuild: catalog.duckdb made from log version {state.version} ({len(state.runs)} runs)")
    return EXIT_OK


def cmd_warehouse_vacuum(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from ..warehouse.warehouse import Warehouse

    deleted = Warehouse(args.warehouse).vacuum(timedelta(days=args.retention_days))
    print(f"warehouse vacuum: deleted {len(deleted)} superseded file(s) older than {args.retention_days:g} day(s)")
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from ...transforms.compare_render import RENDERERS
    from ..outputs.comparing import compare_in_warehouse
    from ..warehouse.warehouse import Warehouse

    comparison = compare_in_warehouse(
        Warehouse(args.warehouse), args.run_ids, reference=args.reference, k=args.k, metrics=args.metrics,
        slices=args.slices, test=args.test, correction=args.correction, alpha=args.alpha,
    )
    sys.stdout.write(RENDERERS[args.format](comparison))
    for note in comparison.kb_notes:
        print(f"retrieval-eval: warning: {note}", file=sys.stderr)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from ..outputs.export import export_run
    from ..warehouse.warehouse import Warehouse

    export_run(Warehouse(args.warehouse), args.run_id, args.format, args.out, args.k)
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from ..sources.schemas import schema_text

    sys.stdout.write(schema_text(args.name))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        refuse_paths_not_utf8(args)
        if args.handler not in (cmd_run, cmd_schema):  # `run` imports them beside its first read
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
        if isinstance(error, InputError):
            print(f"retrieval-eval: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if isinstance(error, OSError):  # disk full, read-only or missing folders: the environment, said plainly
            where = f"{error.filename}: " if error.filename else ""
            print(f"retrieval-eval: {where}{error.strerror or error}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise


# Paths that are only written to, never recorded or read back by DuckDB: any bytes will do.
WRITE_ONLY_PATHS = frozenset({"out", "report_dir"})


def refuse_paths_not_utf8(args: argparse.Namespace) -> None:
    """Exit 2, before any work, for a path given (or the working folder a relative one is in)
    that is not UTF-8 text: DuckDB reads and writes paths as UTF-8 only, and the warehouse
    records runs, KBs and baselines by their paths as text."""
    from ..warehouse.warehouse import utf8_path

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


def imports_done() -> None:
    """The command's modules are imported: what they made lives as long as the process, so it
    is frozen (left out of every later collection) and the collector, which flows/commands/entry.py
    turned off for the imports, is on again. Its passes over import-time objects freed nothing
    and held the interpreter for ~0.08 s of every command's start (one full pass: 38 ms); the
    few cycles left unfreed (the argument parser's, ~150 KB) stay for the process's life. When
    the entry did not turn it off (`main` called in a test), nothing changes."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


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
