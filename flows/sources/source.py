"""The seam between the job and the formats it reads (issue 33, "a source of run artifacts"):
a `RunSource` is one run's artifacts wherever they are stored; a source format turns what a
user named (a runs root, a TREC run file and its qrels, another tool's export) into the
`RunSource`s to evaluate. The job plans and ingests every run through this protocol alone.

Formats are found by name: the built-in ones here, then those another package registers under
the entry point group `retrieval_eval.sources` (the entry point loads a `SourceFormat`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol, runtime_checkable

from ...transforms.errors import InputError
from ...transforms.manifest import Manifest
from .artifacts import load_run_folders
from .strict_read import Prefetch
from .format_sources import FORMAT_SOURCES
from .trec_files import trec_source

ENTRY_POINT_GROUP = "retrieval_eval.sources"


class RunIngest(Protocol):
    """One read of a run's artifacts: iterate `batches()` (flows/sources/ingest.py
    `StagedBatch`: cases in the case schema) to the end, then read `account`
    (`IngestAccount`)."""

    account: object

    def batches(self) -> Iterator: ...


@runtime_checkable
class RunSource(Protocol):
    """One run's artifacts, local or in a bucket."""

    manifest: Manifest  # run_id, created_at, retrieval_top_k, config: all the plan needs of a run

    @property
    def run_id(self) -> str: ...

    @property
    def cases_uri(self) -> str:
        """The file the cases are read from, as the log and the `runs` row record it (an
        absolute path or a URI, never with credentials)."""

    def fingerprint(self) -> list:
        """What tells the stored artifacts apart without reading them (local: size, mtime,
        inode and ctime of each file; an object: size, etag and stored checksum). Equal to the
        committed one: the run's evaluation stands and nothing is read."""

    def cases_size(self) -> int:
        """The size in bytes of the cases file as stored (for progress)."""

    def local_cases_file(self, folder: Path) -> Path:
        """A local file with the cases file's bytes: the file itself when local, else the object
        streamed into a fresh folder below `folder`."""

    def byte_ranges(self, n: int) -> list[tuple[int, int]]:
        """The cases file cut into at most `n` ranges (start, end), in order, covering every
        byte, each of whole lines that can be evaluated on its own as a cases file
        (flows/job/byte_range_steps.py). One range when the source cannot be evaluated range
        by range (a .gz, a TREC run, another tool's export): it is then read whole by `ingest`."""

    def copy_range(self, start: int, end: int, folder: Path) -> Path:
        """A local file below `folder` holding bytes [start, end) of the cases file, read from
        where it is stored (ranged reads of an object): one of several `byte_ranges`."""

    def digest(self) -> str:
        """The digest of the run's artifacts as stored, equal to the one its `ingest` records
        (`account.facts.digest`), in one streaming pass that keeps nothing."""

    def ingest(self, scratch: Path, *, allow_rejects: bool, relevance_level: int, batch_items: int,
               committed_digest: str | None, prefetch: Prefetch | None = None) -> RunIngest:
        """The read that yields the run's cases in batches; remote bytes are fetched into
        `scratch` only once its batches are iterated."""


class SourceFormat(Protocol):
    """A format's reader: the runs of `location` (with `qrels` where the format keeps its gold
    apart, `run_id` naming a run that has no name of its own, `top_k` its headline k).
    `committed` is what the warehouse recorded of each run's artifacts (run id → the log's
    source record: `stamp`, `manifest`, ...): a reader may take what it would read from there
    when the stored file is the one recorded (same fingerprint), and may ignore it."""

    def __call__(self, location: str | Path, *, qrels: str | Path | None = None, run_id: str | None = None,
                 top_k: int, committed: Mapping[str, dict] | None = None) -> list[RunSource]: ...


def native_runs(location: str | Path, *, qrels: str | Path | None = None, run_id: str | None = None,
                top_k: int, committed: Mapping[str, dict] | None = None) -> list[RunSource]:
    """Run folders (SPEC 3): a runs root or one run folder; each run names itself and its k. In
    a bucket, a manifest whose object is the one a committed run recorded is not read again."""
    if qrels is not None or run_id is not None:
        raise InputError("run folders carry their own gold and run ids: --qrels and --run-id are for other formats")
    return load_run_folders(location, committed)


def trec_runs(location: str | Path, *, qrels: str | Path | None = None, run_id: str | None = None,
              top_k: int, committed: Mapping[str, dict] | None = None) -> list[RunSource]:
    """One TREC run file and its qrels (SPEC 12)."""
    if qrels is None:
        raise InputError(f"{location}: a TREC run needs --qrels FILE (the judgments to evaluate it against)")
    return [trec_source(location, qrels, run_id, top_k=top_k)]


# native and trec, then other tools' formats (flows/sources/format_sources.py, SPEC 15)
BUILT_IN: dict[str, SourceFormat] = {"native": native_runs, "trec": trec_runs, **FORMAT_SOURCES}


def source_format(name: str) -> SourceFormat:
    """The reader of format `name`: a built-in one, else the one registered under the entry
    point group `retrieval_eval.sources` by that name; an unknown name is bad input naming the
    formats there are."""
    if name in BUILT_IN:
        return BUILT_IN[name]
    registered = {entry.name: entry for entry in entry_points(group=ENTRY_POINT_GROUP)}
    if name in registered:
        return registered[name].load()
    known = ", ".join([*BUILT_IN, *sorted(registered)])
    raise InputError(f"no source format {name!r}: the formats are {known} (a package adds one under the entry "
                     f"point group {ENTRY_POINT_GROUP})")
