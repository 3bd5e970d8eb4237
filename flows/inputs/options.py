"""The options of the main job, defined once (SPEC 16 "Options mean the same in every mode").

`OPTIONS` is the one list. From it come the arguments of `run`, `serve` and `gate`
(flows/commands/cli.py), the Prefect flow's parameters (flows/job/prefect_flows.py `job_flow`, whose
signature is `flow_signature()`), the parameters `serve` deploys, and the parameters
prefect.yaml must hold (`deployment_parameters()`; tests/test_options_in_every_mode.py holds the
committed file to it). flows/job/job.py `job_options` turns values by name (a command's arguments, a
flow run's parameters) into the job's typed options, and `flow_parameters` turns them back.
"""

from __future__ import annotations

import argparse
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from ..storage.locations import LocationError, parse_location
from . import config

MAX_INT = 2**31 - 1  # k, and every other count a user gives
DECISIONS = ("point", "significant", "non-inferior")


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(part) for part in text.split(","))  # an empty item is refused, not skipped
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


def input_location(given: str | Path) -> Path | str:
    """A location an input is read from, as the user gave it (SPEC 14): a local path (a
    `file://` URI names one), or a bucket's URI kept as its text (a Path would spoil it:
    `s3:/bucket/key`)."""
    if isinstance(given, Path) or "://" not in given:
        return Path(given)
    location = parse_location(given)
    return Path(str(location)) if location.is_local else given


def location_argument(text: str) -> Path | str:
    """An argparse type: `input_location`, a location that cannot be parsed being a usage error
    that says why (an unknown scheme, credentials in the URI)."""
    try:
        return input_location(text)
    except LocationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


positive_int = bounded(int, 1, MAX_INT, f"an integer in [1, {MAX_INT}]")
fraction = bounded(float, 0.0, 1.0, "a number in [0, 1]")
# A test at alpha 0 never rejects, at 1 always: both ends are refused.
significance_level = bounded(float, math.nextafter(0.0, 1.0), math.nextafter(1.0, 0.0),
                             "a significance level strictly between 0 and 1")

# The bounds of the flow's parameters, the CLI's: a deployment's parameters are checked as the
# command's arguments are.
COUNT = {"ge": 1, "le": MAX_INT}
FRACTION = {"ge": 0.0, "le": 1.0}
SIGNIFICANCE_LEVEL = {"gt": 0.0, "lt": 1.0}

JOB, GATE = ("run", "serve"), ("run", "serve", "gate")
# The other commands that read a warehouse (`baseline refresh`, `warehouse check`: a command and
# its subcommand).
READERS = ("baseline refresh", "query", "warehouse check", "warehouse rebuild", "warehouse vacuum", "compare", "export")


@dataclass(frozen=True)
class Option:
    """One option: the flow parameter and prefect.yaml key `name`, the CLI's `--name-with-dashes`
    in `commands` (none: the flow's only)."""

    name: str
    kind: type  # of the flow parameter's value (a path is its text), or of each item with `many`
    default: Any  # the flow's default (a JSON value), and the CLI's unless `cli_default` says otherwise
    help: str
    commands: tuple[str, ...] = ()
    parse: Callable[[str], Any] | None = None  # the CLI's argparse type (a bool is a switch)
    choices: tuple[str, ...] | None = None
    cli_default: Mapping[str, Any] = field(default_factory=dict)  # per command
    cli_help: Mapping[str, str] = field(default_factory=dict)  # per command
    deployed: Any = None  # prefect.yaml's value, when it is not `default`
    bounds: Mapping[str, Any] = field(default_factory=dict)  # pydantic's Field constraints
    many: bool = False  # a list of `kind`
    positional: bool = False

    @property
    def annotation(self) -> Any:
        """The flow parameter's type; a default of None makes it optional."""
        from pydantic import Field  # deferred: only the flow's signature needs it, never the CLI's parser

        if self.choices:
            kind: Any = Literal[self.choices]
        elif self.bounds:
            kind = Annotated[self.kind, Field(**self.bounds)]
        else:
            kind = self.kind
        if self.many:
            kind = list[kind]
        return kind | None if self.default is None else kind

    @property
    def switch(self) -> bool:
        """A yes/no option: the CLI's flag takes no value. (Told without `annotation`, which
        imports pydantic, which no command's start needs.)"""
        return self.kind is bool and not self.many and self.default is not None

    @property
    def flag(self) -> str:
        return self.name if self.positional else "--" + self.name.replace("_", "-")

    def default_for(self, command: str) -> Any:
        return self.cli_default.get(command, self.default)


KB_HELP = f"knowledge base cards.jsonl (default: {config.KB} when present)"

