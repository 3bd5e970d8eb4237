"""The plan of each run, made once before any work: its files and their stamp, its cutoffs,
what the warehouse holds of it, and whether that stands as it is (SPEC 7 and 9)."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass

from ...transforms.case_metrics import cutoffs
from ..sources.source import RunSource
from ..warehouse.evaluation_key import evaluation_key
from ..warehouse.views import part_damage
from ..warehouse.warehouse import RunState, State, Warehouse


@dataclass(frozen=True)
class RunPlan:
    folder: RunSource  # a run folder, a TREC run, …: the run's artifacts (flows/sources/source.py)
    headline_k: int
    ks: list[int]
    relevance_level: int
    allow_rejects: bool
    stamp: list  # the artifacts' fingerprint (RunSource.fingerprint): equal to the committed one, nothing is read
    manifest_digest: str
    committed: RunState | None
    damage: str | None  # what is wrong with the committed parts, if anything
    reuse: str | None  # why the committed run stands as it is; None: evaluate it
    kb: dict | None = None  # the KB the job judges it against (flows/inputs/kb.py `kb_record`); None: none

    @property
    def run_id(self) -> str:
        return self.folder.run_id

    @property
    def cases_file(self) -> str:
        """The cases file as the log and the `runs` row record it: an absolute path or a URI."""
        return self.folder.cases_uri

    @property
    def committed_digest(self) -> str | None:
        """The digest of the cases file whose committed evaluation can stand for this plan
        (None: nothing to reuse: none committed, other cutoffs or code, damaged parts)."""
        if self.committed is None or self.committed.evaluation_key is None or not self.committed.source:
            return None
        if self.damage:
            return None
        if self.committed.evaluation_key != self.evaluation_key(self.committed.source["cases_digest"]):
            return None
        return self.committed.source["cases_digest"]

    @property
    def kb_changed(self) -> bool:
        """Whether the committed run recorded another KB than this job's: its evaluation can
        stand (no figure depends on the KB), its `runs` row is written again with this one."""
        return self.committed is not None and bool(self.committed.source) and self.committed.source.get("kb") != self.kb

    def evaluation_key(self, cases_digest: str) -> str:
        return evaluation_key(self.manifest_digest, cases_digest, headline_k=self.headline_k, ks=self.ks,
                              allow_rejects=self.allow_rejects, relevance_level=self.relevance_level)

    def source(self, cases_digest: str) -> dict:
        """What the log records of the artifacts an evaluation read."""
        manifest = self.folder.manifest
        fields = {"run_id": manifest.run_id, "created_at": manifest.created_at, "retrieval_top_k": manifest.retrieval_top_k,
                  "git_sha": manifest.git_sha, "dataset_version": manifest.dataset_version, "config": manifest.config}
        return {"cases_file": str(self.cases_file), "stamp": self.stamp, "cases_digest": cases_digest,
                "manifest_digest": self.manifest_digest, "manifest": fields, "kb": self.kb}


def stamp(folder: RunSource) -> list:
    """The run's artifacts' fingerprint, read from the store without reading the files."""
    return folder.fingerprint()


def manifest_digest(folder: RunSource) -> str:
    """Of the manifest's checked fields (every one of them lands in the `runs` row)."""
    fields = json.dumps(folder.manifest.__dict__, sort_keys=True, default=str)
    return hashlib.sha256(fields.encode()).hexdigest()[:20]


def damaged_part(warehouse: Warehouse, run: RunState, every_byte: bool) -> str | None:
    """What is wrong with a committed run's parts. In a bucket only the run read to the byte
    is checked (fetched into the cache, digest checked): the others cost no request each
    (SPEC 14), and a damaged one is named by the command that reads it."""
    if warehouse.remote and not every_byte:
        return None
    for table, part in run.files():
        damage = part_damage(warehouse, part, every_byte=every_byte)
        if damage:
            return f"part {part.path} of table {table} is {damage}"
    return None


def plan_run(folder: RunSource, state: State, warehouse: Warehouse, *, k: int | None, ks: tuple[int, ...],
             relevance_level: int, allow_rejects: bool, kb: dict | None = None, every_byte: bool = False) -> RunPlan:
    headline_k = k or folder.manifest.retrieval_top_k
    committed = state.runs.get(folder.run_id)
    damage = damaged_part(warehouse, committed, every_byte) if committed else None
    if damage:
        print(f"retrieval-eval: run {folder.run_id}: {damage}; evaluating it again from its artifacts",
              file=sys.stderr)
    plan = RunPlan(folder, headline_k, cutoffs(headline_k, ks), relevance_level, allow_rejects, stamp(folder),
                   manifest_digest(folder), committed, damage, None, kb)
    if plan.committed_digest is None or committed.source.get("stamp") != plan.stamp:
        return plan
    return RunPlan(**{**plan.__dict__, "reuse": "unchanged"})


def plan_runs(folders: list[RunSource], state: State, warehouse: Warehouse, *, newest: str | None = None,
              **options) -> list[RunPlan]:
    """Each run's plan; the parts of the `newest` run (the one the report details and the job
    gates) are checked to the byte, the others by their stat."""
    return [plan_run(folder, state, warehouse, every_byte=folder.run_id == newest, **options) for folder in folders]
