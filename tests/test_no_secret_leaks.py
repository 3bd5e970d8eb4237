"""No secret anywhere (SPEC 14): with the AWS credentials set to values no code of ours knows,
the real command runs end to end against the loopback S3 (moto), in this process and as a
tracked Prefect run, writing its report, exports and baseline to the bucket; then every byte
it left is searched for those values: its stdout and stderr, every object of the bucket
(Parquet decoded, metadata included), every file of the warehouses (Parquet decoded, the
catalog opened with DuckDB: every view's definition and every table's rows), and the Prefect
run's database and what its API says (parameters, task runs, artifacts, logs).

A secret in a URI's user information is refused by every option that takes a location, and
the refusal does not repeat it; nor does the error of a put to an endpoint that carries one.

The in-process run reads its runs, KB and baseline from the bucket; the warehouses are on
local disk (the warehouse on S3 is not in place yet), the outputs (report folders, `export
--out`, `baseline refresh --out`) on S3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from builders import SAMPLE_BASELINE, cli
from s3_server import free_port

SECRETS = {
    "AWS_ACCESS_KEY_ID": "AKIALEAKCHECK7Q2XZ",
    "AWS_SECRET_ACCESS_KEY": "leak-check-secret-9f1d2c8e",
    "AWS_SESSION_TOKEN": "leak-check-session-token-4b8e6a",
}
USERINFO_SECRET = "leak-check-userinfo-3c5d71"
EVERY_SECRET = (*SECRETS.values(), USERINFO_SECRET)

# Reads what a finished tracked run left in its PREFECT_HOME, through Prefect's own client (a
# server of its own over the same database), as one JSON document on stdout.
PREFECT_DUMP = """
import json, sys
from prefect.client.orchestration import get_client
with get_client(sync_client=True) as client:
    found = {
        "flow_runs": client.read_flow_runs(),
        "task_runs": client.read_task_runs(),
        "artifacts": client.read_artifacts(),
        "logs": client.read_logs(),
    }
json.dump({name: [item.model_dump(mode="json") for item in items] for name, items in found.items()}, sys.stdout)
"""


@pytest.fixture
def environment(s3_bucket, tmp_path) -> dict[str, str]:
    """A user's shell: the loopback S3's chain with the distinctive secrets, no Prefect
    settings but a PREFECT_HOME of this test's own."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PREFECT_")}
    env.update(SECRETS)
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    return env


def leaks(sources: dict[str, bytes | str]) -> list[tuple[str, str]]:
    """(source, secret) for every secret found in a source's bytes."""
    found = []
    for name, content in sources.items():
        data = content.encode("utf-8", "surrogateescape") if isinstance(content, str) else content
        found += [(name, secret) for secret in EVERY_SECRET if secret.encode() in data]
    return found


def decoded(name: str, data: bytes) -> bytes:
    """A Parquet file's rows and metadata as text (its pages may be compressed); other bytes as they are."""
    if not name.endswith(".parquet"):
        return data
    table = pq.read_table(pa.BufferReader(data))
    return (str(table.to_pylist()) + str(table.schema.metadata)).encode()


def bucket_contents(bucket: str) -> dict[str, bytes]:
    """Every object of the bucket (read with boto3, not through the project's store), decoded,
    with its user metadata."""
    client = boto3.client("s3")
    contents = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for entry in page.get("Contents", []):
            got = client.get_object(Bucket=bucket, Key=entry["Key"])
            body = decoded(entry["Key"], got["Body"].read())
            contents[f"s3://{bucket}/{entry['Key']}"] = body + json.dumps(got.get("Metadata", {})).encode()
    return contents


def catalog_dump(path: Path) -> str:
    """Every view's definition and every table's rows of a DuckDB catalog."""
    with duckdb.connect(str(path), read_only=True) as con:
        views = con.sql("select view_name, sql from duckdb_views() where not internal").fetchall()
        tables = [name for (name,) in con.sql("select table_name from duckdb_tables()").fetchall()]
        rows = {table: con.table(table).fetchall() for table in tables}
    return repr(views) + repr(rows)


