"""A TREC run file and its qrels as one run of the main job (SPEC 12 `run --trec-run FILE
--qrels FILE`): the source the job plans (`TrecSource`, in place of a run folder) and its
ingest (`TrecIngest`), which yields the same staged batches as a cases file's, so planning,
evaluation, the commit, the report and the gate are the job's own. The reading rules and
where they differ from trec_eval are transforms/trec.py's.

A run file streams in blocks of whole lines, each parsed while the one before is ranked, so
memory holds a few blocks and one batch of cases whatever the file's size. Its topics are
taken to be contiguous, as runs are written; a topic whose lines resume after another began
stops that read, and the file is read again with its rows put in topic order by DuckDB on
disk (the batches of the first attempt are then dropped by the job, as for a cases file).
"""

from __future__ import annotations

import gzip
import io
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import numpy as np
import polars as pl

from ... import sql
from ...transforms.errors import InputError, NotClean, Reject
from ...transforms.manifest import Manifest, is_safe_run_id
from ...transforms.records import MAX_RECORD_BYTES
from ...transforms.staging import stage
from ...transforms.trec import (
    NEWLINE,
    ROW_SCHEMA,
    Block,
    TopicCameBack,
    case_table,
    finished_topics,
    judged_topics,
    judgments,
    qrels_rows,
    rank_topics,
    run_rows,
    unretrieved_cases,
)
from ..storage.duckdb_connection import connect
from ..storage.hashing import HashingStream, file_digest
from .case_file import FileFacts
from .strict_read import Prefetch
from .ingest import BATCH_ITEMS, IngestAccount, RejectSink, RunIngestBase, StagedBatch
from .reject_stream import RejectStream
from .one_input import OneInputSource, artifacts_digest
from .stored_file import StoredFile

# Blocks of this many bytes of whole lines are parsed at a time (about 170k run lines):
# 4 to 16 MiB cost the same CPU, and the peak memory grows with the block.
BLOCK_BYTES = 8 << 20
# A longer line is a reject, never held whole (the record limit of a cases file).
MAX_LINE_BYTES = MAX_RECORD_BYTES
RAW_KEEP_BYTES = 1024  # of an overlong line, kept in `rejects`
# Rows fetched at a time from the sort that puts a run's rows in topic order.
SORT_FETCH_ROWS = 1 << 20
IN_FILE_ORDER, BY_TOPIC = 0, 1  # the attempts
T = TypeVar("T")


@dataclass(frozen=True)
class TrecSource(OneInputSource):
    """A TREC run file (`input`) and its qrels, local or in a bucket: a source of run artifacts
    (flows/sources/source.py `RunSource`) with a manifest made of the files, the run file in
    place of a cases file, both files fingerprinted."""

    qrels: StoredFile

    def fingerprint(self) -> list:
        return [self.input.fingerprint(), self.qrels.fingerprint()]

    def ingest(self, scratch: Path, *, allow_rejects: bool, relevance_level: int, batch_items: int,
               committed_digest: str | None, prefetch: Prefetch | None = None) -> TrecIngest:
        return TrecIngest(self, scratch, allow_rejects=allow_rejects, relevance_level=relevance_level,
                          batch_items=batch_items, committed_digest=committed_digest)


def run_id_of(run_file: str | Path) -> str:
    """A run file's default run id (a path's or a URI's): its name without `.gz` and then
    without its extension."""
    return Path(str(run_file).rstrip("/").rsplit("/", 1)[-1].removesuffix(".gz")).stem


def existing_input(given: Path | str, option: str) -> StoredFile:
    """The input file a user named with `option` (a local path or a URI), refused when it is
    not there; a remote one is asked about once (its HEAD), and that answer is kept."""
    stored = StoredFile.at(given)
    if not stored.exists():
        raise InputError(f"{given if stored.is_local else stored.location}: no such file ({option})")
    return stored if stored.is_local else StoredFile(stored.location, stored.head())


def input_manifest(source: StoredFile, given: Path | str, run_id: str | None, *, top_k: int, config: dict) -> Manifest:
    """The manifest of a run read from one input file that has none of its own: run id
    `run_id` or the file's (`run_id_of`), created_at the file's modification time (an
    object's as the store says), retrieval_top_k `top_k`. An unsafe run id is refused."""
    name = run_id if run_id is not None else run_id_of(source.location)
    if not is_safe_run_id(name):
        named = "--run-id" if run_id is not None else f"the name of {given}"
        raise InputError(f"{named}: run id {name!r} is not a safe name ([A-Za-z0-9._-]+); give one with --run-id")
    if source.is_local:
        created = datetime.fromtimestamp(source.path.stat().st_mtime, UTC)
    else:
        created = source.head().modified.astimezone(UTC)
    return Manifest(name, created.isoformat().replace("+00:00", "Z"), created, top_k, None, None, config)


