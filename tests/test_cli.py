"""The installed command end to end, as real subprocesses: exit codes, messages, query."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
from builders import case, chunk, cli, copy_sample, write_run


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    """`retrieval-eval run` with every default, from a folder laid out like the repository."""
    root = copy_sample(tmp_path_factory.mktemp("repo"))
    result = cli("run", "--ks", "1,2,3,5,8", cwd=root)
    return root, result


def test_run_with_defaults_prints_the_report_and_writes_the_catalog(sample_run):
    root, result = sample_run
    assert result.returncode == 0, result.stderr
    assert "2026-11-16-hybrid-rerank" in result.stdout
    assert "hit@4 (95% CI)" in result.stdout and "recall@k is a lower bound" in result.stdout
    assert "\x1b[" not in result.stdout  # piped: no escape codes
    assert (root / "data" / "warehouse" / "catalog.duckdb").exists()
    assert result.stdout.rstrip().endswith("Report written to data/reports/report.md and data/reports/report.html")
    report = (root / "data" / "reports" / "report.md").read_text()
    assert "| slice | hit@4 (95% CI) |" in report and "indicative" in report
    for chart in ("trend.svg", "locales.svg", "categories.svg"):
        assert "<svg" in (root / "data" / "reports" / chart).read_text()
        assert f"]({chart})" in report


def test_query_json_is_an_array_of_row_objects(sample_run):
    root, _ = sample_run
    result = cli(
        "query",
        "select run_id, n_labelled from runs order by run_id",
        "--format", "json", cwd=root,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert rows[0] == {"run_id": "2026-11-02-dense", "n_labelled": 240}
    assert len(rows) == 4


def test_query_json_is_strict_json_with_null_for_what_json_cannot_say(sample_run):
    root, _ = sample_run
    result = cli("query", "select 'nan'::double as a, [1.5, '-inf'::double] as b, {'x': 'inf'::double} as c",
                 "--format", "json", cwd=root)
    assert result.returncode == 0, result.stderr
    strict = json.loads(result.stdout, parse_constant=lambda token: pytest.fail(f"{token} is not JSON"))
    assert strict == [{"a": None, "b": [1.5, None], "c": {"x": None}}]


def test_query_works_from_any_working_directory(sample_run, tmp_path):
    root, _ = sample_run
    result = cli(
        "query", "select count(*) as n from case_metrics where k = 4",
        "--warehouse", str(root / "data" / "warehouse"), "--format", "csv", cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "n\n960\n"  # 4 runs × 240 labelled cases at the headline k


def test_query_sql_error_is_a_clear_message(sample_run):
    root, _ = sample_run
    result = cli("query", "select nope from runs", cwd=root)
    assert result.returncode == 2
    assert "query failed" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("sql, message", [
    ("drop view runs", "only read statements (select, explain) run here, got drop"),
    ("copy (select 1) to '{part}' (format parquet)", "only read statements (select, explain) run here, got copy"),
    ("create table x as select 1", "only read statements (select, explain) run here, got create"),
    ("attach '{other}' as other", "only read statements (select, explain) run here, got attach"),
    ("set enable_external_access = true", "only read statements (select, explain) run here, got set"),
    ("select * from read_csv('/etc/passwd')", "Permission Error"),
    ("select * from read_text('{other}')", "Permission Error"),
    ("select 1; select 2", "give one statement, got 2"),
    # EXPLAIN ANALYZE runs what it explains
    ("explain analyze copy (select 42 as x) to '{part}' (format parquet)", "explain runs here on a select only"),
    ("/* a comment */ EXPLAIN (FORMAT json, ANALYZE) copy (select 1) to '{part}'", "explain runs here on a select only"),
    ("explain analyze drop view runs", "explain runs here on a select only"),
    # DuckDB lets a connection read its spill folder, `.tmp` of the working directory by default
    ("select * from read_text('.tmp/outside.txt')", "Permission Error"),
    ("", "no SQL statement given"),
    ("-- only a comment", "no SQL statement given"),
])
def test_query_cannot_harm_or_leak(sample_run, tmp_path, sql, message):
    root, _ = sample_run
    part = next((root / "data" / "warehouse" / "runs").glob("run_id=*/*.parquet"))
    before = part.read_bytes()
    other = tmp_path / "outside.txt"
    other.write_text("not the warehouse's")
    (root / ".tmp").mkdir(exist_ok=True)
    (root / ".tmp" / "outside.txt").write_text("not the warehouse's either")
    result = cli("query", sql.format(part=part, other=other), cwd=root)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr
    assert part.read_bytes() == before


def test_query_explains_and_profiles_a_select(sample_run):
    root, _ = sample_run
    for sql, plan in (("explain select count(*) from runs", "physical_plan"),
                      ("explain analyze select count(*) from runs", "analyzed_plan")):
        result = cli("query", sql, cwd=root)
        assert result.returncode == 0 and plan in result.stdout and "PARQUET_SCAN" in result.stdout, result.stderr


@pytest.mark.parametrize("sql", [
    "EXPLAIN (SELECT 1)", "EXPLAIN ANALYZE (SELECT 1) UNION (SELECT 2)", "EXPLAIN ANALYZE /* a comment */ SELECT 1",
    "EXPLAIN ANALYZE -- a comment\n SELECT 1", "EXPLAIN (FORMAT JSON) SELECT 1", "explain from runs",
    "explain analyze with x as (select 1) select * from x",
])
def test_query_takes_every_form_of_explain_over_a_select(sql):
    from retrieval_eval.flows.outputs.query import read_only_statement

    assert read_only_statement(sql) == sql


def test_query_streams_in_bounded_memory_in_every_format(sample_run, tmp_path):
    # Peak memory grows by a few batches from 1,000 rows to 3,000,000 (≈ 60 MB of output),
    # in every format: nothing holds the whole result. Compared with itself, so that what a
    # forked child briefly shares with this test process does not count.
    root, _ = sample_run
    sql = "select i, 'row ' || i as text from range({n}) t(i)"
    for output_format in ("csv", "json", "table"):
        peaks = {}
        for n in (1_000, 3_000_000):
            out = tmp_path / f"{output_format}-{n}.out"
            result = cli("query", sql.format(n=n), "--format", output_format, cwd=root, peak_rss=True, stdout=out)
            assert result.returncode == 0, result.stderr
            with open(out, "rb") as lines:
                assert sum(block.count(b"\n") for block in iter(lambda: lines.read(1 << 20), b"")) >= n
            peaks[n] = result.peak_rss_mb
        assert peaks[3_000_000] - peaks[1_000] < 100, (output_format, peaks)


def test_run_json_prints_aggregates(sample_run):
    root, _ = sample_run
    result = cli("run", "data/runs/2026-11-02-dense", "--json", cwd=root)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    # One run folder into a warehouse with history: the document covers the history, oldest first.
    assert [r["run_id"] for r in doc["runs"]][:1] == ["2026-11-02-dense"] and len(doc["runs"]) == 4
    run = doc["runs"][0]
    hit = [a for a in run["aggregates"] if a["slice"] == "all" and a["metric"] == "hit_at_k" and a["k"] == 4]
    assert hit[0]["n"] == 240 and 0 <= hit[0]["ci_low"] <= hit[0]["mean"] <= hit[0]["ci_high"] <= 1


def test_run_quiet_prints_the_report_files_only(sample_run):
    root, _ = sample_run
    result = cli("run", "data/runs/2026-11-02-dense", "--quiet", cwd=root)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Report written to data/reports/report.md and data/reports/report.html\n"


def test_malformed_record_exits_2_naming_file_line_and_reason(tmp_path):
    good = json.dumps(case("a", [chunk("A::00", "A")], ["A"]))
    write_run(tmp_path / "runs", "run-x", lines=[good, good.replace('"a"', '"b"'), '{"case_id": "c", "locale": "en"'])
    result = cli("run", "runs", "--warehouse", "wh", "--report-dir", "rep", cwd=tmp_path)
    assert result.returncode == 2
    assert "runs/run-x/cases.jsonl:3: not valid JSON" in result.stderr
    assert "Traceback" not in result.stderr
    allowed = cli("run", "runs", "--warehouse", "wh", "--report-dir", "rep", "--allow-rejects", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr
    assert "1 record(s) were rejected" in allowed.stdout


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _damaged(data: bytes) -> bytes:
    # the first deflate block's header, just after gzip's 10-byte header: zlib refuses it
    return data[:11] + bytes(b ^ 0xFF for b in data[11:15]) + data[15:]


@pytest.mark.parametrize(
    "spoil, damage, n_lines",
    [
        (_truncated, "Compressed file ended before the end-of-stream marker", 3000),
        # past the first MiB the cut is met by Arrow's reader, which says it as an OSError
        (_truncated, "Truncated compressed stream", 40_000),
        (_damaged, "Error -3 while decompressing", 3000),
        (lambda data: gzip.decompress(data), "Not a gzipped file", 3000),
    ],
    ids=["truncated", "truncated-past-a-block", "damaged", "not-gzip"],
)
def test_unreadable_gzip_cases_file_exits_2_naming_the_file(tmp_path, spoil, damage, n_lines):
    # Python's gzip raises EOFError and zlib.error (not OSErrors) for a .gz cut short or
    # damaged: they must end as a message naming the file, not a traceback, with nothing loaded.
    lines = [json.dumps(case(f"case-{i:05d}", [chunk(f"C{i}::00", f"C{i}", 0.5)], [f"C{i}"])) for i in range(n_lines)]
    run_dir = write_run(tmp_path / "runs", "run-x", lines=lines)
    data = gzip.compress((run_dir / "cases.jsonl").read_bytes())
    (run_dir / "cases.jsonl").unlink()
    (run_dir / "cases.jsonl.gz").write_bytes(spoil(data))
    result = cli("run", "runs", "--warehouse", "wh", "--report-dir", "rep", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "runs/run-x/cases.jsonl.gz: not a readable gzip file" in result.stderr and damage in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "wh" / "catalog.duckdb").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "no-such-folder"], "no-such-folder: no such runs folder"),
        (["run", "--ks", "1,x"], "--ks must be a comma-separated list of integers"),
        (["run", "--k", "0"], "expected an integer in [1, 2147483647], got '0'"),
        (["run", "--k", str(2**63)], "expected an integer in [1, 2147483647]"),
        (["run", "--ks", f"1,{2**63}"], "--ks values must be integers in [1, 2147483647]"),
        (["query", "select 1", "--warehouse", "nowhere"], "no warehouse here yet"),
        # an empty item is a typo, not a shorter list
        (["run", "--ks", "1,,2"], "--ks must be a comma-separated list of integers, got '1,,2'"),
        (["run", "--ks", "1,"], "--ks must be a comma-separated list of integers, got '1,'"),
        (["compare", "a", "b", "--metrics", "hit_at_k,,ndcg_at_k"], "got 'hit_at_k,,ndcg_at_k'"),
        # a test at alpha 0 never rejects and at 1 always does
        (["gate", "r", "--alpha", "0"], "expected a significance level strictly between 0 and 1, got '0'"),
        (["gate", "r", "--alpha", "1"], "strictly between 0 and 1, got '1'"),
        (["compare", "a", "b", "--alpha", "1"], "strictly between 0 and 1, got '1'"),
        (["compare", "a", "b", "--alpha", "nan"], "strictly between 0 and 1, got 'nan'"),
    ],
)
def test_usage_errors_exit_2_without_traceback(tmp_path, args, message):
    result = cli(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


GC_SEEN = """
import gc, sys
from retrieval_eval.flows.commands import cli, entry
from retrieval_eval.flows.commands import run as run_command
from retrieval_eval.flows.commands import schema as schema_command
from retrieval_eval.flows.job import job
from retrieval_eval.transforms.errors import InputError

