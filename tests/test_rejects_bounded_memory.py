"""SPEC 16 "Bounded memory on bad input": rejected records stream to the `rejects` view as they
are found; the message lists the first 20 and counts the rest, so neither memory nor the
message grows with their number. SPEC 6 holds either way: the rejects all land in the view."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from builders import cli, reader

MANIFEST = {"run_id": "r", "created_at": "2026-11-01T02:00:00Z", "retrieval_top_k": 4, "config": {}}


def empty_records_run(root: Path, n: int) -> Path:
    """A run whose cases file is `n` lines of `{}` (each missing its case_id), gzipped."""
    folder = root / "runs" / "r"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(MANIFEST))
    with gzip.open(folder / "cases.jsonl.gz", "wb", compresslevel=1) as out:
        out.write(b"{}\n" * n)
    return folder / "cases.jsonl.gz"


def test_many_rejects_are_listed_twenty_and_counted_and_all_land_in_the_rejects_view(tmp_path):
    cases = empty_records_run(tmp_path, 300_000)
    refused = cli("run", "runs", "--warehouse", "wh", "--report-dir", "rep", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.splitlines()
    assert lines[0] == ("retrieval-eval: run r: 300,000 record(s) rejected, run not loaded "
                        "(use --allow-rejects to load the valid records):")
    assert lines[1:21] == [f"{cases}:{n}: missing required field case_id" for n in range(1, 21)]
    assert lines[21:] == ['... and 299,980 more; all are in the rejects view: retrieval-eval query '
                          '"select * from rejects where run_id = \'r\'" --warehouse wh']
    with reader(tmp_path / "wh") as con:
        assert con.execute("select count(*), count(distinct line), min(line), max(line) from rejects").fetchall() == [
            (300_000, 300_000, 1, 300_000)]


def test_peak_memory_does_not_grow_with_the_number_of_rejected_records(tmp_path):
    """What is held is bounded by constants, not by the count: a table of at most 100k cases
    (flows/sources/case_file.py MAX_TABLE_CASES), 50k rejects before a file is written
    (flows/sources/reject_stream.py FLUSH_ROWS) and 64 MiB of columns read ahead. Past 200k rejects
    those are all reached, so ten times more must cost no more (measured: flat within a few
    MB; holding each reject cost 600 bytes or more, 1.3 GB at 2M)."""
    peaks = {}
    for n in (20_000, 200_000, 2_000_000):
        empty_records_run(tmp_path / str(n), n)
        result = cli("run", "runs", "--warehouse", "wh", "--report-dir", "rep", "--allow-rejects",
                     cwd=tmp_path / str(n), peak_rss=True)
        assert result.returncode == 0, result.stderr
        peaks[n] = result.peak_rss_mb
        with reader(tmp_path / str(n) / "wh") as con:
            assert con.execute("select n_rejected from runs").fetchall() == [(n,)]
            assert con.execute("select count(*) from rejects").fetchall() == [(n,)]
    assert peaks[2_000_000] < peaks[200_000] + 40, peaks
    assert peaks[2_000_000] < peaks[20_000] + 160, peaks
