"""What a run's figures depend on, as one key: a committed run whose key matches is not
evaluated again (SPEC 7: ingest is cached on the artifact's content digest; SPEC 16: a run
evaluated by older code is not reused)."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

# The package's own folder (the repository root in an editable install, site-packages/
# retrieval_eval in a wheel): its code folders hold every file the key covers.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("flows", "transforms", "sql")
# Python, the strict parser's C source and its compiled module (a wheel ships only the
# latter), and the SQL models.
CODE_SUFFIXES = (".py", ".c", ".sql", *EXTENSION_SUFFIXES)

# Every code file is covered except these, which only read committed runs, print them or
# carry options whose values the key holds; a file added to the package is covered until it
# is listed here. tests/test_evaluation_key_covers_code.py checks that nothing the ingest or
# the evaluation imports or loads is listed.
NOT_EVALUATION = {
    "flows/commands/cli.py": "turns arguments into options; the key holds the options' values",
    "flows/commands/entry.py": "the console entry point of flows/commands/cli.py",
    "flows/commands/run.py": "`run`'s command: starts the job and prints what it returns",
    "flows/commands/serve.py": "`serve`'s command: serves the deployment",
    "flows/commands/gate_and_baseline.py": "the gate's and the baseline's commands over committed runs",
    "flows/commands/read_only.py": "commands that read committed runs or check the KB",
    "flows/commands/warehouse_upkeep.py": "the warehouse's check, rebuild and vacuum commands",
    "flows/commands/schema.py": "prints a JSON Schema",
    "flows/commands/exit_codes.py": "the command's exit codes",
    "flows/commands/collector.py": "the garbage collector while the command imports",
    "flows/commands/terminal.py": "whether the terminal takes colour",
    "flows/nightly.py": "the deployment's entry point: starts the job",
    "flows/job/prefect_flows.py": "runs the job's steps as Prefect tasks; the steps are covered",
    "flows/job/prefect_settings.py": "Prefect's server and logging settings",
    "flows/job/progress.py": "progress messages on stderr",
    "flows/outputs/reports.py": "writes the report from committed runs",
    "flows/outputs/warehouse_gate.py": "the gate over committed runs",
    "flows/inputs/baseline_file.py": "reads and writes the gate's baseline snapshot",
    "flows/outputs/warehouse_comparison.py": "compares committed runs",
    "flows/outputs/export.py": "writes a committed run for other tools",
    "flows/outputs/query.py": "read statements over the warehouse views",
    "transforms/report.py": "the report model, from committed runs",
    "transforms/report_render.py": "renders the report",
    "transforms/charts.py": "the report's charts",
    "transforms/charts_of_report.py": "the report's charts",
    "transforms/case_explorer.py": "the report's case explorer",
    "transforms/tables.py": "lays out printed tables",
    "transforms/flips.py": "flips between two committed runs, for the report and the gate",
    "transforms/gate.py": "the gate's decision over committed runs",
    "transforms/gate_render.py": "renders the gate",
    "transforms/baseline.py": "the baseline snapshot of a committed run",
    "transforms/comparison.py": "paired comparison of committed runs",
    "transforms/compare_render.py": "renders a comparison",
    "transforms/paired_stats.py": "paired tests for the gate, the report and compare",
    "transforms/letter_display.py": "compare's tied groups of committed runs",
    "transforms/escaping.py": "escapes values for where they are printed",
    "sql/report_runs.sql": "the report's read of the runs view",
    "sql/report_aggregates.sql": "the report's read of the aggregates view",
    "sql/report_cases.sql": "the report's read of the cases view",
    "sql/export_case_metrics.sql": "export's read of a committed run",
    "sql/export_ranked_cards.sql": "export's read of a committed run",
    "sql/export_unwritable_ids.sql": "export's check of a committed run's ids",
}


def code_files(root: Path) -> list[str]:
    """The covered files under `root` (a package folder), as sorted paths relative to it."""
    found = []
    for folder in CODE_FOLDERS:
        for path in (root / folder).rglob("*"):
            name = path.relative_to(root).as_posix()
            if path.name.endswith(CODE_SUFFIXES) and "__pycache__" not in path.parts and name not in NOT_EVALUATION:
                found.append(name)
    return sorted(found)


def code_digest(root: Path) -> str:
    """A short hash of the covered files' names and bytes under `root`."""
    digest = hashlib.sha256()
    for name in code_files(root):
        data = (root / name).read_bytes()
        digest.update(json.dumps([name, len(data)]).encode())
        digest.update(data)
    return digest.hexdigest()[:12]


@cache
def code_fingerprint() -> str:
    """The covered code as installed, hashed once per process."""
    return code_digest(PACKAGE_ROOT)


def evaluation_key(manifest_digest: str, cases_digest: str, *, headline_k: int, ks: list[int],
                   allow_rejects: bool, relevance_level: int) -> str:
    """The run's bytes (manifest and cases file), its cutoffs, reject mode, relevance level
    and the code that reads, judges and computes it."""
    inputs = [manifest_digest, cases_digest, headline_k, ks, allow_rejects, relevance_level, code_fingerprint()]
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:20]
