"""Ingest: one run's cases file → staged cases in batches, and the account of its records.

The fast path is one streaming read (flows/sources/case_file.py: the strict parser, or Arrow's JSON
reader) whose tables are staged in Polars (transforms/staging.py). It holds when the read and
the file's facts agree (one record per line, nothing JSON forbids, no case id twice); otherwise — or when a record
breaks a rule — every line is judged by the rules of transforms/records.py, the valid lines
are written to a clean copy, and that copy is read and staged instead. Each staged batch says
which attempt made it, so a caller that evaluated batches of the first attempt drops them.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

import polars as pl

from ...transforms.case_schema import CLEAN_CASES_SCHEMA
from ...transforms.errors import InputError, NotClean, Reject
from ...transforms.records import MAX_RECORD_BYTES, judge_line
from ...transforms.staging import stage
from ..storage.errors import ObjectChanged
from .case_file import BLOCK_BYTES, CaseFileRead, FileFacts, bounded_lines, open_text_lines
from .reject_stream import RejectFiles, RejectStream
from .stored_file import Download, StoredFile, StreamedObject
from .strict_read import StrictParse, streamable

# In-process, staged cases are evaluated in batches of about this many retrieved items
# (25k cases × 20 items; a batch's frames stay within a few hundred MB).
BATCH_ITEMS = 500_000
# For scale-out a batch is one staged partition and one task: larger, as a task costs about
# 0.1 s on Dask (about 220 MB of JSON each).
PARTITION_ITEMS = 1_000_000
FAST, LINE_BY_LINE = 0, 1  # the attempts


@dataclass(frozen=True)
class StagedBatch:
    attempt: int
    index: int
    frame: pl.DataFrame


@dataclass(frozen=True)
class IngestAccount:
    """What became of a cases file's records once its batches were all taken."""

    facts: FileFacts
    attempt: int  # the attempt whose batches are the run's
    n_records: int  # records staged (the valid ones)
    rejects: RejectFiles = RejectFiles()
    refused: bool = False  # rejects in strict mode: nothing of the run is loaded
    same_bytes: bool = False  # the bytes are those already committed: the read was stopped
    tag: str | None = None  # the run's name for itself where its format has one (a TREC run's tag)


class RejectSink(Protocol):
    """Where rejects go as they are found: a list, or a RejectStream (which writes them out)."""

    def append(self, reject: Reject) -> None: ...
    def extend(self, rejects: Iterable[Reject]) -> None: ...
    def __len__(self) -> int: ...


@dataclass
class LineAccount:
    """What became of every line of one cases file: loaded + rejected + blank = lines."""

    lines: int = 0
    blank: int = 0
    valid: int = 0
    longest_valid: int = 0  # bytes of the longest valid line
    rejects: RejectSink = field(default_factory=list)


def split_records(path: Path, display_name: str, clean_out: IO[bytes], rejects: RejectSink | None = None) -> LineAccount:
    """Judge every line of `path`; write the valid records, as Arrow's reader takes them, to
    `clean_out`, and the rejects to `rejects` (a new list when None)."""
    account = LineAccount(rejects=[] if rejects is None else rejects)
    first_line_of: dict[str, int] = {}
    with open_text_lines(path) as stream:
        for number, (line, overlong) in enumerate(bounded_lines(stream), start=1):
            account.lines = number
            raw = line.decode("utf-8", errors="replace").rstrip("\r\n")
            if overlong:
                account.rejects.append(
                    Reject(display_name, number, f"record longer than {MAX_RECORD_BYTES} bytes", raw[:1024])
                )
                continue
            if not line.strip(b" \t\r\n"):  # blank: JSON whitespace only
                account.blank += 1
                continue
            verdict = judge_line(line)
            reason = verdict.reason
            if reason is None and verdict.case_id in first_line_of:
                reason = f"case_id {verdict.case_id!r} repeats line {first_line_of[verdict.case_id]}"
            if reason:
                account.rejects.append(Reject(display_name, number, reason, raw))
                continue
            first_line_of[verdict.case_id] = number
            account.valid += 1
            account.longest_valid = max(account.longest_valid, len(verdict.clean))
            clean_out.write(verdict.clean)
    return account


def clean_batches(clean: Path, longest_valid: int, batch_items: int, relevance_level: int,
                  attempt: int = LINE_BY_LINE) -> Iterator[StagedBatch]:
    """The staged batches of a clean copy (records that passed the rules, as `split_records`
    writes them; `longest_valid` bytes its longest line); returns how many cases were staged."""
    n_records = 0
    block_bytes = max(BLOCK_BYTES, longest_valid + 1)
    with CaseFileRead(clean, schema=CLEAN_CASES_SCHEMA, block_bytes=block_bytes, scan=False) as read:
        for index, table in enumerate(read.tables(batch_items)):
            staged = stage(table, relevance_level)
            n_records += staged.height
            yield StagedBatch(attempt, index, staged)
    return n_records


class RunIngestBase:
    """What every ingest of a run is given, whatever it reads (a cases file here, a TREC run
    in flows/sources/trec_files.py, another tool's input in flows/sources/format_sources.py):
    a scratch folder of its transaction, whether rejects are allowed, the relevance level, the
    retrieved items per batch and the digest of the bytes committed for the run, if any; its
    `account` once its batches were all taken."""

    def __init__(self, scratch: Path, *, allow_rejects: bool, relevance_level: int, batch_items: int,
                 committed_digest: str | None) -> None:
        self.scratch = scratch
        self.allow_rejects = allow_rejects
        self.relevance_level = relevance_level
        self.batch_items = batch_items
        self.committed_digest = committed_digest
        self.account: IngestAccount | None = None


