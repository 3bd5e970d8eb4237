"""A catalog someone holds open with tables of their own is never overwritten (SPEC 16, SPEC
10): with a real DuckDB session in another process holding catalog.duckdb open read-write
with a table it made, readers answer from the log, `run` commits and says the catalog was not
refreshed (naming it), `warehouse rebuild` refuses naming it, and the user's table is still in
the file, or in a .foreign-* copy once the next command finds it there; never lost."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from builders import case, chunk, cli, write_run

# A user's session: the catalog opened read-write, a table of their own made in it, held open
# until told to close.
USER_SESSION = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("create table my_notes as select 'kept' as note")
print("holding", flush=True)
sys.stdin.readline()
con.close()
"""


def cases() -> list[dict]:
    return [case(f"c{i}", [chunk(f"k{i}"), chunk(f"x{i}")], [f"k{i}"]) for i in range(20)]


@pytest.fixture
def warehouse(tmp_path) -> Path:
    runs = tmp_path / "runs"
    write_run(runs, "run-a", cases(), created_at="2026-11-01T02:00:00Z")
    write_run(runs, "run-b", cases(), created_at="2026-11-02T02:00:00Z")
    made = cli("run", str(runs), "--warehouse", "wh", "--report-dir", "rep", "--quiet", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    return tmp_path / "wh"


class UserSession:
    def __init__(self, catalog: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", USER_SESSION, str(catalog)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline() == "holding\n"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            assert self.process.wait(timeout=60) == 0


def user_notes(path: Path) -> list:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute("select note from my_notes").fetchall()


def test_a_catalog_held_open_read_write_with_a_users_table_is_never_overwritten(tmp_path, warehouse):
    catalog = warehouse / "catalog.duckdb"
    inode = catalog.stat().st_ino
    session = UserSession(catalog)
    try:
        read = cli("query", "select count(*) as n from runs", "--format", "csv", "--warehouse", "wh", cwd=tmp_path)
        assert (read.returncode, read.stdout, read.stderr) == (0, "n\n2\n", "")  # readers: by the log, quietly

        write_run(tmp_path / "runs", "run-c", cases(), created_at="2026-11-03T02:00:00Z")
        ran = cli("run", "runs", "--warehouse", "wh", "--report-dir", "rep", "--quiet", cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
        assert (f"warning: {catalog.resolve()} is held open read-write by another process "
                f"(PID {session.process.pid}, a DuckDB session?), so it was not refreshed") in ran.stderr
        assert "the first command after that session closes makes the catalog again" in ran.stderr

        read = cli("query", "select count(*) as n from runs", "--format", "csv", "--warehouse", "wh", cwd=tmp_path)
        assert (read.returncode, read.stdout, read.stderr) == (0, "n\n3\n", "")  # the new run, committed

        snapshot = cli("baseline", "refresh", "run-b", "--out", "b.json", "--warehouse", "wh", cwd=tmp_path)
        assert snapshot.returncode == 0, snapshot.stderr
        gate = cli("gate", "run-c", "--baseline", "b.json", "--format", "json", "--warehouse", "wh", cwd=tmp_path)
        assert gate.returncode == 0 and "Traceback" not in gate.stderr, gate.stderr  # the same cases: a pass

        rebuilt = cli("warehouse", "rebuild", "--warehouse", "wh", cwd=tmp_path)
        assert rebuilt.returncode == 2
        assert rebuilt.stderr.startswith(f"retrieval-eval: {catalog.resolve()} is held open read-write")
        assert len(rebuilt.stderr.splitlines()) == 1

        assert catalog.stat().st_ino == inode  # never replaced while held
        assert list(warehouse.glob("catalog.duckdb.foreign-*")) == []
    finally:
        session.close()

    assert user_notes(catalog) == [("kept",)]  # the session closed: its table is in the file
    # The next command finds the user's table in the catalog: moved aside, a catalog made anew.
    read = cli("query", "select count(*) as n from runs", "--format", "csv", "--warehouse", "wh", cwd=tmp_path)
    assert read.returncode == 0 and read.stdout == "n\n3\n", read.stderr
    [aside] = warehouse.glob("catalog.duckdb.foreign-*")
    assert f"moved it to {aside.name}" in read.stderr
    assert user_notes(aside) == [("kept",)]
    with duckdb.connect(str(catalog), read_only=True) as con:
        assert con.execute("select count(*) from runs").fetchone() == (3,)
