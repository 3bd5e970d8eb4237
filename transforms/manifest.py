"""A run's manifest.json (SPEC 3), validated from its parsed JSON before anything of the run
is written. Reading the file is flows/sources/artifacts.py's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .errors import InputError
from .metrics import MAX_K
from .records import json_type_name

SAFE_RUN_ID = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Manifest:
    run_id: str
    created_at: str  # as written
    created_at_utc: datetime  # the instant: runs are ordered by it (an offset-less time is UTC)
    retrieval_top_k: int
    git_sha: str | None
    dataset_version: str | None
    config: dict[str, Any]


def is_safe_run_id(run_id: object) -> bool:
    return isinstance(run_id, str) and SAFE_RUN_ID.fullmatch(run_id) is not None and run_id not in (".", "..")


def parse_instant(text: str) -> datetime | None:
    """The UTC instant of an ISO 8601 timestamp (offsets honoured, none meaning UTC), or None."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def parse_manifest(data: object, source: str, folder_name: str | None = None) -> Manifest:
    """Check a parsed manifest.json; `source` names it in messages, `folder_name` (when the
    run comes from a run folder) must equal its run_id. Raises InputError naming the field."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: must hold a JSON object")
    run_id = data.get("run_id")
    if not is_safe_run_id(run_id):
        raise InputError(f"{source}: field run_id {run_id!r} is not a safe name ([A-Za-z0-9._-]+)")
    if folder_name is not None and run_id != folder_name:
        raise InputError(f"{source}: field run_id {run_id!r} differs from its folder {folder_name!r}")
    created_at = data.get("created_at")
    instant = parse_instant(created_at) if isinstance(created_at, str) else None
    if instant is None:
        raise InputError(f"{source}: field created_at must be an ISO 8601 timestamp, got {created_at!r}")
    top_k = data.get("retrieval_top_k")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_K:
        raise InputError(f"{source}: field retrieval_top_k must be an integer in [1, {MAX_K}], got {top_k!r}")
    for name in ("git_sha", "dataset_version"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise InputError(f"{source}: field {name} must be a string")
    config = data.get("config")
    if config is None:
        config = {}
    elif not isinstance(config, dict):  # an empty list or text too: what is given must be an object
        raise InputError(f"{source}: field config must be an object, got {json_type_name(config)}")
    return Manifest(
        run_id=run_id,
        created_at=created_at,
        created_at_utc=instant,
        retrieval_top_k=top_k,
        git_sha=data.get("git_sha"),
        dataset_version=data.get("dataset_version"),
        config=config,
    )
