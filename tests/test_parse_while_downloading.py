"""A cases file in a bucket is parsed while it streams (SPEC 14: a run read from a bucket costs
at most 1.5 × the same run on local disk): the GET runs on a thread of its own and the strict
parser takes its bytes from memory as they arrive (no local copy written and read back), so
the first batch is staged before the last byte has arrived; its digest is the one the stream
computed. A stream that fails mid-way raises the store's error naming the URI. A .gz object and
Arrow's reader (where the parser was not built) read a local copy, after the download; so do
the line-by-line rules, from a copy checked to hold the bytes the stream read.

The store here is a local folder (the real LocalStore) whose streamed read hands over every
block but the last at once and holds the last one back until the test lets it go: a slow
network's last bytes. Through the real command, a connection to the loopback S3 that breaks
in the middle of a cases file's GET is exit 2 in one line naming that file, nothing committed."""

from __future__ import annotations

import json
import re
import socket
import socketserver
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from builders import case, cli, write_run
from retrieval_eval.flows.sources import stored_file, strict_read
from retrieval_eval.flows.sources.ingest import FAST, LINE_BY_LINE, Ingest
from retrieval_eval.flows.sources.stored_file import StoredFile
from retrieval_eval.flows.storage import open_store
from retrieval_eval.flows.storage.errors import ObjectChanged, StoreUnavailable
from retrieval_eval.flows.storage.hashing import checksum_of_chunks, file_digest
from retrieval_eval.flows.storage.local_store import LocalStore

URI = "s3://bucket/runs/run-a/cases.jsonl"
STREAM_BLOCK = 1 << 20
HOLD_SECONDS = 20  # the last block is handed over at the latest then: a read that waits for it still ends


class HeldBackStore(LocalStore):
    """A folder whose streamed reads (`copy_to`) hold the object's last block back until
    `release` is set; with `fail`, the stream then breaks instead, as a lost connection does."""

    def __init__(self, root: Path, *, fail: bool = False) -> None:
        super().__init__(root)
        self.release = threading.Event()
        self.last_block_sent = threading.Event()
        self.fail = fail

    def copy_to(self, key: str, sink, *, etag: str | None = None) -> str:
        data = self.get(key)
        return checksum_of_chunks(self._blocks(data), sink)

    def _blocks(self, data: bytes):
        blocks = [data[at:at + STREAM_BLOCK] for at in range(0, len(data), STREAM_BLOCK)]
        yield from blocks[:-1]
        self.release.wait(HOLD_SECONDS)
        if self.fail:
            raise StoreUnavailable(f"{URI}: store unavailable (connection reset)")
        self.last_block_sent.set()
        yield blocks[-1]


@dataclass(frozen=True)
class HeldBackFile(StoredFile):
    """The cases file at URI, read from a HeldBackStore."""

    store: HeldBackStore | None = None

    def opened(self):
        return self.store, self.name


def cases_lines(n: int) -> list[str]:
    """`n` cases of 20 items (about 3.2 kB a line), the gold among them."""
    items = [{"id": f"card-{j}::00", "parent_id": f"card-{j}", "score": 1 - j / 40, "text": "passage " * 10}
             for j in range(20)]
    return [json.dumps(case(f"c{i}", items, [f"card-{i % 25}"])) for i in range(n)]


def stored_cases(tmp_path: Path, lines: list[str], *, gz: bool = False, fail: bool = False) -> tuple[Path, HeldBackFile]:
    """The cases file on local disk, and the same bytes as an object of a HeldBackStore."""
    local = write_run(tmp_path / "runs", "run-a", lines=lines, gz=gz)
    path = local / ("cases.jsonl.gz" if gz else "cases.jsonl")
    store = HeldBackStore(local, fail=fail)
    return path, HeldBackFile(URI + (".gz" if gz else ""), store=store)


def ingest_of(cases: Path | StoredFile, scratch: Path, **options) -> Ingest:
    scratch.mkdir(parents=True, exist_ok=True)
    return Ingest(cases, scratch, allow_rejects=True, batch_items=2_000, **options)


def staged(ingest: Ingest) -> pl.DataFrame:
    return pl.concat([batch.frame for batch in ingest.batches()])


def download_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name in ("download", "stream") and t.is_alive()]


