"""`retrieval-eval warehouse check | rebuild | vacuum`: the warehouse's integrity and upkeep."""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

from ..warehouse.warehouse import Warehouse
from ..warehouse.warehouse_check import check_warehouse, rebuild
from .exit_codes import EXIT_FAILED, EXIT_OK


def cmd_warehouse_check(args: argparse.Namespace) -> int:
    checked = check_warehouse(Warehouse(args.warehouse))
    problems = checked.problems
    for problem in problems:
        print(problem)
    if checked.uncommitted:
        print(f"warehouse check: {len(checked.uncommitted)} file(s) of a transaction that has not ended (a writer "
              f"running now, or killed: the next `retrieval-eval run` on that machine removes them, `warehouse vacuum` those of a writer killed elsewhere once past the retention), e.g. {checked.uncommitted[0]}",
              file=sys.stderr)
    if problems:
        print(f"warehouse check: {len(problems)} problem(s)", file=sys.stderr)
        return EXIT_FAILED
    print(f"warehouse check: every committed part of {args.warehouse} is as it was committed")
    return EXIT_OK


def cmd_warehouse_rebuild(args: argparse.Namespace) -> int:
    state = rebuild(Warehouse(args.warehouse))
    print(f"warehouse rebuild: catalog.duckdb made from log version {state.version} ({len(state.runs)} runs)")
    return EXIT_OK


def cmd_warehouse_vacuum(args: argparse.Namespace) -> int:

    deleted = Warehouse(args.warehouse).vacuum(timedelta(days=args.retention_days), orphans=True)
    print(f"warehouse vacuum: deleted {len(deleted)} superseded or orphaned file(s) older than {args.retention_days:g} day(s)")
    return EXIT_OK