def trec_source(run_file: Path | str, qrels: Path | str, run_id: str | None = None, *, top_k: int) -> TrecSource:
    """The source of `run --trec-run run_file --qrels qrels` (each a local path or a URI): the
    run's manifest is `input_manifest`'s of the run file. Bad input (a missing file, an unsafe
    run id) is refused here, before anything is written."""
    run = existing_input(run_file, "--trec-run")
    judged = existing_input(qrels, "--qrels")
    manifest = input_manifest(run, run_file, run_id, top_k=top_k,
                              config={"source": "trec", "trec_run": run.location, "qrels": judged.location})
    return TrecSource(manifest, run, judged)


# ---------------------------------------------------------------- blocks of lines


@dataclass
class _Read:
    """What one pass over a file finds beside its blocks: once the last block is taken, the
    BLAKE3 of its bytes as stored."""

    digest: str | None = None


def _blocks(path: Path, display_name: str, read: _Read, block_bytes: int = BLOCK_BYTES) -> Iterator[Block]:
    """The file (decompressed when .gz) as blocks of whole lines of about `block_bytes`. A line
    longer than MAX_LINE_BYTES is left blank (so line numbers hold) and becomes a reject of its
    block; `read.digest` is set when the last block is taken."""
    first_line = 1
    with open(path, "rb") as raw:
        hashing = HashingStream(raw)
        stream = gzip.GzipFile(fileobj=hashing) if path.suffix == ".gz" else io.BufferedReader(hashing)
        with stream:
            while data := stream.read(block_bytes):
                overlong = ()
                if not data.endswith(b"\n"):
                    # Finish the block's last line; one read, unless the line is overlong.
                    rest = stream.readline(MAX_LINE_BYTES)
                    line_start = data.rfind(b"\n") + 1
                    if len(data) - line_start + len(rest) > MAX_LINE_BYTES and not rest.endswith(b"\n"):
                        head = (data[line_start:] + rest)[:RAW_KEEP_BYTES].decode("utf-8", errors="replace")
                        while rest and not rest.endswith(b"\n"):  # skip the rest, never holding it
                            rest = stream.readline(MAX_LINE_BYTES)
                        line = first_line + data.count(b"\n", 0, line_start)
                        overlong = (Reject(display_name, line, f"line longer than {MAX_LINE_BYTES} bytes", head),)
                        data = data[:line_start] + b"\n"
                    else:
                        data += rest
                n_newlines = int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == NEWLINE))
                n_lines = n_newlines + (0 if data.endswith(b"\n") else 1)
                yield Block(data, first_line, n_lines, overlong)
                first_line += n_lines
            stream.read()  # a .gz's trailer, so that the digest covers every byte
    read.digest = hashing.digest.hexdigest()


_END = object()


def _read_ahead(items: Iterator[T]) -> Iterator[T]:
    """`items`, the next one made in a worker thread while the caller works on this one (file
    reads and Polars release the GIL, so reading, parsing and ranking overlap); the worker is
    joined when the caller stops."""
    with ThreadPoolExecutor(max_workers=1) as worker:
        ahead = worker.submit(next, items, _END)
        while (item := ahead.result()) is not _END:
            ahead = worker.submit(next, items, _END)
            yield item


# ---------------------------------------------------------------- qrels


@dataclass(frozen=True)
class Qrels:
    judged: pl.DataFrame  # transforms/trec.py JUDGED_SCHEMA: one row per judged topic
    rejects: RejectSink  # its malformed lines, in line order
    digest: str


def read_qrels(path: Path, display_name: str | None = None, rejects: RejectSink | None = None) -> Qrels:
    """The judgments of a qrels file by topic, its malformed lines as rejects (line order,
    into `rejects`, a new list when None) and its digest. A file without any judgment or
    malformed line is bad input."""
    name = display_name or str(path)
    rejects = [] if rejects is None else rejects
    read = _Read()
    parts = []
    for block in _blocks(path, name, read):
        rows, malformed = qrels_rows(block, name)
        parts.append(rows)
        rejects.extend(malformed)
    judged = judged_topics(judgments(parts))
    if judged.height == 0 and not len(rejects):
        raise InputError(f"{name}: holds no judgments (qid iter docno rel)")
    return Qrels(judged, rejects, read.digest)


