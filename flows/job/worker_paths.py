"""The local paths of a job that the workers of a Dask cluster at `--dask-address` must see as
this machine does (SPEC 14), checked on every worker before any task is submitted: those its
tasks read or write, the runs (RUNS, or --trec-run and --qrels) and the warehouse folder. The
KB, the baseline and the report are read and written by the flow's own process (the report
and gate tasks run in it), so a cluster that shares no disk may take them as local paths. A
path given as a URI is read from its store and needs no such check.

What a worker must find, by the driver's view of each path: a file of the same size and
modification time; a folder with the same entries; for a folder written into, the probe file
the driver has just put there (an empty folder by that name on a worker, such as a disk of
its own mounted there, is not the driver's)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from ...transforms.errors import InputError
from .job import JobOptions

PROBE_PREFIX = ".retrieval-eval-probe-"


def existing_ancestor(path: Path) -> Path:
    """`path` when it exists, else its nearest existing parent folder."""
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def what_a_worker_must_see(options: JobOptions) -> list[tuple[str, Path]]:
    """(option, local path) of every local path of the job's tasks that exists here: read (the
    runs) or written into (the warehouse folder, or the nearest folder above it that exists)."""
    read = [("RUNS", options.runs), ("--trec-run", options.trec_run), ("--qrels", options.qrels)]
    found = [(option, Path(path).absolute()) for option, path in read if isinstance(path, Path) and path.exists()]
    if isinstance(options.warehouse, Path):
        found.append(("--warehouse", existing_ancestor(options.warehouse.absolute())))
    return found


def seen_here(path: Path, probe: str | None) -> tuple:
    """What this process sees at `path`: a file's size and mtime, a folder's entries, or,
    given the name of a probe file, whether that file is in the folder."""
    try:
        if probe is not None:
            return ("probe", (path / probe).is_file())
        if path.is_dir():
            return ("folder", sorted(os.listdir(path)))
        stat = path.stat()
        return ("file", stat.st_size, stat.st_mtime_ns)
    except OSError as error:
        return ("unreadable", error.strerror)


def unseen_on_worker(expected: list[tuple[str, str, str | None, tuple]]) -> list[tuple[str, str]]:
    """Run on a worker: (option, path) of each expected path it does not see as the driver does."""
    return [(option, path) for option, path, probe, seen in expected if seen_here(Path(path), probe) != seen]


def check_worker_paths(client, options: JobOptions, address: str) -> None:
    """Every worker of `client`'s cluster sees each local path of the job as this machine does;
    the first path one does not is bad input (InputError), named with the option it came from."""
    paths = what_a_worker_must_see(options)
    if not paths:
        return
    probes = []
    expected = []
    try:
        for option, path in paths:
            probe = None
            if option == "--warehouse":
                probe = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
                try:
                    (path / probe).write_bytes(b"")
                except OSError as error:
                    raise InputError(f"{path}: cannot write here ({option}: {error.strerror})") from None
                probes.append(path / probe)
            expected.append((option, str(path), probe, seen_here(path, probe)))
        answers = client.run(unseen_on_worker, expected)
    finally:
        for probe_file in probes:
            probe_file.unlink(missing_ok=True)
    for worker, unseen in sorted(answers.items()):
        if unseen:
            option, path = unseen[0]
            raise InputError(f"{path}: Dask worker {worker} of {address} does not see this path ({option}) as this "
                             "machine does; give it as a URI (s3://…) or start the workers where every local path "
                             "of the job is shared")
