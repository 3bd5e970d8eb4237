"""The `retrieval-eval` command: a thin layer over flows/ (SPEC 5).

Exit codes: 0 ok, 1 a gate or check failed, 2 bad input or usage (a message naming
file, line and field; never a traceback for a user's mistake).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
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


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retrieval-eval", description="Retrieval-only quality figures from stored RAG eval artifacts."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="ingest runs, compute metrics, write the warehouse and the report")
    run.add_argument("runs", nargs="?", type=Path, default=config.RUNS, help="runs root or one run folder")
    run.add_argument("--kb", type=Path, default=config.KB, help="knowledge base cards.jsonl")
    run.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)
    run.add_argument("--report-dir", type=Path, default=config.REPORT_DIR)
    run.add_argument("--k", type=positive_int, help="headline k (default: each run's retrieval_top_k)")
    run.add_argument("--ks", type=parse_ks, default=(), help="k sweep, e.g. 1,2,3,5,10")
    run.add_argument("--json", action="store_true", help="print the aggregates as JSON instead of the report")
    run.add_argument("--allow-rejects", action="store_true", help="load the valid records of a run with rejects")
    run.set_defaults(handler=cmd_run)

    query = commands.add_parser("query", help="SQL over the warehouse views (read-only)")
    query.add_argument("sql")
    query.add_argument("--format", choices=("table", "csv", "json"), default="table")
    query.add_argument("--warehouse", type=Path, default=config.WAREHOUSE)
    query.set_defaults(handler=cmd_query)
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    from flows.pipeline import EvaluationOptions, evaluate, read_report, write_report
    from flows.warehouse import Warehouse
    from transforms.report_render import render_json, render_terminal

    options = EvaluationOptions(
        runs=args.runs,
        warehouse=args.warehouse,
        report_dir=args.report_dir,
        k=args.k,
        ks=args.ks,
        allow_rejects=args.allow_rejects,
    )
    run_ids = evaluate(options)
    report = write_report(read_report(Warehouse(args.warehouse), run_ids), args.report_dir)
    if args.json:
        sys.stdout.write(render_json(report))
    else:
        sys.stdout.write(render_terminal(report, colour=sys.stdout.isatty()))
        sys.stdout.write(f"\nReport written to {args.report_dir / 'report.md'}\n")
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
        sys.stdout.write(json.dumps([dict(zip(columns, row)) for row in rows], default=str, indent=2) + "\n")
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
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
