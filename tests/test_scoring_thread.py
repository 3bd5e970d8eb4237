"""In this process a run's batches are scored on a thread of their own while the next batch is
parsed and staged (flows/job/job.py `InProcess.score`). A batch whose scoring fails there fails
the run as it would have in line: the error is the one raised, nothing is committed, no part
of the transaction is left, and the scoring thread is gone once the steps are closed.

The failure is a full disk as the second batch writes its parts (OSError ENOSPC raised by the
real part writer's call), the other batches written by the real code."""

from __future__ import annotations

import errno
import threading

import pytest
from builders import case, evaluate, job_options, write_run
from retrieval_eval.flows.job import run_steps
from retrieval_eval.flows.warehouse.warehouse import Warehouse


def test_a_batch_failing_on_the_scoring_thread_fails_the_run_and_leaves_nothing(tmp_path, monkeypatch):
    runs, warehouse = tmp_path / "runs", tmp_path / "wh"
    items = [{"id": f"k{j}::0", "parent_id": f"k{j}", "score": 1 - j / 10} for j in range(5)]
    write_run(runs, "run-a", [case(f"c{i}", items, [f"k{i % 5}"]) for i in range(40)])
    written = run_steps.write_parquet
    calls = []

    def full_disk_at_the_second_batch(frame, path, root, **options):
        calls.append(path.parent.parent.name)
        if calls.count("cases") == 2:  # the second batch's `cases` part
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return written(frame, path, root, **options)

    monkeypatch.setattr(run_steps, "write_parquet", full_disk_at_the_second_batch)
    with pytest.raises(OSError) as raised:
        evaluate(job_options(runs, warehouse, batch_items=50))  # 10 cases a batch: 4 batches
    assert raised.value.errno == errno.ENOSPC
    assert calls.count("cases") == 2  # the batches after it were not scored
    assert not Warehouse(warehouse).state().runs  # nothing committed
    assert not list(warehouse.rglob("*.parquet"))  # no part of the transaction left
    assert not [t for t in threading.enumerate() if t.name.startswith("score")]