def folder_contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, Parquet decoded, and the dump of every DuckDB catalog."""
    contents = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        contents[str(path)] = decoded(path.name, path.read_bytes())
        if path.suffix == ".duckdb":
            contents[f"{path} (views and tables)"] = catalog_dump(path).encode()
    return contents


def prefect_record(env: dict[str, str]) -> dict:
    read = subprocess.run([sys.executable, "-c", PREFECT_DUMP], env=env, capture_output=True, text=True, timeout=300)
    assert read.returncode == 0, read.stderr
    return json.loads(read.stdout)


def uploaded(bucket: str, folder: Path, prefix: str) -> None:
    client = boto3.client("s3")
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder).as_posix()}")


def test_no_secret_reaches_output_report_warehouse_catalog_or_prefect(sample_copy, s3_bucket, environment, tmp_path):
    runs, kb = sample_copy / "runs", sample_copy / "kb" / "cards.jsonl"
    newest = sorted(p.name for p in runs.iterdir())[-1]
    bucket = f"s3://{s3_bucket}"
    uploaded(s3_bucket, sample_copy, "inputs")
    uploaded(s3_bucket, SAMPLE_BASELINE.parent, "inputs/baselines")
    local, tracked = tmp_path / "wh-local", tmp_path / "wh-tracked"
    said: dict[str, str] = {}

    def command(name: str, *args: str, expect: int = 0) -> None:
        result = cli(*args, env=environment)
        assert result.returncode == expect, (name, result.stdout[-2000:], result.stderr)
        said[f"{name}: stdout"], said[f"{name}: stderr"] = result.stdout, result.stderr

    # The sample's newest run regresses on pt-BR: the gate against the sample baseline fails.
    command("run", "run", f"{bucket}/inputs/runs", "--kb", f"{bucket}/inputs/kb/cards.jsonl", "--warehouse",
            str(local), "--report-dir", f"{bucket}/reports/local", "--baseline",
            f"{bucket}/inputs/baselines/{SAMPLE_BASELINE.name}", expect=1)
    command("tracked run", "run", str(runs), "--kb", str(kb), "--warehouse", str(tracked), "--report-dir",
            f"{bucket}/reports/tracked", "--prefect", "--json")
    command("export parquet", "export", newest, "--format", "parquet", "--out", f"{bucket}/exports/run.parquet",
            "--warehouse", str(local))
    command("export trec-run", "export", newest, "--format", "trec-run", "--out", f"{bucket}/exports/run.trec",
            "--warehouse", str(local))
    command("baseline refresh", "baseline", "refresh", newest, "--out", f"{bucket}/baselines/baseline.json",
            "--warehouse", str(local))
    command("query", "query", "select * from runs", "--format", "json", "--warehouse", str(local))

    objects = bucket_contents(s3_bucket)
    for folder in ("reports/local", "reports/tracked"):
        assert {f"{bucket}/{folder}/report.md", f"{bucket}/{folder}/report.html"} <= set(objects)
    assert {f"{bucket}/exports/run.parquet", f"{bucket}/exports/run.trec",
            f"{bucket}/baselines/baseline.json"} <= set(objects)
    assert f"Report written to {bucket}/reports/local/report.md and {bucket}/reports/local/report.html" \
        in said["run: stdout"]

    warehouses = {**folder_contents(local), **folder_contents(tracked)}
    catalogs = [name for name in warehouses if name.endswith("(views and tables)")]
    assert len(catalogs) == 2 and all("create view" in warehouses[name].decode().lower() for name in catalogs)

    record = prefect_record(environment)
    [flow_run] = record["flow_runs"]
    assert flow_run["parameters"]["report_dir"] == f"{bucket}/reports/tracked"
    folder_artifacts = [a for a in record["artifacts"] if a["key"] == "retrieval-eval-report-folder"]
    assert [a["data"] for a in folder_artifacts] == [f"[{bucket}/reports/tracked]({bucket}/reports/tracked)"]

    sources = {**said, **objects, **warehouses, "prefect API": json.dumps(record),
               **folder_contents(Path(environment["PREFECT_HOME"]))}
    found = leaks(sources)
    assert not found, found


@pytest.mark.parametrize("option", ["--report-dir", "export --out", "baseline refresh --out"])
def test_a_secret_in_a_uris_user_information_is_refused_and_not_repeated(s3_bucket, environment, tmp_path, option):
    uri = f"s3://reader:{USERINFO_SECRET}@{s3_bucket}/out/file.json"
    warehouse = str(tmp_path / "wh")
    args = {
        "--report-dir": ["run", str(tmp_path / "no-runs"), "--warehouse", warehouse, "--report-dir", uri],
        "export --out": ["export", "any-run", "--format", "csv", "--out", uri, "--warehouse", warehouse],
        "baseline refresh --out": ["baseline", "refresh", "any-run", "--out", uri, "--warehouse", warehouse],
    }[option]
    result = cli(*args, env=environment)
    assert result.returncode == 2, result.stderr
    assert leaks({"stdout": result.stdout, "stderr": result.stderr}) == []
    assert len(result.stderr.splitlines()) == 1, result.stderr
    if option == "--report-dir":  # refused before any work: the runs root is never read
        assert "carries user information" in result.stderr, result.stderr
    assert bucket_contents(s3_bucket) == {}


def test_a_failed_put_to_an_endpoint_with_user_information_names_the_uri_and_no_secret(
        sample_copy, s3_bucket, environment, tmp_path):
    runs = sample_copy / "runs"
    newest = sorted(p.name for p in runs.iterdir())[-1]
    warehouse = tmp_path / "wh"
    made = cli("run", str(runs), "--warehouse", str(warehouse), "--report-dir", str(tmp_path / "rep"), "--quiet",
               env=environment)
    assert made.returncode == 0, made.stderr
    down = {**environment, "AWS_ENDPOINT_URL": f"http://reader:{USERINFO_SECRET}@127.0.0.1:{free_port()}"}
    uri = f"s3://{s3_bucket}/exports/run.csv"
    result = cli("export", newest, "--format", "csv", "--out", uri, "--warehouse", str(warehouse), env=down)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"retrieval-eval: {uri}: not written: store unavailable"), result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""
    assert leaks({"stdout": result.stdout, "stderr": result.stderr}) == []
