"""Files given as `--out` (SPEC 16), through the real command: a symlink's target is written
and the link stays a link; a device, a FIFO or /dev/stdout is written directly, never
replaced; a write that fails (/dev/full, a full disk) is exit 2 naming the path given.

Devices are tested in a mount namespace of their own with a scratch /dev (a tmpfs with the
nodes made by mknod), so that nothing here can replace the machine's /dev/null."""

from __future__ import annotations

import shlex
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from builders import case, chunk, cli, evaluate, job_options, write_run

RUN_ID = "run-out"
N_CASES = 200  # 1,000 trec-run lines, about 30 KB: more than a 4 KB filesystem holds

# The nodes a process needs in /dev, made afresh in the namespace's own /dev.
SCRATCH_DEV = " && ".join([
    "mount -t tmpfs scratch-dev /dev",
    "mknod -m 666 /dev/null c 1 3", "mknod -m 666 /dev/full c 1 7", "mknod -m 666 /dev/zero c 1 5",
    "mknod -m 666 /dev/urandom c 1 9", "mknod -m 666 /dev/random c 1 8",
    "ln -s /proc/self/fd /dev/fd", "ln -s /proc/self/fd/1 /dev/stdout", "ln -s /proc/self/fd/2 /dev/stderr",
])


def unshare_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("mknod") is None:
        return False
    tried = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", SCRATCH_DEV],
                           capture_output=True)
    return tried.returncode == 0


needs_namespace = pytest.mark.skipif(not unshare_works(),
                                     reason="no mount namespace with a scratch /dev here (unshare -m needs root)")


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("out-files")
    cases = [case(f"case-{i:03d}", [chunk(f"card-{i}-{j}") for j in range(5)], [f"card-{i}-0"])
             for i in range(N_CASES)]
    write_run(root / "runs", RUN_ID, cases, top_k=5)
    evaluate(job_options(root / "runs", root / "warehouse"))
    return root / "warehouse"


def export_args(warehouse: Path, out: str, fmt: str = "trec-run") -> list[str]:
    return ["export", RUN_ID, "--format", fmt, "--out", out, "--warehouse", str(warehouse)]


def expected_trec_run(warehouse: Path) -> str:
    result = cli("export", RUN_ID, "--format", "trec-run", "--warehouse", str(warehouse))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == N_CASES * 5
    return result.stdout


def in_scratch_dev(script: str) -> subprocess.CompletedProcess:
    """`script` run by sh in a mount namespace whose /dev is a scratch tmpfs."""
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", f"{SCRATCH_DEV} && {script}"],
                          capture_output=True, text=True, timeout=600)


def command(*args: str) -> str:
    return shlex.join([sys.executable, "-m", "retrieval_eval", *args])


@needs_namespace
@pytest.mark.parametrize("what", ["export", "baseline refresh"])
def test_dev_null_given_as_out_is_written_and_stays_a_character_device(tmp_path, warehouse, what):
    args = export_args(warehouse, "/dev/null") if what == "export" else \
        ["baseline", "refresh", RUN_ID, "--out", "/dev/null", "--warehouse", str(warehouse)]
    kind = tmp_path / "kind"
    result = in_scratch_dev(f"{command(*args)}; rc=$?; stat -c %F /dev/null > {kind}; ls -a /dev > {kind}.ls; "
                            "exit $rc")
    assert result.returncode == 0, result.stderr
    assert kind.read_text() == "character special file\n"
    assert not [name for name in kind.with_suffix(".ls").read_text().split() if name.endswith(".partial")]


@needs_namespace
@pytest.mark.parametrize("what", ["trec-run", "trec-eval", "csv", "parquet", "baseline refresh"])
def test_dev_full_given_as_out_is_exit_2_naming_dev_full(tmp_path, warehouse, what):
    # csv: Polars' writer, handed a file number, wrote past the handle and named no path
    args = export_args(warehouse, "/dev/full", what) if what != "baseline refresh" else \
        ["baseline", "refresh", RUN_ID, "--out", "/dev/full", "--warehouse", str(warehouse)]
    kind = tmp_path / "kind"
    result = in_scratch_dev(f"{command(*args)}; rc=$?; stat -c %F /dev/full > {kind}; exit $rc")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.splitlines() == ["retrieval-eval: /dev/full: No space left on device"]
    assert kind.read_text() == "character special file\n"