OPTIONS: tuple[Option, ...] = (
    Option("runs", str, str(config.RUNS), "runs root or one run folder; with --source, the input file (a path, or a URI: "
           "s3://bucket/runs)", JOB,
           parse=location_argument,
           cli_default={"run": None}, positional=True),
    Option("source", str, "native", "the format of RUNS: native (run folders), trec (a TREC run; --trec-run is its "
           "alias), or another tool's stored results as one INPUT file: beir, ranx, ragas, mlflow, deepeval, "
           "openinference (a package may register more)", JOB),
    Option("qrels", str, None, "the judgments of a --source input that keeps its gold apart (trec, beir, ranx, "
           "openinference: TREC qrels, a BEIR TSV, ranx JSON or JSONL gold; a path or a URI)", JOB,
           parse=location_argument),
    Option("run_id", str, None, "the run id of a --source input (default: its file name without extension)", JOB),
    Option("kb", str, None, KB_HELP + ": gold ids that are not cards are flagged in the report",
           (*JOB, "gate"), parse=location_argument,
           cli_help={"gate": "knowledge base cards.jsonl to tell apart flips whose gold is not a card (default: "
                             "the KB the run was judged against)"}),
    Option("warehouse", str, str(config.WAREHOUSE), "the warehouse: a folder, or a URI (s3://bucket/warehouse)",
           GATE + READERS, parse=input_location),
    Option("report_dir", str, str(config.REPORT_DIR), "where report.md, report.html and the charts are written "
           "(a folder, or a URI: s3://bucket/prefix)", JOB, parse=str),
    Option("k", int, None, f"headline k (default: each run's retrieval_top_k; {config.TREC_TOP_K} for "
           "--trec-run and every --source but native)", JOB, parse=positive_int, bounds=COUNT),
    Option("ks", int, None, "k sweep, e.g. 1,2,3,5,10 (default: the headline k only)", JOB,
           parse=parse_ks, bounds=COUNT, many=True),
    Option("relevance_level", int, 1, "the least grade a graded card needs to count as relevant", JOB,
           parse=positive_int, bounds=COUNT),
    Option("allow_rejects", bool, False, "load the valid records of a run with rejects", JOB),
    Option("baseline", str, None, "gate the newest run against this snapshot (exit 1 when it fails; "
           "default: no gate)", (*GATE, "baseline floors"), parse=location_argument,
           cli_default={"gate": str(config.BASELINE), "baseline floors": str(config.BASELINE)},
           cli_help={"gate": "the baseline snapshot", "baseline floors": "the baseline snapshot"},
           deployed=str(config.BASELINE)),
    Option("tolerance", float, config.TOLERANCE, "allowed drop on `all`", GATE, parse=fraction,
           bounds=FRACTION),
    Option("locale_tolerance", float, config.LOCALE_TOLERANCE, "allowed drop on each locale", GATE,
           parse=fraction, bounds=FRACTION),
    Option("min_hit", float, None, "absolute floor for hit@k on `all` (off unless given)", GATE,
           parse=fraction, bounds=FRACTION),
    Option("min_recall", float, None, "absolute floor for recall@k on `all` (off unless given)", GATE,
           parse=fraction, bounds=FRACTION),
    Option("allow_missing_cases", bool, False, "pass although cases of the baseline are missing from the run", GATE),
    Option("decision", str, "point",
           "point: fail on a drop past the tolerance; significant: and a paired test at --alpha (Holm over the gated "
           "lines) tells it from noise; non-inferior: pass only when the paired 95% interval's lower bound is above "
           "−tolerance", GATE, choices=DECISIONS),
    Option("alpha", float, 0.05, "significance level of --decision significant", GATE,
           parse=significance_level, bounds=SIGNIFICANCE_LEVEL),
    Option("charts", bool, True, "draw the report's charts"),
    Option("batch_items", int, None, "retrieved items per staged partition (default: the job's own)",
           bounds=COUNT),
)
BY_NAME = {option.name: option for option in OPTIONS}


def options_of(command: str) -> list[Option]:
    return [option for option in OPTIONS if command in option.commands]


def add_arguments(parser: argparse.ArgumentParser, command: str, names: list[str] | None = None) -> None:
    """The arguments of `command`'s options (those in `names` only, when given)."""
    for option in options_of(command):
        if names is not None and option.name not in names:
            continue
        default = option.default_for(command)
        text = option.cli_help.get(command, option.help).replace("%", "%%")  # argparse formats help with %
        if option.switch:
            parser.add_argument(option.flag, action="store_true", help=text)
        elif option.positional:
            parser.add_argument(option.flag, nargs="?", type=option.parse, default=default,
                                help=text + ("" if default is not None else f" (default: {option.default})"))
        else:
            parser.add_argument(option.flag, type=option.parse, choices=option.choices, default=default, help=text)


def values_of(args: argparse.Namespace) -> dict[str, Any]:
    """The option values a command was given, by name."""
    return {option.name: getattr(args, option.name) for option in OPTIONS if hasattr(args, option.name)}


def flow_signature() -> inspect.Signature:
    """The flow's signature: one keyword parameter per option, typed, with its default."""
    return inspect.Signature([
        inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=option.default,
                          annotation=option.annotation)
        for option in OPTIONS
    ])


def flow_docstring(summary: str) -> str:
    """`summary` and an Args section (Prefect shows each parameter's line in its UI)."""
    lines = [summary, "", "Args:"]
    lines += [f"    {option.name}: {option.help}" for option in OPTIONS]
    return "\n".join(lines) + "\n"


def deployment_parameters() -> dict[str, Any]:
    """The nightly deployment's parameters (prefect.yaml): every option, at its default but for
    the baseline it gates against."""
    return {option.name: option.default if option.deployed is None else option.deployed for option in OPTIONS}