def test_the_first_batch_is_staged_before_the_last_byte_arrives(tmp_path):
    # 3,500 lines of ~3.2 kB: about 11 MB. The strict parser hands on its first 4 MiB block of
    # whole lines once it has read the next one: 8 MiB are there while the last 1 MiB is held back.
    path, stored = stored_cases(tmp_path, cases_lines(3_500))
    assert path.stat().st_size > 2 * strict_read.STRICT_BLOCK_BYTES + STREAM_BLOCK
    ingest = ingest_of(stored, tmp_path / "scratch")
    batches = ingest.batches()
    first = next(batches)
    assert not stored.store.last_block_sent.is_set(), "the first batch waited for the whole download"
    stored.store.release.set()
    frames = [first.frame, *(batch.frame for batch in batches)]

    local = ingest_of(path, tmp_path / "local")
    expected = staged(local)
    assert pl.concat(frames).equals(expected)
    assert expected.height == 3_500 and len(frames) == 35  # batches of 2,000 items: 100 cases of 20
    assert ingest.account.attempt == FAST and ingest.account.n_records == 3_500
    # The digest is the download's BLAKE3, and it is the file's (as the local read records it).
    assert ingest.account.facts.digest == "blake3:" + file_digest(path) == local.account.facts.digest
    assert not download_threads()
    assert ingest.cases_file is None and not any((tmp_path / "scratch").iterdir())  # read from memory: no copy


def test_a_download_that_breaks_mid_way_raises_the_stores_error_naming_the_uri(tmp_path):
    _path, stored = stored_cases(tmp_path, cases_lines(3_500), fail=True)
    ingest = ingest_of(stored, tmp_path / "scratch")
    batches = ingest.batches()
    next(batches)  # parsed from the bytes that did arrive
    stored.store.release.set()  # the connection breaks now
    with pytest.raises(StoreUnavailable, match="^" + re.escape(URI) + ": store unavailable"):
        for _batch in batches:
            pass
    assert ingest.account is None  # nothing to commit
    assert not download_threads()


def test_a_closed_ingest_stops_its_download(tmp_path):
    path, stored = stored_cases(tmp_path, cases_lines(3_500))
    ingest = ingest_of(stored, tmp_path / "scratch")
    batches = ingest.batches()
    next(batches)
    threading.Timer(0.5, stored.store.release.set).start()  # the last block arrives after the close
    batches.close()  # as the job does when a run stops early
    assert not download_threads()
    assert stored.store.last_block_sent.is_set()  # the stream stopped at its next block
    assert ingest.cases_file is None and not any((tmp_path / "scratch").iterdir())


def test_a_stream_holds_at_most_its_bound_ahead_of_its_reader(tmp_path, monkeypatch):
    # 11 MB through a bound of 2 MiB: while nobody reads, the stream waits with at most the
    # bound and one more block held; read to the end, it gives the file's bytes and digest.
    monkeypatch.setattr(stored_file, "STREAM_AHEAD_BYTES", 2 * STREAM_BLOCK)
    path, stored = stored_cases(tmp_path, cases_lines(3_500))
    stored.store.release.set()
    stream = stored.stream()
    try:
        deadline = time.monotonic() + 10
        while stream._held < 2 * STREAM_BLOCK and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # time enough to overrun the bound, were it not kept
        assert 2 * STREAM_BLOCK <= stream._held <= 3 * STREAM_BLOCK
        reader, taken = stream.reader(threading.Event()), bytearray()
        while block := reader.read(300_000):
            taken += block
        assert bytes(taken) == path.read_bytes()
        assert "blake3:" + stream.checksum(1) == "blake3:" + file_digest(path)
    finally:
        stream.close()
    assert not download_threads()