@needs_namespace
def test_dev_stdout_given_as_out_writes_to_the_commands_stdout(warehouse):
    expected = expected_trec_run(warehouse)
    result = in_scratch_dev(command(*export_args(warehouse, "/dev/stdout")))
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected and result.stderr == ""


@pytest.mark.parametrize("out", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_a_descriptor_given_as_out_is_written_where_it_stands_not_truncated(tmp_path, warehouse, out):
    # `>> log`: the command's stdout appends to a file; opening /dev/stdout's path again would
    # truncate it and write from its first byte
    log = tmp_path / "log"
    log.write_text("kept line\n")
    with log.open("a") as appended:
        result = subprocess.run(shlex.split(command(*export_args(warehouse, out))), stdout=appended,
                                stderr=subprocess.PIPE, text=True)
    assert result.returncode == 0, result.stderr
    assert log.read_text() == "kept line\n" + expected_trec_run(warehouse)


@needs_namespace
def test_a_write_that_fails_on_a_full_disk_names_the_path_given_and_keeps_the_old_file(tmp_path, warehouse):
    small = tmp_path / "small"
    small.mkdir()
    out = small / "run.txt"
    old = tmp_path / "old-content"
    listing = tmp_path / "listing"
    result = in_scratch_dev(f"mount -t tmpfs -o size=4k small {small} && echo old > {out} && "
                            f"{command(*export_args(warehouse, str(out)))}; rc=$?; cat {out} > {old}; "
                            f"ls -a {small} > {listing}; exit $rc")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.splitlines() == [f"retrieval-eval: {out}: No space left on device"]
    assert old.read_text() == "old\n"  # never half-written
    assert sorted(listing.read_text().split()) == [".", "..", "run.txt"]  # nothing left beside it


def test_a_fifo_given_as_out_is_written_to_its_reader(tmp_path, warehouse):
    expected = expected_trec_run(warehouse)
    fifo = tmp_path / "pipe"
    fifo.parent.mkdir(exist_ok=True)
    subprocess.run(["mkfifo", str(fifo)], check=True)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    result = cli(*export_args(warehouse, str(fifo)), timeout=300)
    reader.join(timeout=60)
    assert result.returncode == 0, result.stderr
    assert received == [expected]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


@pytest.mark.parametrize("what", ["export", "baseline refresh"])
def test_a_symlink_given_as_out_has_its_target_written_and_stays_a_link(tmp_path, warehouse, what):
    (tmp_path / "links").mkdir()
    (tmp_path / "files").mkdir()
    target = tmp_path / "files" / "written.txt"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "links" / "out.txt"
    link.symlink_to(Path("..") / "files" / "written.txt")  # relative, as `ln -s` users write them
    args = export_args(warehouse, str(link)) if what == "export" else \
        ["baseline", "refresh", RUN_ID, "--out", str(link), "--warehouse", str(warehouse)]
    result = cli(*args)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and link.readlink() == Path("..") / "files" / "written.txt"
    if what == "export":
        assert target.read_text() == expected_trec_run(warehouse)
    else:
        assert target.read_text().startswith("{") and f'"run_id": "{RUN_ID}"' in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the file it replaced keeps its mode
    assert sorted(p.name for p in (tmp_path / "links").iterdir()) == ["out.txt"]
    assert sorted(p.name for p in (tmp_path / "files").iterdir()) == ["written.txt"]


def test_a_dangling_symlink_given_as_out_creates_its_target(tmp_path, warehouse):
    target = tmp_path / "made.txt"
    link = tmp_path / "out.txt"
    link.symlink_to(target)
    result = cli(*export_args(warehouse, str(link)))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and target.read_text() == expected_trec_run(warehouse)
