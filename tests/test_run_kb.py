"""A run remembers its KB (SPEC 16): the `runs` view records the KB each run was judged
against (kb_uri, kb_digest); `gate`, `compare` and the report judge a run's flips against its
own KB unless --kb is given, say so when that file is gone or changed, and never put another
KB in its place.

The fixture: the default KB (data/kb/cards.jsonl, in the command's working directory) holds
cards A and B only; another KB elsewhere holds A to D. Run `base` hits every case at rank 1;
run `cand` has gold C at rank 6 (k = 4: below_k), retrieves no D (not_retrieved) and no E,
which no KB holds (gold_not_in_kb against any KB, not_retrieved without one). Judged against
the default KB, all three flips would read gold_not_in_kb."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from blake3 import blake3
from builders import case, chunk, cli, write_run
from retrieval_eval import sql
from retrieval_eval.flows.inputs.kb import read_kb, run_kb
from retrieval_eval.flows.warehouse.warehouse import Warehouse


def cards(*ids: str) -> str:
    return "".join(json.dumps({"id": card_id, "title": f"card {card_id}"}) + "\n" for card_id in ids)


def cases_of(run: str) -> list[dict]:
    hits = [case("c-a", [chunk("A::00", "A")], ["A"]), case("c-b", [chunk("B::00", "B")], ["B"])]
    if run == "base":
        return hits + [case("c-below", [chunk("C::00", "C")], ["C"]), case("c-gone", [chunk("D::00", "D")], ["D"]),
                       case("c-unknown", [chunk("E::00", "E")], ["E"])]
    filler = [chunk(f"X{i}::00", f"X{i}") for i in range(5)]
    return hits + [case("c-below", [*filler, chunk("C::00", "C")], ["C"]), case("c-gone", filler, ["D"]),
                   case("c-unknown", filler, ["E"])]


class Setup:
    def __init__(self, root: Path):
        self.root = root
        self.default = root / "data" / "kb" / "cards.jsonl"
        self.default.parent.mkdir(parents=True)
        self.default.write_text(cards("A", "B"))
        self.other = root / "elsewhere" / "other.jsonl"
        self.other.parent.mkdir()
        self.other.write_text(cards("A", "B", "C", "D"))
        self.runs = root / "runs"
        write_run(self.runs, "base", cases_of("base"), created_at="2026-11-01T00:00:00Z")
        write_run(self.runs, "cand", cases_of("cand"), created_at="2026-11-02T00:00:00Z")
        self.warehouse = root / "wh"
        self.baseline = root / "baseline.json"

    def cli(self, *args: str):
        return cli(*args, cwd=self.root)

    def run(self, *args: str, runs: Path | None = None):
        result = self.cli("run", str(runs or self.runs), "--warehouse", str(self.warehouse),
                          "--report-dir", str(self.root / "rep"), "--quiet", *args)
        assert result.returncode == 0, result.stderr
        return result

    def gate(self, *args: str):
        result = self.cli("gate", "cand", "--baseline", str(self.baseline), "--warehouse", str(self.warehouse),
                          "--format", "json", *args)
        assert "Traceback" not in result.stderr, result.stderr
        return result, json.loads(result.stdout)

    def runs_view(self) -> dict[str, tuple]:
        result = self.cli("query", "select run_id, kb_uri, kb_digest from runs", "--warehouse", str(self.warehouse),
                          "--format", "json")
        assert result.returncode == 0, result.stderr
        return {row["run_id"]: (row["kb_uri"], row["kb_digest"]) for row in json.loads(result.stdout)}


@pytest.fixture
def setup(tmp_path) -> Setup:
    made = Setup(tmp_path)
    made.run("--kb", str(made.other))
    refreshed = made.cli("baseline", "refresh", "base", "--out", str(made.baseline), "--warehouse", str(made.warehouse))
    assert refreshed.returncode == 0, refreshed.stderr
    return made


BY_OTHER_KB = {"c-below": "below_k", "c-gone": "not_retrieved", "c-unknown": "gold_not_in_kb"}
BY_NO_KB = {"c-below": "below_k", "c-gone": "not_retrieved", "c-unknown": "not_retrieved"}
BY_DEFAULT_KB = {"c-below": "gold_not_in_kb", "c-gone": "gold_not_in_kb", "c-unknown": "gold_not_in_kb"}


def reasons(document: dict) -> dict[str, str]:
    return {flip["case_id"]: flip["reason"] for flip in document["flips"]}


def test_the_runs_view_records_the_kb_each_run_was_judged_against(setup):
    # The digest computed here, apart from the project's helper: BLAKE3 of the file's bytes.
    expected = (str(setup.other.resolve()), "blake3:" + blake3(setup.other.read_bytes()).hexdigest())
    assert setup.runs_view() == {"base": expected, "cand": expected}


def test_gate_without_kb_judges_flips_against_the_runs_own_kb(setup):
    result, document = setup.gate()
    assert result.returncode == 1  # three hits of five lost: the gate fails, as it would with any KB
    assert reasons(document) == BY_OTHER_KB
    assert not any("KB" in warning for warning in document["warnings"])  # its own, as recorded: nothing to say


def test_a_kb_given_with_kb_wins_and_is_named(setup):
    result, document = setup.gate("--kb", "data/kb/cards.jsonl")
    assert result.returncode == 1
    assert reasons(document) == BY_DEFAULT_KB
    [note] = [w for w in document["warnings"] if "KB" in w]
    assert str(setup.default.resolve()) in note and "given with --kb" in note and str(setup.other.resolve()) in note


def test_the_runs_kb_gone_is_said_and_no_other_kb_stands_in(setup):
    setup.other.unlink()
    result, document = setup.gate()
    assert result.returncode == 1  # the verdict does not depend on the KB
    assert reasons(document) == BY_NO_KB  # not the default KB's
    [note] = [w for w in document["warnings"] if "KB" in w]
    assert f"run cand's KB {setup.other.resolve()} is gone" in note and "no flip could be judged gold_not_in_kb" in note
    table = setup.cli("gate", "cand", "--baseline", str(setup.baseline), "--warehouse", str(setup.warehouse))
    assert table.returncode == 1 and f"{setup.other.resolve()} is gone" in table.stdout


def test_the_runs_kb_changed_is_said_and_not_used(setup):
    setup.other.write_text(cards("A", "B", "D"))  # C is no card now: judged by it, c-below would read gold_not_in_kb
    result, document = setup.gate()
    assert result.returncode == 1
    assert reasons(document) == BY_NO_KB
    [note] = [w for w in document["warnings"] if "KB" in w]
    assert f"run cand's KB {setup.other.resolve()} has changed since the run" in note


def test_a_rerun_with_another_kb_records_it_without_evaluating_again(setup):
    before = Warehouse(setup.warehouse).state().runs["cand"]
    setup.run()  # no --kb: the default KB, for runs whose artifacts are unchanged
    after = Warehouse(setup.warehouse).state().runs["cand"]
    default = (str(setup.default.resolve()), "blake3:" + blake3(setup.default.read_bytes()).hexdigest())
    assert setup.runs_view() == {"base": default, "cand": default}
    assert after.tables["cases"] == before.tables["cases"]  # reused: only its `runs` row was written again
    assert after.tables["runs"] != before.tables["runs"] and after.evaluation_key == before.evaluation_key
    assert after.source["kb"] == {"uri": default[0], "digest": default[1]}
    _, document = setup.gate()
    assert reasons(document) == BY_DEFAULT_KB


def report_line(setup: Setup, case_id: str) -> str:
    return next(line for line in (setup.root / "rep" / "report.md").read_text().splitlines()
                if line.startswith(f"| {case_id} "))


def test_the_report_judges_against_the_newest_runs_own_kb(setup):
    # A later job over another folder, without --kb (so with the default KB), whose one run is
    # older: the newest run is still cand, judged against its own KB.
    write_run(setup.root / "more", "older", cases_of("base"), created_at="2026-10-01T00:00:00Z")
    setup.run(runs=setup.root / "more")
    assert "below_k" in report_line(setup, "c-below") and "gold_not_in_kb" in report_line(setup, "c-unknown")
    setup.other.unlink()
    setup.run(runs=setup.root / "more")
    report = (setup.root / "rep" / "report.md").read_text()
    assert f"run cand's KB {setup.other.resolve()} is gone" in report
    assert "below_k" in report_line(setup, "c-below") and "not_retrieved" in report_line(setup, "c-unknown")


def test_compare_says_when_a_runs_kb_is_gone(setup):
    compared = setup.cli("compare", "base", "cand", "--warehouse", str(setup.warehouse))
    assert compared.returncode == 0 and compared.stderr == ""
    setup.other.unlink()
    compared = setup.cli("compare", "base", "cand", "--warehouse", str(setup.warehouse), "--format", "json")
    assert compared.returncode == 0 and json.loads(compared.stdout)["reference"] == "base"
    warnings = compared.stderr.splitlines()
    assert [w for w in warnings if f"run cand's KB {setup.other.resolve()} is gone" in w]
    assert all(w.startswith("retrieval-eval: warning: ") for w in warnings) and len(warnings) == 2


def test_compare_says_when_runs_were_judged_against_different_kbs(setup):
    write_run(setup.root / "more", "older", cases_of("base"), created_at="2026-10-01T00:00:00Z")
    setup.run(runs=setup.root / "more")  # `older` judged against the default KB
    compared = setup.cli("compare", "older", "cand", "--warehouse", str(setup.warehouse))
    assert compared.returncode == 0
    assert "judged against different KBs" in compared.stderr
    assert str(setup.default.resolve()) in compared.stderr and str(setup.other.resolve()) in compared.stderr


def test_a_run_that_recorded_no_kb_uses_the_default_and_says_why(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "kb").mkdir(parents=True)
    (tmp_path / "data" / "kb" / "cards.jsonl").write_text(cards("A"))
    # A run written by an earlier version: its row reads kb_uri null, its log entry has no "kb".
    earlier = run_kb("old", {"kb_uri": None, "kb_digest": None}, {"cases_digest": "x"}, None)
    assert earlier.kb is not None and earlier.kb.cards["id"].to_list() == ["A"]
    assert earlier.note == ("run old recorded no KB (it was evaluated by an earlier version): flip reasons judged "
                            f"against the default KB {tmp_path / 'data' / 'kb' / 'cards.jsonl'}")
    # A run evaluated without a KB (a TREC run without --kb): no KB, none put in its place.
    without = run_kb("trec", {"kb_uri": None, "kb_digest": None}, {"kb": None}, None)
    assert (without.kb, without.note) == (None, None)
    # The job's KB, when it is the run's own, is used as read (not read again).
    held = read_kb(Path("data/kb/cards.jsonl"))
    own = run_kb("new", {"kb_uri": held.uri, "kb_digest": held.digest}, {"kb": None}, held)
    assert own.kb is held and own.own and own.note is None


def test_the_run_kb_audit_catches_a_half_recorded_kb():
    con = duckdb.connect()
    con.execute("create table runs as select * from (values ('whole', '/kb/cards.jsonl', 'blake3:' || repeat('0', 64)),"
                " ('none', null, null), ('half', '/kb/cards.jsonl', null), ('short', '/kb/cards.jsonl', 'blake3:00'),"
                " ('relative', 'kb/cards.jsonl', 'blake3:' || repeat('0', 64))) as t(run_id, kb_uri, kb_digest)")
    found = sorted(row[1] for row in con.execute(sql.audits()["run_kb"]).fetchall())
    assert found == ["half", "relative", "short"]