def test_a_stream_whose_parse_stops_early_is_hashed_to_its_end_and_holds_nothing(tmp_path, monkeypatch):
    # The strict parser refuses the first line of an object larger than the stream's bound: the
    # stream then holds nothing more (its reader is gone) and is hashed to its end, for the
    # digest, while the line-by-line rules judge a copy of it. Were the rest held for the reader
    # that left, the bound would stop the stream, and the read would wait for its digest forever.
    monkeypatch.setattr(stored_file, "STREAM_AHEAD_BYTES", 2 * STREAM_BLOCK)
    lines = cases_lines(3_500)
    lines[0] = '{"case_id": "c0", "retrieved_context": "not a list"}'
    path, stored = stored_cases(tmp_path, lines)
    assert path.stat().st_size > 4 * STREAM_BLOCK
    stored.store.release.set()
    ingest = ingest_of(stored, tmp_path / "scratch")
    finished: list[pl.DataFrame] = []
    reading = threading.Thread(target=lambda: finished.append(staged(ingest)), daemon=True)
    reading.start()
    reading.join(60)
    assert finished, "the read waited for a stream held for a reader that had left"
    local = ingest_of(path, tmp_path / "local")
    assert finished[0].equals(staged(local))
    assert ingest.account.attempt == LINE_BY_LINE and ingest.account.rejects.count == local.account.rejects.count == 1
    assert ingest.account.facts == local.account.facts
    assert not download_threads()


def test_the_copy_for_the_rules_must_hold_the_bytes_the_stream_read(tmp_path):
    # A line the strict parser refuses sends the object to the line-by-line rules, which read a
    # local copy; an object replaced meanwhile is not judged as if it were the one streamed.
    lines = cases_lines(300)
    lines[7] = '{"case_id": "c7", "retrieved_context": "not a list"}'
    _path, stored = stored_cases(tmp_path, lines)
    stored.store.release.set()
    replaced = ReplacedStore(stored.store.root, replacement=("\n".join(cases_lines(301)) + "\n").encode())
    replaced.release.set()
    ingest = ingest_of(HeldBackFile(URI, store=replaced), tmp_path / "scratch")
    with pytest.raises(ObjectChanged, match="^" + re.escape(URI) + ": changed while it was read; run again$"):
        staged(ingest)
    assert ingest.account is None and not download_threads()


class ReplacedStore(HeldBackStore):
    """A folder whose object is replaced by `replacement` after its first streamed read."""

    def __init__(self, root: Path, *, replacement: bytes) -> None:
        super().__init__(root)
        self.replacement = replacement
        self.reads = 0

    def get(self, key: str, expected_checksum: str | None = None) -> bytes:
        self.reads += 1
        return super().get(key) if self.reads == 1 else self.replacement


def test_a_local_cases_file_is_read_in_place(tmp_path):
    path, _stored = stored_cases(tmp_path, cases_lines(300))
    ingest = ingest_of(StoredFile.at(path), tmp_path / "scratch")
    assert len(staged(ingest)) == 300
    assert ingest.cases_file == path and not any((tmp_path / "scratch").iterdir())  # nothing copied


@pytest.mark.parametrize("shape", ["gz", "without the strict parser", "a line the rules reject"])
def test_a_downloaded_file_reads_as_the_local_file(tmp_path, monkeypatch, shape):
    lines = cases_lines(300)
    if shape == "without the strict parser":
        monkeypatch.setattr(strict_read, "_case_columns", None)  # Arrow's reader reads every file
    if shape == "a line the rules reject":
        lines[7] = '{"case_id": "c7", "retrieved_context": "not a list"}'
    path, stored = stored_cases(tmp_path, lines, gz=shape == "gz")
    stored.store.release.set()
    ingest, local = ingest_of(stored, tmp_path / "scratch"), ingest_of(path, tmp_path / "local")
    assert staged(ingest).equals(staged(local))
    assert ingest.account.facts == local.account.facts
    assert ingest.account.attempt == (LINE_BY_LINE if shape == "a line the rules reject" else FAST)
    assert ingest.account.rejects.count == local.account.rejects.count == (1 if shape == "a line the rules reject" else 0)
    assert not download_threads()


