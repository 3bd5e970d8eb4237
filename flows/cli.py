"""The `retrieval-eval` command: a thin layer over flows/ (SPEC 5).

Exit codes: 0 ok, 1 a gate or check failed, 2 bad input or usage (a message naming
file, line and field; never a traceback for a user's mistake).
"""

from __future__ import annotations

import argparse
import csv
import gc
import io
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from flows import config
from transforms.errors import InputError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ks must be a comma-separated list of integers, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"--ks values must be integers >= 1, got {text!r}")
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


positive_int = bounded(int, 1, float("inf"), "an integer >= 1")
fraction = bounded(float, 0.0, 1.0, "a number in [0, 1]")


def add_orchestration_arguments(parser: argparse.ArgumentParser, tracked_flag: bool = True) -> None:
    if tracked_flag:
        parser.add_argument(
            "--prefect", action="store_true",
            help="a tracked Prefect flow run (also when PREFECT_API_URL is set)",
        )
    parser.add_argument("--task-runner", choices=("thread", "dask"), default="thread")
    parser.add_argument("--dask-address", help="scheduler of an existing Dask cluster (implies --task-runner dask)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retrieval-eval", description="Retrieval-only quality figures from stored RAG eval artifacts."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="ingest runs, compute metrics, write the warehouse and the report")
    run.add_argument("runs", nargs="?", type=Path, default=config.RUNS, help="runs root or one run folder")
    run.add_argument("--kb", type=Path, default=config.KB,
                     help="knowledge base cards.jsonl: gold ids that are not cards are flagged in the report")
    run.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)
    run.add_argument("--report-dir", type=Path, default=config.REPORT_DIR)
    run.add_argument("--k", type=positive_int, help="headline k (default: each run's retrieval_top_k)")
    run.add_argument("--ks", type=parse_ks, default=(), help="k sweep, e.g. 1,2,3,5,10")
    run.add_argument("--json", action="store_true", help="print the aggregates as JSON instead of the report")
    run.add_argument("--allow-rejects", action="store_true", help="load the valid records of a run with rejects")
    run.add_argument("--baseline", type=Path, help="baseline snapshot drawn as reference lines in the trend chart")
    add_orchestration_arguments(run)
    run.set_defaults(handler=cmd_run)

    serve = commands.add_parser("serve", help="serve the nightly Prefect deployment (cron) until interrupted")
    serve.add_argument("runs", nargs="?", type=Path, default=config.RUNS)
    serve.add_argument("--cron", default=config.NIGHTLY_CRON, help="schedule, cron syntax (default nightly 02:00 UTC)")
    serve.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)
    serve.add_argument("--report-dir", type=Path, default=config.REPORT_DIR)
    serve.add_argument("--ks", type=parse_ks, default=(), help="k sweep, e.g. 1,2,3,5,10")
    serve.add_argument("--baseline", type=Path, help="gate the newest run against this snapshot each night")
    add_orchestration_arguments(serve, tracked_flag=False)
    serve.set_defaults(handler=cmd_serve)

    check = commands.add_parser("check-kb", help="every gold id resolves to a KB card (exit 1 if not)")
    check.add_argument("runs", nargs="?", type=Path, default=config.RUNS)
    check.add_argument("--kb", type=Path, default=config.KB)
    check.set_defaults(handler=cmd_check_kb)

    gate = commands.add_parser("gate", help="regression tolerance of a run against a baseline snapshot")
    gate.add_argument("run_id")
    gate.add_argument("--baseline", type=Path, default=config.BASELINE)
    gate.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)
    gate.add_argument("--tolerance", type=fraction, default=config.TOLERANCE, help="allowed drop on `all`")
    gate.add_argument("--locale-tolerance", type=fraction, default=config.LOCALE_TOLERANCE,
                      help="allowed drop on each locale")
    gate.add_argument("--min-hit", type=fraction, help="absolute floor for hit@k on `all` (off unless given)")
    gate.add_argument("--min-recall", type=fraction, help="absolute floor for recall@k on `all` (off unless given)")
    gate.set_defaults(handler=cmd_gate)

    baseline = commands.add_parser("baseline", help="the committed baseline snapshot")
    baseline_commands = baseline.add_subparsers(dest="baseline_command", required=True)
    refresh = baseline_commands.add_parser("refresh", help="write the snapshot of a run")
    refresh.add_argument("run_id")
    refresh.add_argument("--out", type=Path, default=config.BASELINE)
    refresh.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)
    refresh.set_defaults(handler=cmd_baseline_refresh)
    floors = baseline_commands.add_parser("floors", help="suggest --min-hit/--min-recall from the baseline")
    floors.add_argument("--baseline", type=Path, default=config.BASELINE)
    floors.add_argument("--margin", type=fraction, default=0.05, help="distance under the observed figure")
    floors.set_defaults(handler=cmd_baseline_floors)

    query = commands.add_parser("query", help="SQL over the warehouse views (read-only)")
    query.add_argument("sql")
    query.add_argument("--format", choices=("table", "csv", "json"), default="table")
    query.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)
    query.set_defaults(handler=cmd_query)
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    # Dask fan-out goes through prefect-dask, so it is always a tracked flow run.
    tracked = args.prefect or bool(os.environ.get("PREFECT_API_URL")) or args.task_runner == "dask" or bool(args.dask_address)
    if tracked:
        from flows.pipeline import read_report
        from flows.prefect_flows import GateSettings, run_tracked
        from flows.warehouse import Warehouse

        outcome = run_tracked(run_options(args), args.task_runner, args.dask_address, GateSettings(args.baseline))
        report = read_report(Warehouse(args.warehouse), outcome.run_ids, args.kb)  # the flow wrote report.md
    else:
        from transforms.case_file import reading_ahead
        from transforms.manifest import first_cases_file

        # The first run's file is parsed while Polars and DuckDB are imported.
        with reading_ahead(first_cases_file(args.runs)):
            from flows.pipeline import evaluate, report_files
            from flows.warehouse import Warehouse

            run_ids = evaluate(run_options(args))
        report = report_files(Warehouse(args.warehouse), run_ids, args.report_dir, args.kb, baseline=args.baseline)
    from transforms.report_render import render_json, render_terminal

    if args.json:
        sys.stdout.write(render_json(report))
    else:
        sys.stdout.write(render_terminal(report, colour=sys.stdout.isatty()))
        sys.stdout.write(f"\nReport written to {args.report_dir / 'report.md'}\n")
    return EXIT_OK


