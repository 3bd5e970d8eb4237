"""Ingest: one run's cases file → staged Parquet partitions, and the account of its records.

The fast path is one streaming DuckDB pass (sql/staged_cases.sql) that reads the file,
types the fields the metrics need, flags records that break a rule and writes them split
into partitions by a stable hash of case_id. Only a file with a bad record takes the
line-by-line path of transforms/records.py, which names each bad record and feeds the
valid lines back through the same pass.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import duckdb
import polars as pl

import sql
from transforms import engine
from transforms.errors import InputError, Reject
from transforms.manifest import Manifest
from transforms.records import MAX_RECORD_BYTES, split_records

# DuckDB's reader refuses a record past about twice its maximum_object_size (its read
# buffer; the setting has a floor of 16 MiB, so about 32 MiB here). That is below
# MAX_RECORD_BYTES, so any line the fast path could mis-measure falls to the line-by-line
# pass, which rejects exactly the lines over MAX_RECORD_BYTES; the clean copy is then read
# with a buffer large enough for every line that passed.
FAST_PATH_OBJECT_LIMIT = 16 * 1024 * 1024
# About this much JSON per partition keeps a partition's frames to a few hundred MB.
PARTITION_BYTES = 256 * 1024 * 1024
GZIP_RATIO = 6  # rough expansion of gzip-compressed JSON, to size partitions

STAGED_MANIFEST = "staged.json"

REJECTS_SCHEMA = {
    "run_id": pl.String,
    "source_file": pl.String,
    "line": pl.Int64,
    "reason": pl.String,
    "raw": pl.String,
}


@dataclass(frozen=True)
class StagedRun:
    """One run's valid records as Parquet partitions, and the account of its records."""

    run_id: str
    directory: Path  # the content-addressed folder of this staging
    partitions: list[Path]  # empty when the run was refused (rejects, strict mode)
    n_cases: int
    digest: str  # sha256 of manifest.json and the cases file
    rejects: list[Reject] = field(default_factory=list)
    loaded: bool = True

    def to_json(self) -> dict:
        return {
            "run_id": self.run_id,
            "directory": str(self.directory),
            "partitions": [str(p) for p in self.partitions],
            "n_cases": self.n_cases,
            "digest": self.digest,
            "rejects": [vars(r) for r in self.rejects],
            "loaded": self.loaded,
        }

    @classmethod
    def from_json(cls, data: dict) -> StagedRun:
        return cls(
            run_id=data["run_id"],
            directory=Path(data["directory"]),
            partitions=[Path(p) for p in data["partitions"]],
            n_cases=data["n_cases"],
            digest=data["digest"],
            rejects=[Reject(**r) for r in data["rejects"]],
            loaded=data["loaded"],
        )


def partition_count(path: Path) -> int:
    size = path.stat().st_size * (GZIP_RATIO if path.suffix == ".gz" else 1)
    return max(1, math.ceil(size / PARTITION_BYTES))


def _stamp(manifest: Manifest) -> list:
    files = [manifest.run_dir / "manifest.json", manifest.cases_file]
    return [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files]


def known_digest(manifest: Manifest, stat_cache: Path) -> str | None:
    """The digest recorded for these files when their size and modification time are
    unchanged since it was computed (the way make and git decide what changed)."""
    if stat_cache.is_file():
        cached = json.loads(stat_cache.read_text())
        if cached.get("stamp") == _stamp(manifest):
            return cached["digest"]
    return None


def artifact_digest(manifest: Manifest, stat_cache: Path | None = None) -> str:
    """sha256 over the run's manifest.json and cases file, in that order; recorded in
    `stat_cache` with the files' size and modification time."""
    stamp = _stamp(manifest)
    digest = hashlib.sha256()
    for path in (manifest.run_dir / "manifest.json", manifest.cases_file):
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    result = "sha256:" + digest.hexdigest()
    if stat_cache is not None:
        stat_cache.parent.mkdir(parents=True, exist_ok=True)
        stat_cache.write_text(json.dumps({"stamp": stamp, "digest": result}))
    return result