class BreakingProxy(socketserver.ThreadingTCPServer):
    """A TCP proxy on loopback in front of the S3 endpoint that breaks every connection on
    which a GET of a key ending in `breaks` was sent, once `cut_after` bytes of the answer have
    passed (obstore sends one request at a time on a connection, so what follows the request is
    its answer). obstore resumes a broken GET from where it broke a few times (max_retries):
    each resumption breaks too, and the object is many times `cut_after`."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream: str, breaks: str, cut_after: int) -> None:
        url = urllib.parse.urlsplit(upstream)
        self.upstream = (url.hostname, url.port)
        self.breaks = breaks.encode()
        self.cut_after = cut_after
        super().__init__(("127.0.0.1", 0), _ProxiedConnection)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxiedConnection(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: BreakingProxy = self.server
        client = self.request
        with socket.create_connection(server.upstream) as upstream:
            doomed = threading.Event()
            answer = threading.Thread(target=self._answers, args=(upstream, client, doomed), daemon=True)
            answer.start()
            while data := client.recv(65536):
                first_line = data.split(b"\r\n", 1)[0]
                if first_line.startswith(b"GET ") and first_line.split(b" ")[1].split(b"?")[0].endswith(server.breaks):
                    doomed.set()
                upstream.sendall(data)
            answer.join()

    def _answers(self, upstream: socket.socket, client: socket.socket, doomed: threading.Event) -> None:
        passed = 0
        try:
            while data := upstream.recv(65536):
                if doomed.is_set():
                    data = data[:max(0, self.server.cut_after - passed)]
                    passed += len(data)
                    if passed >= self.server.cut_after:
                        client.sendall(data)
                        break
                client.sendall(data)
        except OSError:
            pass
        for end in (client, upstream):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def test_a_connection_that_breaks_mid_download_is_exit_2_naming_the_file_and_nothing_is_committed(
        s3_bucket, moto_endpoint, tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    write_run(runs, "run-a", lines=cases_lines(300))
    write_run(runs, "run-b", lines=cases_lines(2_000), created_at="2026-11-02T02:00:00Z")  # ~6.4 MB
    store, prefix = open_store(f"s3://{s3_bucket}/runs")
    for path in sorted(p for p in runs.rglob("*") if p.is_file()):
        store.put(f"{prefix}/{path.relative_to(runs).as_posix()}", path)
    broken = f"s3://{s3_bucket}/runs/run-b/cases.jsonl"
    with BreakingProxy(moto_endpoint, "/run-b/cases.jsonl", cut_after=256 << 10) as proxy:
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        result = cli("run", f"s3://{s3_bucket}/runs", "--warehouse", str(tmp_path / "wh"),
                     "--report-dir", str(tmp_path / "rep"), "--quiet", timeout=300)
        proxy.shutdown()
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"retrieval-eval: {broken}: "), result.stderr
    assert "Traceback" not in result.stderr and "testing" not in result.stderr  # no secret said
    assert not any((tmp_path / "wh").rglob("*.parquet"))  # run-a's parts went with the transaction
    assert not any((tmp_path / "wh").rglob("_log/*.json"))


@pytest.mark.parametrize("where", ["local", "streamed"])
def test_a_batch_refused_past_the_read_ahead_ends_the_read_with_the_files_digest(tmp_path, monkeypatch, where):
    # Staging refuses a record the parser passes (an empty case id) in the first batch, while the
    # parse is a whole read-ahead further on and waits for room; the ingest takes no more tables
    # and asks for the file's digest. The read then hands on nothing more and only digests the
    # rest (found by a review, 2026-12-06: a local file's digest, taken by the parse, waited for
    # room for ever; a streamed object's waited as well, before this session too). Budgets made
    # small, so that the read-ahead fills in a few blocks.
    monkeypatch.setattr(strict_read, "STRICT_BLOCK_BYTES", 64 << 10)
    monkeypatch.setattr(strict_read, "READ_AHEAD_BYTES", 4 * (64 << 10))
    monkeypatch.setattr(strict_read, "READ_AHEAD_COLUMN_BYTES", 64 << 10)
    monkeypatch.setattr(stored_file, "STREAM_AHEAD_BYTES", 1 << 20)
    lines = cases_lines(1_500)  # about 4.8 MB
    lines[3] = lines[3].replace('"case_id": "c3"', '"case_id": ""')
    path, stored = stored_cases(tmp_path, lines)
    stored.store.release.set()
    ingest = ingest_of(stored if where == "streamed" else StoredFile.at(path), tmp_path / "scratch")
    staged_cases: list[int] = []
    worker = threading.Thread(target=lambda: staged_cases.append(len(staged(ingest))), daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "the ingest waited for ever"
    assert staged_cases == [1_499]
    assert ingest.account.attempt == LINE_BY_LINE and ingest.account.rejects.count == 1
    assert ingest.account.facts.digest == "blake3:" + file_digest(path)
