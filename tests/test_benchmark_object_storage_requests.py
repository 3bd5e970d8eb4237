"""benchmarks/object_storage.py counts what moto's server served during each job from its
request log (SPEC 14: "no listing or read per committed run" is checked by these counts): a
listing is a GET on the bucket with list-type or prefix, every other request counts by its
method, and keys are grouped by kind with run ids, timestamps and digests folded."""

from __future__ import annotations

from benchmarks.object_storage import RequestLog

# Lines as moto_server 5.2 writes them (werkzeug's access log), copied from a benchmark run's log.
LOG = """\
 * Running on http://127.0.0.1:40123
127.0.0.1 - - [06/Dec/2026 07:30:21] "GET /bench?list-type=2&prefix=history/runs/ HTTP/1.1" 200 -
127.0.0.1 - - [06/Dec/2026 07:30:22] "GET /bench/history/runs/night-001/manifest.json HTTP/1.1" 200 -
127.0.0.1 - - [06/Dec/2026 07:30:22] "GET /bench/history/runs/night-002/manifest.json HTTP/1.1" 200 -
127.0.0.1 - - [06/Dec/2026 07:30:27] "HEAD /bench/history/wh/runs/run_id=night-002/part-20261206T073027-ad8b1da2-3a62f8f78eb3.parquet HTTP/1.1" 200 -
127.0.0.1 - - [06/Dec/2026 07:30:27] "PUT /bench/history/wh/_log/pending/20261206T073027-ad8b1da2.json HTTP/1.1" 200 -
127.0.0.1 - - [06/Dec/2026 07:30:27] "GET /bench?list-type=2&prefix=history/wh/rejects/run_id%3Dnight-299/ HTTP/1.1" 200 -
127.0.0.1 - - [06/Dec/2026 07:30:28] "POST /bench?delete HTTP/1.1" 200 -
"""


def test_requests_since_a_mark_count_listings_apart_from_reads(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("127.0.0.1 - - [06/Dec/2026 07:30:20] \"PUT /bench HTTP/1.1\" 200 -\n")
    log = RequestLog(path)
    mark = log.mark()
    with open(path, "a") as handle:
        handle.write(LOG)
    counts = log.since(mark)
    assert dict(counts) == {"LIST": 2, "GET": 2, "HEAD": 1, "PUT": 1, "POST": 1}
    assert log.last_kinds["GET /bench/history/runs/night-*/manifest.json"] == 2
    assert log.last_kinds["HEAD /bench/history/wh/runs/run_id=night-*/part-*-*-*.parquet"] == 1
    assert log.last_kinds["LIST prefix=history/wh/rejects/run_id=night-*/"] == 1
    assert log.last_kinds["PUT /bench/history/wh/_log/pending/*-*.json"] == 1