def run_options(args: argparse.Namespace):
    from flows.pipeline import EvaluationOptions

    return EvaluationOptions(
        runs=args.runs,
        kb=args.kb,
        warehouse=args.warehouse,
        report_dir=args.report_dir,
        k=args.k,
        ks=args.ks,
        allow_rejects=args.allow_rejects,
    )


def cmd_check_kb(args: argparse.Namespace) -> int:
    from flows.pipeline import load_manifests
    from transforms.kb_check import gold_not_in_kb

    offenders = gold_not_in_kb(args.kb, load_manifests(args.runs))
    for row in offenders.iter_rows(named=True):
        print(f"{row['run_id']}/{row['case_id']}: {row['field']} id {row['gold_id']!r} is not a card of {args.kb}")
    if offenders.height:
        print(f"check-kb: {offenders.height} gold id(s) do not resolve", file=sys.stderr)
        return EXIT_FAILED
    print(f"check-kb: every gold id resolves to a card of {args.kb}")
    return EXIT_OK


def cmd_gate(args: argparse.Namespace) -> int:
    from flows.gating import gate_run
    from flows.warehouse import Warehouse
    from transforms.report_render import render_gate

    floors = {
        metric: value
        for metric, value in (("hit_at_k", args.min_hit), ("recall_at_k", args.min_recall))
        if value is not None
    }
    result = gate_run(
        Warehouse(args.warehouse),
        args.run_id,
        args.baseline,
        tolerance=args.tolerance,
        locale_tolerance=args.locale_tolerance,
        floors=floors,
    )
    sys.stdout.write(render_gate(result, colour=sys.stdout.isatty()))
    return EXIT_OK if result.passed else EXIT_FAILED


def cmd_baseline_refresh(args: argparse.Namespace) -> int:
    from flows.gating import refresh_baseline
    from flows.warehouse import Warehouse

    snapshot = refresh_baseline(Warehouse(args.warehouse), args.run_id, args.out)
    print(f"baseline: wrote {args.out} from run {snapshot['run_id']} at k={snapshot['k']} "
          f"({len(snapshot['cases'])} labelled cases)")
    return EXIT_OK


def cmd_baseline_floors(args: argparse.Namespace) -> int:
    from transforms.baseline import read_snapshot
    from transforms.gate import suggest_floors

    snapshot = read_snapshot(args.baseline)
    floors = suggest_floors(snapshot, args.margin)
    print(f"# observed on `all` in {snapshot['run_id']} at k={snapshot['k']}, minus {args.margin}")
    print(f"--min-hit {floors['hit_at_k']:.2f} --min-recall {floors['recall_at_k']:.2f}")
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from flows.pipeline import EvaluationOptions
    from flows.prefect_flows import GateSettings, serve

    options = EvaluationOptions(runs=args.runs, warehouse=args.warehouse, report_dir=args.report_dir, ks=args.ks)
    print(f"serving the nightly deployment ({args.cron}); Ctrl-C to stop", file=sys.stderr)
    serve(args.cron, options, args.task_runner, args.dask_address, GateSettings(args.baseline))
    return EXIT_OK


def cmd_query(args: argparse.Namespace) -> int:
    import duckdb

    from flows.warehouse import Warehouse
    from transforms.report_render import Table, layout_text

    with Warehouse(args.warehouse).connect(read_only=True) as con:
        try:
            cursor = con.execute(args.sql)
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchall() if columns else []
        except duckdb.Error as error:
            raise InputError(f"query failed: {error}") from None
    if args.format == "json":
        sys.stdout.write(json.dumps([dict(zip(columns, row, strict=True)) for row in rows], default=str, indent=2) + "\n")
    elif args.format == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
        sys.stdout.write(buffer.getvalue())
    else:
        table = Table(columns, [["" if v is None else str(v) for v in row] for row in rows], len(columns))
        sys.stdout.write(layout_text(table) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})\n")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except InputError as error:
        print(f"retrieval-eval: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:  # disk full, read-only or missing folders: the environment, said plainly
        where = f"{error.filename}: " if error.filename else ""
        print(f"retrieval-eval: {where}{error.strerror or error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


def console() -> int:
    """The `retrieval-eval` command: `main`, then a quick exit. At exit the interpreter walks
    the whole heap for garbage one last time (0.05-0.07 s after a 100k-case run, for nothing:
    the command is over); frozen objects are left out of that walk."""
    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(console())
