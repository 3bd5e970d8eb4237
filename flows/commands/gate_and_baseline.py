"""`retrieval-eval gate` (a run against the baseline snapshot) and `baseline refresh` /
`baseline floors` (the snapshot written, and the floors it suggests)."""

from __future__ import annotations

import argparse
import sys

from ...transforms.gate import suggest_floors
from ...transforms.gate_render import render_gate, render_gate_json, render_gate_markdown
from ..inputs.baseline_file import read_baseline
from ..inputs.options import values_of
from ..job.job import given_kb
from ..outputs.warehouse_gate import gate_options as gate_options_of
from ..outputs.warehouse_gate import gate_run, refresh_baseline
from ..warehouse.committed import read_state
from ..warehouse.warehouse import Warehouse
from .exit_codes import EXIT_FAILED, EXIT_OK
from .terminal import colour_wanted


def gate_options(args: argparse.Namespace):
    """The gate's options of a command's arguments (flows/inputs/options.py); None without --baseline."""
    return gate_options_of(values_of(args))


def cmd_gate(args: argparse.Namespace) -> int:
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
    snapshot = refresh_baseline(Warehouse(args.warehouse), args.run_id, args.out)
    # on stderr: with `--out /dev/stdout` the snapshot is the command's output, whole
    print(f"baseline: wrote {args.out} from run {snapshot['run_id']} at k={snapshot['k']} "
          f"({len(snapshot['cases'])} labelled cases)", file=sys.stderr)
    return EXIT_OK


def cmd_baseline_floors(args: argparse.Namespace) -> int:
    snapshot = read_baseline(args.baseline).snapshot
    floors = suggest_floors(snapshot, args.margin)
    print(f"# observed on `all` in {snapshot['run_id']} at k={snapshot['k']}, minus {args.margin}")
    print(f"--min-hit {floors['hit_at_k']:.2f} --min-recall {floors['recall_at_k']:.2f}")
    return EXIT_OK
