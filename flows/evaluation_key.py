"""What a run's figures depend on, as one key: a committed run whose key matches is not
evaluated again (SPEC 7: ingest is cached on the artifact's content digest)."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib.resources import files

# The code that computes figures: the SQL models and the metric steps (trec.py: how a TREC
# run is read and ranked). Editing anything else (the report, the CLI, the orchestration)
# leaves every committed run valid.
FIGURE_STEPS = ("metrics.py", "records.py", "staging.py", "rankings.py", "case_metrics.py", "aggregates.py",
                "run_summary.py", "trec.py")


@cache
def code_fingerprint() -> str:
    """A short hash of the figure code as installed (computed once per process)."""
    digest = hashlib.sha256()
    sql = files("retrieval_eval.sql")
    transforms = files("retrieval_eval.transforms")
    sources = [("sql/" + item.name, item) for item in sorted(sql.iterdir(), key=lambda i: i.name) if item.name.endswith(".sql")]
    sources += [("transforms/" + name, transforms / name) for name in FIGURE_STEPS]
    for name, item in sources:
        digest.update(name.encode())
        digest.update(item.read_bytes())
    return digest.hexdigest()[:12]


def evaluation_key(manifest_digest: str, cases_digest: str, *, headline_k: int, ks: list[int],
                   allow_rejects: bool, relevance_level: int) -> str:
    """The run's bytes (manifest and cases file), its cutoffs, reject mode, relevance level
    and the figure code."""
    inputs = [manifest_digest, cases_digest, headline_k, ks, allow_rejects, relevance_level, code_fingerprint()]
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:20]