# ---------------------------------------------------------------- run files


class TrecRunRead:
    """One read of a run file: `topics()` yields frames of ranked topics (transforms/trec.py
    TOPIC_SCHEMA), every topic in one frame; once they are all taken, `rejects`, `lines`,
    `n_duplicates` and `digest` tell the file. In file order (`in_file_order`) it raises
    TopicCameBack when the topics are not contiguous; otherwise the rows are put in topic
    order on disk under `spill_dir` first, and the topics come in qid order. Rejects go to
    `rejects` as they are found, in line order (a new list when None)."""

    def __init__(self, path: Path, display_name: str | None = None, spill_dir: Path | None = None,
                 block_bytes: int | None = None, rejects: RejectSink | None = None) -> None:
        self.path = path
        self.display_name = display_name or str(path)
        self.spill_dir = spill_dir
        self.block_bytes = block_bytes or BLOCK_BYTES
        self.rejects: RejectSink = [] if rejects is None else rejects
        self.lines = 0
        self.n_duplicates = 0
        self.digest: str | None = None
        self.tag: str | None = None  # the tag of the last valid line: the run's name for itself (trec_eval's runid)

    def topics(self, in_file_order: bool = True) -> Iterator[pl.DataFrame]:
        rows = self._parsed_rows() if in_file_order else self._rows_by_topic()
        finished: set[str] = set()
        open_rows: pl.DataFrame | None = None
        try:
            for block_rows in rows:
                if block_rows.is_empty():
                    continue
                ready = block_rows if open_rows is None else pl.concat([open_rows, block_rows])
                done, open_rows = finished_topics(ready, finished)
                yield from self._counted(done)
            if open_rows is not None:
                yield from self._counted(rank_topics(open_rows))
        except TopicCameBack:
            if in_file_order:
                raise
            raise RuntimeError(f"{self.display_name}: the rows put in topic order came back out of order") from None

    def _counted(self, topics: pl.DataFrame) -> Iterator[pl.DataFrame]:
        if topics.height:
            self.n_duplicates += int(topics["n_duplicates"].sum())
            yield topics

    def _parsed_rows(self) -> Iterator[pl.DataFrame]:
        """The valid rows (qid, docno, score) of each block in file order; the next block is
        read and parsed in worker threads while this one is ranked."""
        self.lines, self.n_duplicates = 0, 0
        read = _Read()
        blocks = _read_ahead(_blocks(self.path, self.display_name, read, self.block_bytes))
        parsed = ((block.n_lines, *run_rows(block, self.display_name)) for block in blocks)
        for n_lines, rows, rejects, last_tag in _read_ahead(parsed):
            self.rejects.extend(rejects)
            self.lines += n_lines
            self.tag = last_tag if last_tag is not None else self.tag
            yield rows
        self.digest = read.digest

    def _rows_by_topic(self) -> Iterator[pl.DataFrame]:
        """Every valid row, in qid order (sql/trec_rows_by_topic.sql): the blocks' rows are
        written as Parquet under `spill_dir`, and DuckDB sorts them there within its memory
        cap (flows/storage/duckdb_connection.py), spilling beyond it."""
        with tempfile.TemporaryDirectory(prefix="trec-sort-", dir=self.spill_dir) as scratch:
            parts = []
            for number, rows in enumerate(self._parsed_rows()):
                if rows.height:
                    parts.append(str(Path(scratch) / f"rows-{number:06d}.parquet"))
                    rows.write_parquet(parts[-1], compression="lz4", statistics=False)
            if not parts:
                return
            with connect(Path(scratch)) as con:
                # con.sql, not con.execute: the latter streamed an ORDER BY out of order
                # (duckdb 2.0.1); finished_topics would say so.
                ordered = con.sql(sql.load("trec_rows_by_topic"), params={"files": parts})
                for batch in ordered.to_arrow_reader(SORT_FETCH_ROWS):
                    yield pl.from_arrow(batch).cast(ROW_SCHEMA)


# ---------------------------------------------------------------- ingest


