"""A run evaluated by older code is not reused (SPEC 16): the evaluation key covers every file
whose code decides what is accepted or computed, found from the package rather than listed by
hand, so a file added to the package is covered until it is named as report-only."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from builders import case, chunk, evaluate, job_options, write_run
from retrieval_eval.flows.warehouse import evaluation_key as key_module
from retrieval_eval.flows.job.run_steps import Loaded, Reused
from retrieval_eval.flows.warehouse.evaluation_key import (CODE_FOLDERS, NOT_EVALUATION, PACKAGE_ROOT, code_digest,
                                                 code_files)

# The code the issue found outside the old hand-kept list, and the rest of what reads, judges
# and computes a run: the strict parser (source and compiled), the readers, the record rules,
# the sources, the SQL models and the metric steps.
DECIDING_FILES = [
    "flows/sources/_case_columns.c", "transforms/case_schema.py", "transforms/deep_json.py", "flows/sources/trec_files.py",
    "flows/sources/case_file.py", "flows/sources/strict_read.py", "flows/sources/ingest.py", "flows/sources/artifacts.py", "transforms/records.py",
    "transforms/manifest.py", "transforms/staging.py", "transforms/trec.py", "transforms/metrics.py",
    "transforms/rankings.py", "transforms/case_metrics.py", "transforms/aggregates.py", "transforms/run_summary.py",
    "flows/job/run_steps.py", "sql/case_metrics.sql", "sql/trec_rows_by_topic.sql", "sql/audits/unique_keys.sql",
]

# Where a run is read, judged and evaluated: everything these import or load must be covered.
EVALUATION_ENTRY_MODULES = ["flows/job/run_steps.py", "flows/sources/ingest.py", "flows/sources/trec_files.py", "flows/job/plan.py",
                            "flows/sources/artifacts.py", "flows/sources/case_file.py", "flows/commands/api.py"]


def code_copy(tmp_path: Path) -> Path:
    """The package's code folders, copied into a tree of their own."""
    root = tmp_path / "package"
    for folder in CODE_FOLDERS:
        shutil.copytree(PACKAGE_ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def compiled_parser() -> str | None:
    return next((name for name in code_files(PACKAGE_ROOT) if name.startswith("flows/sources/_case_columns.")
                 and not name.endswith(".c")), None)


@pytest.mark.parametrize("name", DECIDING_FILES + ["compiled parser"])
def test_a_change_to_a_file_that_decides_acceptance_or_figures_changes_the_key(tmp_path, name):
    if name == "compiled parser":
        name = compiled_parser()
        if name is None:
            pytest.skip("the strict parser is not built in this install")
    root = code_copy(tmp_path)
    before = code_digest(root)
    with open(root / name, "ab") as file:
        file.write(b"\n")
    assert code_digest(root) != before, name


def test_a_file_added_to_the_package_is_covered_without_being_listed(tmp_path):
    root = code_copy(tmp_path)
    before = code_digest(root)
    (root / "transforms" / "new_record_rule.py").write_text("LIMIT = 1\n")
    assert "transforms/new_record_rule.py" in code_files(root)
    assert code_digest(root) != before


def test_a_change_to_a_report_only_file_leaves_the_key(tmp_path):
    root = code_copy(tmp_path)
    before = code_digest(root)
    with open(root / "transforms" / "report_render.py", "ab") as file:
        file.write(b"\n")
    assert code_digest(root) == before


def test_every_report_only_exclusion_names_a_file_of_the_package():
    for name in NOT_EVALUATION:
        assert (PACKAGE_ROOT / name).is_file(), name


def module_file(module: str) -> str | None:
    """`retrieval_eval.a.b` → `a/b.py` (or `a/b/__init__.py`), None outside the package."""
    parts = module.split(".")
    if parts[0] != "retrieval_eval":
        return None
    for candidate in ("/".join(parts[1:]) + ".py", "/".join(parts[1:] + ["__init__.py"])):
        if candidate and (PACKAGE_ROOT / candidate).is_file():
            return candidate.removeprefix("/")
    return None


def imported_and_loaded(name: str) -> tuple[set[str], set[str]]:
    """The package files `name` imports (anywhere in its body, function-local imports too) and
    the SQL models it loads by name (`sql.load("x")`)."""
    tree = ast.parse((PACKAGE_ROOT / name).read_text(encoding="utf-8"))
    package = ["retrieval_eval", *Path(name).parent.parts]
    modules, models = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            stem = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                modules.add(module_file(f"{stem}.{alias.name}") or module_file(stem))
        elif isinstance(node, ast.Import):
            modules.update(module_file(alias.name) for alias in node.names)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
              and isinstance(node.func.value, ast.Name) and node.func.value.id == "sql"
              and node.args and isinstance(node.args[0], ast.Constant)):
            models.add(f"sql/{node.args[0].value}.sql")
    return modules - {None, ""}, models


def test_every_module_the_ingest_and_the_evaluation_import_is_covered():
    seen, models, todo = set(), set(), list(EVALUATION_ENTRY_MODULES)
    while todo:
        name = todo.pop()
        if name in seen or name == "__init__.py":  # the package's own __init__: version and API docstring
            continue
        seen.add(name)
        modules, loaded = imported_and_loaded(name)
        todo += modules
        models |= loaded
    assert "transforms/deep_json.py" in seen and "sql/case_metrics.sql" in models  # the walk reaches them
    covered = set(code_files(PACKAGE_ROOT))
    assert sorted((seen | models) - covered) == []


def test_a_run_evaluated_by_other_code_is_evaluated_again(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    write_run(runs, "run-a", [case("c1", [chunk("a"), chunk("b")], ["b"])])
    options = job_options(runs, tmp_path / "warehouse")
    root = code_copy(tmp_path)
    monkeypatch.setattr(key_module, "PACKAGE_ROOT", root)
    key_module.code_fingerprint.cache_clear()
    try:
        first = evaluate(options).outcomes[0]
        assert isinstance(first, Loaded)
        assert isinstance(evaluate(options).outcomes[0], Reused)  # the same code: reused
        with open(root / "transforms" / "deep_json.py", "ab") as file:
            file.write(b"\n")
        key_module.code_fingerprint.cache_clear()  # as a new process with the edited package would
        again = evaluate(options).outcomes[0]
        assert isinstance(again, Loaded) and again.commit.evaluation_key != first.commit.evaluation_key
    finally:
        key_module.code_fingerprint.cache_clear()
