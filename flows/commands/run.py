"""`retrieval-eval run`: the job in this process or as a tracked Prefect flow run, and its
output in the mode asked for (the report, --json or --quiet; the gate's verdict in each).

The job and the engines are imported inside the functions, once `import_engines` has run
(where no interrupt lands) and while the first cases file is being read (Prefetch): importing
them here would put seconds before the first byte is read."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace

from ...transforms.errors import InputError
from ..inputs import config
from ..inputs.options import values_of
from ..sources.artifacts import first_cases_file
from ..sources.strict_read import Prefetch
from ..storage.interrupts import import_engines
from ..warehouse.warehouse import Warehouse
from .collector import imports_done
from .exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from .terminal import colour_wanted


def job_options(args: argparse.Namespace):
    """The job's options of `run`'s or `serve`'s arguments (flows/inputs/options.py); `--trec-run
    FILE` is `--source trec FILE`, so that a tracked run's parameters carry it as such."""
    from ..job.job import job_options as job_options_of  # deferred: after import_engines (start-up)

    options = job_options_of(values_of(args))
    trec_run = getattr(args, "trec_run", None)
    return options if trec_run is None else replace(options, source="trec", runs=trec_run)


def tracked(args: argparse.Namespace) -> bool:
    # Dask fan-out goes through prefect-dask, so it is always a tracked flow run.
    return args.prefect or bool(os.environ.get("PREFECT_API_URL")) or args.task_runner == "dask" or bool(args.dask_address)


def check_source_arguments(args: argparse.Namespace) -> None:
    """RUNS is read as --source says (run folders by default); --trec-run FILE is --source trec
    FILE. Another format names its INPUT; --qrels and --run-id are for those formats. A TREC
    run is read in this process (the Prefect steps read the others)."""
    if args.trec_run is not None:
        if args.runs is not None:
            raise InputError(f"run: give either RUNS ({args.runs}) or --trec-run, not both")
        if args.source != "native":
            raise InputError(f"run: --trec-run FILE is --source trec FILE: give either --source {args.source} or --trec-run")
        if args.qrels is None:
            raise InputError("run: --trec-run needs --qrels FILE (the judgments to evaluate it against)")
    elif args.source == "native":
        given = [option for option, value in (("--qrels", args.qrels), ("--run-id", args.run_id)) if value is not None]
        if given:
            raise InputError(f"run: {' and '.join(given)} {'are' if len(given) > 1 else 'is'} only for --trec-run FILE "
                             "or --source FORMAT INPUT")
        return
    elif args.runs is None:
        raise InputError(f"run: --source {args.source} needs INPUT, the file to read (run --source {args.source} INPUT)")


def cmd_run(args: argparse.Namespace) -> int:
    check_source_arguments(args)
    if tracked(args):
        return run_with_prefect(args)
    # The first run's file is parsed while Polars and DuckDB are imported (streamed when in a bucket).
    native = args.trec_run is None and args.source == "native"
    warehouse, committed = committed_warehouse(args.warehouse) if native else (None, {})
    first = first_cases_file(args.runs or config.RUNS, committed) if native else None
    with Prefetch(first) as prefetch:
        import_engines()
        from ..job.job import InProcess, run_job  # deferred: the job's engines import while Prefetch reads

        imports_done()
        steps = InProcess(prefetch)
        try:
            result = run_job(job_options(args), steps, warehouse)
        finally:
            steps.close()
    return print_run(args, result)


def committed_warehouse(location: str | os.PathLike) -> tuple[Warehouse | None, dict[str, dict]]:
    """The warehouse and its source records (`Warehouse.committed_sources`), read before the
    engines are imported; the job goes on from the state read here (it reads only the log
    entries after it). None and no records when the warehouse is not as it should be: the job
    opens it again, and says why in its turn. A store that cannot be reached is said now, as
    the job would say it: once, not after its retries ran twice."""
    try:
        warehouse = Warehouse(location)
        return warehouse, warehouse.committed_sources()
    except (InputError, OSError):
        return None, {}


def run_with_prefect(args: argparse.Namespace) -> int:
    """`run` as a tracked flow run; a lost API ends it with one warning line, the report of
    what the warehouse holds, and exit 2 (the gate's verdict when the run was committed)."""
    from ..job.prefect_settings import check_api, prefect_environment  # deferred: Prefect's settings, only when tracked

    prefect_environment()
    if os.environ.get("PREFECT_API_URL"):
        check_api(os.environ["PREFECT_API_URL"])  # before Prefect's import, which costs seconds
    import_engines()
    imports_done()
    from ..job.prefect_flows import LostApi, run_tracked  # deferred: Prefect's import costs seconds

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
    from ..inputs.baseline_file import read_baseline  # deferred: after import_engines (start-up)
    from ..job.job import InProcess, JobResult, checked_kb, newest_run_id, sources
    from ..outputs.reports import ReportOptions

    state = warehouse.state() if warehouse.exists() else None
    if state is None or not state.runs:
        return EXIT_BAD_INPUT
    committed = state.version > version_before
    steps = InProcess()
    try:
        baseline = read_baseline(options.gate.baseline) if options.gate and committed else None
        kb = checked_kb(options)
        report = steps.report(state, ReportOptions(options.warehouse, options.report_dir, kb, options.charts, baseline))
        gate = None
        if baseline is not None:
            newest = newest_run_id(sources(options))
            gate = steps.gate(state, newest, options.gate, baseline, kb)
    finally:
        steps.close()
    code = print_run(args, JobResult([], state, report, gate))
    return EXIT_FAILED if code == EXIT_FAILED else EXIT_BAD_INPUT


def print_run(args: argparse.Namespace, result) -> int:
    """The run's output in the mode asked for; the gate's verdict is in every mode: the whole gate
    after the report, under "gate" in --json (the document `gate --format json` prints), one
    line with --quiet."""
    from ...transforms.gate import gate_json  # deferred: after import_engines (start-up)
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
