"""Shared fixtures: records scored by the pure steps, private copies of the committed sample,
and an audit of every warehouse a test builds (sql/audits/: unique keys per grain, metrics in
[0, 1], hit ≥ recall and nDCG, monotone in k, runs rows that agree with their cases)."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import copy_sample, score
from prefect_server import prefect_server  # noqa: F401  (the session's Prefect API)
from s3_server import moto_endpoint, s3_bucket, store_under_test  # noqa: F401  (loopback S3 fixtures)
from retrieval_eval.flows.warehouse.warehouse import Warehouse
from retrieval_eval.flows.warehouse.warehouse_check import audit_warehouse


@pytest.fixture
def scored_cases():
    """Score records with the pure steps (one run, in memory)."""
    return lambda records, **options: score(records, **options)


@pytest.fixture
def sample_copy(tmp_path) -> Path:
    """A private copy of the committed sample runs and KB: its `data` folder."""
    return copy_sample(tmp_path) / "data"


def warehouses_under(folder: Path) -> list[Path]:
    return sorted(log.parent for log in folder.rglob("_log") if log.is_dir())


@pytest.fixture(autouse=True)
def audited_warehouses(request):
    """After each test, every warehouse it built in its `tmp_path` passes the data audits
    (a test that damages a warehouse on purpose is marked `damages_warehouse`)."""
    # Asked for here, so that the folder outlives this fixture's end.
    folder = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if folder is None or request.node.get_closest_marker("damages_warehouse"):
        return
    for root in warehouses_under(folder):
        assert audit_warehouse(Warehouse(root)) == [], root


def pytest_configure(config):
    config.addinivalue_line("markers", "damages_warehouse: the test damages a warehouse on purpose (no audit after it)")