importing, working = [], []  # the collector while the engines are imported / during the work
import_engines = cli.import_engines


def recorded_import():
    importing.append(gc.isenabled())
    import_engines()


def schema(args):
    working.append((gc.isenabled(), gc.get_freeze_count() > 0))
    return 0


def run_job(options, steps, warehouse=None):
    working.append((gc.isenabled(), gc.get_freeze_count() > 0))
    raise InputError("stopped by the test")


cli.import_engines, run_command.import_engines, schema_command.cmd_schema, job.run_job = recorded_import, recorded_import, schema, run_job
sys.argv = ["retrieval-eval", *sys.argv[1:]]
code = entry.console()
print(code, importing, working, gc.isenabled())
"""


@pytest.mark.parametrize("argv, expected", [
    (["schema", "cases"], "0 [] [(True, True)] True"),  # a command that imports no engine
    (["run", "data/runs"], "2 [False] [(True, True)] True"),  # run's job: its modules imported first
    (["query", "select 1", "--warehouse", "none-here"], "2 [False] [] True"),  # another command, bad input
    (["run", "--qrels", "qrels.txt"], "2 [] [] True"),  # bad usage, met before anything is imported
])
def test_the_collector_is_off_only_while_the_command_is_imported(argv, expected, tmp_path):
    # flows/commands/entry.py turns the garbage collector off for the imports; it must be on again, with
    # what the imports made frozen, for the command's work (a served deployment runs for days)
    # and on every way out.
    root = copy_sample(tmp_path)
    done = subprocess.run([sys.executable, "-c", GC_SEEN, *argv], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.stdout.split("\n")[-2] == expected, done.stderr
