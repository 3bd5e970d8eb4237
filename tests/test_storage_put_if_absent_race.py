"""Three writers race `put_if_absent` on the same keys, from threads and from processes:
exactly one wins each key, the key holds the winner's bytes, and every loser reading the key
back finds another writer's commit id (the log's protocol, flows/storage/store.py).

On the local store the race is real (a link either lands or fails, atomically in the
kernel). moto's server checks If-None-Match and then writes without a lock, so on it the
test shows the protocol end to end, not S3's atomicity."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid

from retrieval_eval.flows.storage import join_key

WRITERS = 3
ROUNDS = 30

CLAIM_IN_A_PROCESS = """
import json, os, sys, time
from retrieval_eval.flows.storage import join_key, open_store
location, prefix, writer, rounds, go = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
store, base = open_store(location)
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
won = [store.put_if_absent(join_key(base, prefix, f"{n:04d}"), f"{writer}".encode()) for n in range(rounds)]
print(json.dumps(won))
"""


def entry(writer: str) -> bytes:
    return json.dumps({"commit": writer}).encode()


def check_one_winner_per_key(store, keys, outcomes: dict[str, list[bool]], read_back) -> None:
    for n, key in enumerate(keys):
        winners = [writer for writer, won in outcomes.items() if won[n]]
        assert len(winners) == 1, (key, winners)
        assert read_back(store.get(key)) == winners[0]


def test_three_threads_race_and_one_wins_each_key(store_under_test):
    store, prefix = store_under_test
    keys = [join_key(prefix, "entries", f"{n:04d}") for n in range(ROUNDS)]
    writers = [uuid.uuid4().hex for _ in range(WRITERS)]
    outcomes = {writer: [False] * ROUNDS for writer in writers}
    start_together = threading.Barrier(WRITERS)

    def claim(writer: str) -> None:
        for n, key in enumerate(keys):
            start_together.wait()
            outcomes[writer][n] = store.put_if_absent(key, entry(writer))

    threads = [threading.Thread(target=claim, args=(writer,)) for writer in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    check_one_winner_per_key(store, keys, outcomes, lambda data: json.loads(data)["commit"])


def test_three_processes_race_and_one_wins_each_key(store_under_test, tmp_path):
    store, prefix = store_under_test
    location = f"s3://{store.location.bucket}/{prefix}" if hasattr(store, "location") else "/" + prefix
    go = tmp_path / "go"
    writers = [f"writer-{uuid.uuid4().hex[:8]}" for _ in range(WRITERS)]
    processes = {
        writer: subprocess.Popen([sys.executable, "-c", CLAIM_IN_A_PROCESS, location, "entries", writer, str(ROUNDS), str(go)],
                                 stdout=subprocess.PIPE, text=True)
        for writer in writers
    }
    for process in processes.values():
        assert process.stdout.readline() == "ready\n"
    go.touch()
    outcomes = {}
    for writer, process in processes.items():
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0
        outcomes[writer] = json.loads(out)
    keys = [join_key(prefix, "entries", f"{n:04d}") for n in range(ROUNDS)]
    check_one_winner_per_key(store, keys, outcomes, lambda data: data.decode())


def committed(store, key: str, commit_id: str) -> bool:
    """The caller's side of a commit (flows/storage/store.py): claim the key; when the claim
    says False (or the store was unavailable), read the entry back and compare commit ids."""
    if store.put_if_absent(key, entry(commit_id)):
        return True
    return json.loads(store.get(key))["commit"] == commit_id


def test_a_retried_claim_is_recognised_by_its_commit_id(store_under_test):
    store, prefix = store_under_test
    key = join_key(prefix, "entries", "0001")
    assert committed(store, key, "commit-a")
    # The response to the first request was lost and the request went again: the store
    # answers False, and the read-back finds this writer's own commit id.
    assert store.put_if_absent(key, entry("commit-a")) is False
    assert committed(store, key, "commit-a")
    assert not committed(store, key, "commit-b")