class TrecIngest(RunIngestBase):
    """The ingest of a TREC run (the interface of flows/sources/ingest.py `Ingest`): iterate
    `batches()` to the end, then read `account`. Cases are staged in batches of about
    `batch_items` retrieved documents; the judged topics the run lacks come last. Every
    line of both files is accounted for; with rejects and not `allow_rejects`, the read goes
    on to name them all but no batch is yielded, and the account says `refused`."""

    def __init__(self, source: TrecSource, scratch: Path, *, allow_rejects: bool, relevance_level: int = 1,
                 batch_items: int = BATCH_ITEMS, committed_digest: str | None = None,
                 block_bytes: int | None = None) -> None:
        super().__init__(scratch, allow_rejects=allow_rejects, relevance_level=relevance_level, batch_items=batch_items,
                         committed_digest=committed_digest)
        self.source = source
        self.block_bytes = block_bytes

    def batches(self) -> Iterator[StagedBatch]:
        run_file, shown = self.source.input.local_copy(self.scratch), self.source.input.location
        qrels_file = self.source.qrels.local_copy(self.scratch)
        qrels = read_qrels(qrels_file, self.source.qrels.location, rejects=RejectStream(self.scratch, "qrels-rejects"))
        if self.committed_digest is not None:  # only then is a first pass over the run worth its cost
            digest = artifacts_digest(file_digest(run_file), qrels.digest)
            if digest == self.committed_digest:
                self.account = IngestAccount(FileFacts(digest, 0, 0, True), IN_FILE_ORDER, 0, same_bytes=True)
                return
        run_rejects = RejectStream(self.scratch, "run-rejects")
        for attempt in (IN_FILE_ORDER, BY_TOPIC):
            read = TrecRunRead(run_file, shown, spill_dir=self.scratch, block_bytes=self.block_bytes,
                               rejects=run_rejects)
            try:
                n_records = yield from self._staged(attempt, read, qrels)
            except TopicCameBack:
                run_rejects.discard()  # the read starts over, and finds them again
                continue
            break
        rejects = qrels.rejects.finish() + run_rejects.finish()
        # Of an ingest's facts only the digest is read (flows/job/run_steps.py); a TREC file has no JSON lines.
        facts = FileFacts(artifacts_digest(read.digest, qrels.digest), read.lines, 0, True)
        refused = bool(rejects.count) and not self.allow_rejects
        self.account = IngestAccount(facts, attempt, 0 if refused else n_records, rejects, refused=refused, tag=read.tag)

    def _staged(self, attempt: int, read: TrecRunRead, qrels: Qrels) -> Iterator[StagedBatch]:
        """Staged batches of the run's topics and then of the judged topics it lacks; returns
        the number of cases staged."""
        ran: list[pl.Series] = []
        pending: list[pl.DataFrame] = []
        n_items = index = n_records = 0
        for topics in read.topics(in_file_order=attempt == IN_FILE_ORDER):
            ran.append(topics["case_id"])
            if self._refusing(qrels, read):
                pending.clear()  # nothing of a refused run is evaluated; the read goes on for its rejects
                continue
            pending.append(topics)
            n_items += int(topics["retrieved_context"].list.len().sum())
            if n_items >= self.batch_items:
                yield self._stage(attempt, index, case_table(pl.concat(pending), qrels.judged))
                n_records += sum(frame.height for frame in pending)
                index, pending, n_items = index + 1, [], 0
        if not ran and not len(read.rejects):
            raise InputError(f"{self.source.input.location}: holds no run lines (qid Q0 docno rank score tag)")
        if self._refusing(qrels, read):
            return 0
        if pending:
            yield self._stage(attempt, index, case_table(pl.concat(pending), qrels.judged))
            n_records += sum(frame.height for frame in pending)
            index += 1
        missing = unretrieved_cases(qrels.judged, pl.concat(ran) if ran else pl.Series("case_id", [], pl.String))
        if missing.num_rows or index == 0:
            # With every line rejected (and allowed) the run has no case: one empty batch, as a
            # cases file without records gives, so that each table of the run gets its part.
            yield self._stage(attempt, index, missing)
            n_records += missing.num_rows
        return n_records

    def _refusing(self, qrels: Qrels, read: TrecRunRead) -> bool:
        return bool(len(qrels.rejects) or len(read.rejects)) and not self.allow_rejects

    def _stage(self, attempt: int, index: int, cases) -> StagedBatch:
        try:
            return StagedBatch(attempt, index, stage(cases, self.relevance_level))
        except NotClean as error:  # every rule stage checks was applied to the lines already
            raise RuntimeError(f"{self.source.input.location}: TREC cases failed staging's checks ({error})") from None