def stage_cases(
    manifest: Manifest,
    staged_root: Path,
    scratch: Path,
    *,
    allow_rejects: bool,
    partitions: int | None = None,
    display_name: str | None = None,
) -> StagedRun:
    """Validate one run's cases file and stage its valid records under `staged_root`.

    Staging is content-addressed: the same bytes staged the same way are found again in
    `staged_root/<run_id>/<digest>-p<partitions>-<mode>/` and not re-read.
    """
    source = manifest.cases_file
    display_name = display_name or str(source)
    n_partitions = partitions or partition_count(source)
    run_root = staged_root / manifest.run_id
    mode = "allow-rejects" if allow_rejects else "strict"

    def target_of(digest: str) -> Path:
        return run_root / f"{digest.removeprefix('sha256:')[:20]}-p{n_partitions}-{mode}"

    def cached(digest: str) -> StagedRun | None:
        found = target_of(digest) / STAGED_MANIFEST
        return StagedRun.from_json(json.loads(found.read_text())) if found.is_file() else None

    stat_cache = run_root / "stat.json"
    digest = known_digest(manifest, stat_cache)
    if digest and (hit := cached(digest)):
        return hit

    building = run_root / f"building-{uuid.uuid4().hex[:8]}"
    run_root.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    con = engine.connect(spill_dir=scratch)
    stage = partial(_stage_fresh, con, manifest, source, building, scratch, n_partitions, allow_rejects, display_name)
    try:
        if digest:
            staged = stage()
        else:
            # Files not seen with this size and mtime: DuckDB stages them in a worker thread
            # while they are hashed here (about 0.3 s per 440 MB, hidden behind the DuckDB
            # pass). A touched but unchanged file is found by its hash; the pass is interrupted.
            with ThreadPoolExecutor(max_workers=1) as worker:
                staging = worker.submit(stage)
                digest = artifact_digest(manifest, stat_cache)
                if hit := cached(digest):
                    con.interrupt()
                    wait([staging])
                    shutil.rmtree(building, ignore_errors=True)
                    return hit
                staged = staging.result()
    finally:
        con.close()
    if staged.n_cases == 0 and not staged.rejects:
        shutil.rmtree(building, ignore_errors=True)
        raise InputError(f"{display_name}: holds no records")
    # The partitions move with their folder; the manifest of the staging is written last.
    target = target_of(digest)
    building.mkdir(parents=True, exist_ok=True)
    staged = replace(
        staged,
        digest=digest,
        directory=target,
        partitions=[target / p.relative_to(building) for p in staged.partitions],
    )
    (building / STAGED_MANIFEST).write_text(json.dumps(staged.to_json()))
    building.rename(target)
    return staged


def _stage_fresh(
    con: duckdb.DuckDBPyConnection,
    manifest: Manifest,
    source: Path,
    building: Path,
    scratch: Path,
    n_partitions: int,
    allow_rejects: bool,
    display_name: str,
) -> StagedRun:
    """Stage `source` into `building`; the digest is filled in by the caller."""
    staged = _stage(con, source, building, n_partitions, FAST_PATH_OBJECT_LIMIT)
    rejects: list[Reject] = []
    if staged is None:
        clean = scratch / "clean.jsonl"
        with open(clean, "wb") as clean_out:
            account = split_records(source, display_name, clean_out)
        rejects = account.rejects
        if account.valid + len(rejects) == 0:
            raise InputError(f"{display_name}: holds no records")
        if rejects and not allow_rejects:
            return StagedRun(manifest.run_id, building, [], 0, "", rejects, loaded=False)
        staged = _stage(con, clean, building, n_partitions, MAX_RECORD_BYTES)
        if staged is None:
            raise RuntimeError(f"{display_name}: records that passed the rules failed the SQL checks")
        clean.unlink()
    files, n_cases = staged
    return StagedRun(manifest.run_id, building, files, n_cases, "", rejects)


def _stage(
    con: duckdb.DuckDBPyConnection, path: Path, out_dir: Path, partitions: int, object_limit: int
) -> tuple[list[Path], int] | None:
    """Write `path` staged and partitioned into `out_dir`: (files, records), or None when a
    record breaks a rule."""
    try:
        con.execute(
            "copy (" + sql.load("staged_cases") + ") to $out_dir "
            "(format parquet, partition_by (partition), overwrite_or_ignore)",
            {
                "path": str(path),
                "max_object_size": object_limit,
                "partitions": partitions,
                "out_dir": str(out_dir),
            },
        )
    except duckdb.InterruptException:
        raise  # the same bytes were found staged already (see stage_cases)
    except (duckdb.Error, UnicodeDecodeError):
        # Malformed JSON or wrong shapes: the line-by-line pass names each record. DuckDB
        # raises UnicodeDecodeError when its message quotes a line cut inside a character.
        shutil.rmtree(out_dir, ignore_errors=True)
        return None
    files = sorted(out_dir.glob("partition=*/*.parquet"))
    if not files:
        return [], 0
    n_records, n_bad, n_repeated = con.execute(
        sql.load("staged_case_problems"), {"files": [str(f) for f in files]}
    ).fetchone()
    if n_bad or n_repeated:
        shutil.rmtree(out_dir, ignore_errors=True)
        return None
    return files, n_records


STAGED_COLUMNS = ["case_id", "locale", "category", "gold_source", "gold", "items"]


def read_staged(path: Path) -> pl.DataFrame:
    """One staged partition, in the order it was written."""
    return pl.read_parquet(path, columns=STAGED_COLUMNS, hive_partitioning=False)


def write_rejects(run_id: str, rejects: list[Reject], path: Path) -> None:
    frame = pl.DataFrame(
        {
            "run_id": [run_id] * len(rejects),
            "source_file": [r.source_file for r in rejects],
            "line": [r.line for r in rejects],
            "reason": [r.reason for r in rejects],
            "raw": [r.raw for r in rejects],
        },
        schema=REJECTS_SCHEMA,
    )
    frame.write_parquet(path, compression="zstd")
