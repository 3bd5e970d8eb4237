"""The commands that only read: `query`, `compare`, `export` (over the warehouse) and `check-kb`
(the runs' gold ids against the KB)."""

from __future__ import annotations

import argparse
import sys

from ...transforms.compare_render import RENDERERS
from ...transforms.escaping import terminal_text
from ..inputs.kb import gold_not_in_kb
from ..outputs.warehouse_comparison import compare_in_warehouse
from ..outputs.export import export_run
from ..outputs.query import run_query
from ..sources.artifacts import load_run_folders
from ..warehouse.warehouse import Warehouse
from .exit_codes import EXIT_FAILED, EXIT_OK


def cmd_query(args: argparse.Namespace) -> int:
    run_query(Warehouse(args.warehouse), args.sql, args.format)
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    comparison = compare_in_warehouse(
        Warehouse(args.warehouse), args.run_ids, reference=args.reference, k=args.k, metrics=args.metrics,
        slices=args.slices, test=args.test, correction=args.correction, alpha=args.alpha,
    )
    sys.stdout.write(RENDERERS[args.format](comparison))
    for note in comparison.kb_notes:
        print(f"retrieval-eval: warning: {note}", file=sys.stderr)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    export_run(Warehouse(args.warehouse), args.run_id, args.format, args.out, args.k)
    return EXIT_OK


def cmd_check_kb(args: argparse.Namespace) -> int:
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