class Ingest(RunIngestBase):
    """One run's ingest. Iterate `batches()` to the end, then read `account`.

    `cases` is a local cases file, or a stored one (flows/sources/stored_file.py) named by its
    location in every message, which is streamed on a thread of its own while the read takes
    it (from memory; or from a file downloaded into `scratch` for a .gz, or for the
    line-by-line rules, checked to hold the bytes streamed), stopped when the batches are closed;
    `read` is the strict parser's read of the cases file when one was started ahead (the CLI's
    prefetch), taken over here;
    `committed_digest` is the digest of the bytes the warehouse holds for the run, if any:
    when the file turns out to hold those very bytes (a touched file), the read stops early
    and the account says `same_bytes`."""

    def __init__(self, cases: Path | StoredFile, scratch: Path, *, allow_rejects: bool, relevance_level: int = 1,
                 batch_items: int = BATCH_ITEMS, read: StrictParse | None = None,
                 committed_digest: str | None = None) -> None:
        super().__init__(scratch, allow_rejects=allow_rejects, relevance_level=relevance_level, batch_items=batch_items,
                         committed_digest=committed_digest)
        self.cases = cases
        self.shown = cases.location if isinstance(cases, StoredFile) else str(cases)
        self.cases_file: Path | None = cases  # None: an object, streamed (or copied) when the batches are asked for
        if isinstance(cases, StoredFile):
            self.cases_file = cases.path if cases.is_local else None
        self._read = read

    def batches(self) -> Iterator[StagedBatch]:
        download = None
        if self.cases_file is None and self._read is None:  # an object in a bucket, not read yet
            if streamable(self.cases.name):
                download = self.cases.stream()
            else:
                download = self.cases.download(self.scratch)
                self.cases_file = download.path
        try:
            yield from self._batches(download)
        except (EOFError, zlib.error, OSError) as error:
            # Python's gzip reports a .gz cut short (EOFError) or damaged (zlib.error), Arrow's
            # reader either as an OSError without an errno ("Truncated compressed stream");
            # none names the file. An OSError of the system (a full disk) is not the file's.
            if isinstance(error, OSError) and (not self.shown.endswith(".gz") or error.errno is not None):
                raise
            raise InputError(f"{self.shown}: not a readable gzip file ({error})") from None
        finally:
            if download is not None:
                download.close()

    def _batches(self, download: Download | StreamedObject | None) -> Iterator[StagedBatch]:
        read = CaseFileRead(self.cases_file, download=download, started=self._read)
        self._read = None
        if self.committed_digest:  # the same bytes, once known, stop the read
            read.digest_early()
        with read:
            facts = None
            try:
                n_records, case_hashes = 0, []
                for index, table in enumerate(read.tables(self.batch_items)):
                    if self.committed_digest and read.facts_ready() and read.facts().digest == self.committed_digest:
                        self.account = IngestAccount(read.facts(), FAST, 0, same_bytes=True)
                        return
                    staged = stage(table, self.relevance_level)
                    # 64-bit hashes, not the ids: holding a batch's column would hold its buffers;
                    # a collision only sends the file to the exact line-by-line pass.
                    case_hashes.append(staged["case_id"].hash())
                    n_records += staged.height
                    yield StagedBatch(FAST, index, staged)
                facts = read.facts()
                repeated = n_records and pl.concat(case_hashes).n_unique() < n_records
                if facts.fast_read_holds(n_records) and not repeated:
                    if n_records == 0:
                        raise InputError(f"{self.shown}: holds no records")
                    self.account = IngestAccount(facts, FAST, n_records, same_bytes=facts.digest == self.committed_digest)
                    return
            except NotClean:
                pass
            facts = facts or read.facts()
        if facts.digest == self.committed_digest:
            self.account = IngestAccount(facts, FAST, 0, same_bytes=True)
            return
        yield from self._line_by_line(facts)

    def _line_by_line(self, facts: FileFacts) -> Iterator[StagedBatch]:
        if self.cases_file is None:  # streamed from its bucket: the rules read a local copy of the same bytes
            self.cases_file = self._local_copy(facts.digest)
        clean = self.scratch / "clean.jsonl"
        stream = RejectStream(self.scratch)
        with open(clean, "wb") as clean_out:
            lines = split_records(self.cases_file, self.shown, clean_out, stream)
        rejects = stream.finish()
        if lines.valid + rejects.count == 0:
            raise InputError(f"{self.shown}: holds no records")
        if rejects.count and not self.allow_rejects:
            self.account = IngestAccount(facts, LINE_BY_LINE, 0, rejects, refused=True)
            clean.unlink()
            return
        n_records = yield from clean_batches(clean, lines.longest_valid, self.batch_items, self.relevance_level)
        if n_records != lines.valid:
            raise RuntimeError(f"{self.shown}: records that passed the rules failed the fast path's checks")
        clean.unlink()
        self.account = IngestAccount(facts, LINE_BY_LINE, n_records, rejects)

    def _local_copy(self, digest: str) -> Path:
        """The object fetched a second time, whole, into the scratch folder: the bytes its
        stream read (`digest`), or ObjectChanged."""
        download = self.cases.download(self.scratch)
        copy = download.finish()
        if "blake3:" + download.checksum(0) != digest:
            raise ObjectChanged(f"{self.shown}: changed while it was read; run again")
        return copy

