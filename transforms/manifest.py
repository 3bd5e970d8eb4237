"""A run's manifest.json (SPEC 3), validated before anything of the run is written."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from transforms.errors import InputError, read_json_file

SAFE_RUN_ID = re.compile(r"[A-Za-z0-9._-]+")
CASE_FILE_NAMES = ("cases.jsonl", "cases.jsonl.gz")


@dataclass(frozen=True)
class Manifest:
    run_id: str
    created_at: str
    retrieval_top_k: int
    git_sha: str | None
    dataset_version: str | None
    config: dict[str, Any]
    run_dir: Path

    @property
    def cases_file(self) -> Path:
        found = _cases_file_in(self.run_dir)
        if found is None:
            raise InputError(f"{self.run_dir}: no cases.jsonl or cases.jsonl.gz")
        return found


def _cases_file_in(run_dir: Path) -> Path | None:
    return next((run_dir / name for name in CASE_FILE_NAMES if (run_dir / name).is_file()), None)


def is_safe_run_id(run_id: object) -> bool:
    return (
        isinstance(run_id, str)
        and SAFE_RUN_ID.fullmatch(run_id) is not None
        and run_id not in (".", "..")
    )


def load_manifest(run_dir: Path) -> Manifest:
    """Read and check `run_dir/manifest.json`; raise InputError naming file and field."""
    path = run_dir / "manifest.json"
    data = read_json_file(path, "every run folder needs a manifest.json")
    if not isinstance(data, dict):
        raise InputError(f"{path}: must hold a JSON object")

    run_id = data.get("run_id")
    if not is_safe_run_id(run_id):
        raise InputError(f"{path}: field run_id {run_id!r} is not a safe name ([A-Za-z0-9._-]+)")
    if run_id != run_dir.name:
        raise InputError(f"{path}: field run_id {run_id!r} differs from its folder {run_dir.name!r}")
    created_at = data.get("created_at")
    if not isinstance(created_at, str) or not _is_iso8601(created_at):
        raise InputError(f"{path}: field created_at must be an ISO 8601 timestamp, got {created_at!r}")
    top_k = data.get("retrieval_top_k")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise InputError(f"{path}: field retrieval_top_k must be an integer >= 1, got {top_k!r}")
    for name in ("git_sha", "dataset_version"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise InputError(f"{path}: field {name} must be a string")
    config = data.get("config", {})
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise InputError(f"{path}: field config must be an object")
    return Manifest(
        run_id=run_id,
        created_at=created_at,
        retrieval_top_k=top_k,
        git_sha=data.get("git_sha"),
        dataset_version=data.get("dataset_version"),
        config=config,
        run_dir=run_dir,
    )


def _is_iso8601(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def find_run_dirs(runs: Path) -> list[Path]:
    """RUNS is one run folder (it has a manifest.json) or a root of run folders."""
    if not runs.exists():
        raise InputError(f"{runs}: no such runs folder")
    if not runs.is_dir():
        raise InputError(f"{runs}: not a folder (give a runs root or one run folder)")
    if (runs / "manifest.json").exists():
        return [runs]
    run_dirs = sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not run_dirs:
        raise InputError(f"{runs}: holds no run folders")
    return run_dirs


def first_cases_file(runs: Path) -> Path | None:
    """The cases file that the runs of RUNS are read from first (in `find_run_dirs` order),
    or None when RUNS is not as it should be: reading the manifests says why."""
    try:
        return _cases_file_in(find_run_dirs(runs)[0])
    except InputError:
        return None
