"""The case explorer says what is true of the run it names (SPEC 16), in Chromium: a miss → hit
flip is explained by the run before's miss, worded as such; a graded case shows its grades and
its nDCG, and its gold header names the gold's source. Skipped without chromium."""

from __future__ import annotations

import json

import pytest
from builders import case, chunk, evaluate, job_options, write_run
from test_report_browser import CHROMEDRIVER, CHROMIUM, Browser

from selenium.webdriver.common.by import By

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip("chromium and chromium-driver are not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("explorer-wording")
    runs = root / "runs"
    # "gain": the run before retrieved no gold card (not_retrieved), this run has it at rank 3.
    # "graded": grades 2 and 1; this run ranks the grade-1 card first and the grade-2 card third.
    before = [case("gain", [chunk("x"), chunk("y")], ["G"]),
              case("graded", [chunk("z")], relevance={"A": 2, "B": 1})]
    now = [case("gain", [chunk("x"), chunk("y"), chunk("G")], ["G"]),
           case("graded", [chunk("B::00", "B", 0.91237), chunk("B::01", "B", 0.9), chunk("z", score=0.5),
                           chunk("A", score=0.25)], relevance={"A": 2, "B": 1})]
    write_run(runs, "before", before, created_at="2026-11-01T00:00:00Z")
    write_run(runs, "now", now, created_at="2026-11-02T00:00:00Z")
    kb = root / "cards.jsonl"
    kb.write_text("".join(json.dumps({"id": card, "title": f"card {card}"}) + "\n" for card in "GxyzAB"))
    result = evaluate(job_options(runs, root / "wh", kb=kb))
    browser = Browser()
    browser.open(result.report.html.as_uri())
    yield browser.driver
    browser.quit()


def opened(driver, case_id: str):
    row = driver.find_element(By.CSS_SELECTOR, f'.cx-list [data-case-id="{case_id}"]')
    row.find_element(By.CSS_SELECTOR, ".cx-summary").click()
    return row.find_element(By.CSS_SELECTOR, ".cx-detail")


def test_a_miss_to_hit_flip_is_explained_by_the_run_before_s_miss(report):
    detail = opened(report, "gain")
    note = detail.find_element(By.CSS_SELECTOR, ".cx-reason").text
    assert note == ("Flipped miss → hit — the run before missed: not_retrieved: "
                    "no gold card was in the retrieved list")
    ranks = detail.find_elements(By.CSS_SELECTOR, ".cx-run")[0].find_element(By.CSS_SELECTOR, ".cx-first-rank").text
    assert ranks == "3"
    header = detail.find_element(By.CSS_SELECTOR, ".cx-gold h3").text
    assert header == "Gold cards (must_cite_one_of: citing any one counts)"


def test_a_graded_case_shows_its_grades_and_ndcg(report):
    detail = opened(report, "graded")
    assert detail.find_element(By.CSS_SELECTOR, ".cx-gold h3").text.startswith("Relevant cards (graded relevance")
    assert detail.find_element(By.CSS_SELECTOR, ".cx-grades").text == "Grades above 0 of this case: 2, 1"
    this_run = detail.find_elements(By.CSS_SELECTOR, ".cx-run")[0]
    # nDCG@4 by hand: DCG = 1/log2(2) + 2/log2(4) = 2; IDCG = 2/log2(2) + 1/log2(3) = 2.6309;
    # 2 / 2.6309 = 0.760
    assert this_run.find_element(By.CSS_SELECTOR, ".cx-ndcg").text == "0.760"
    grades = [item.text for item in this_run.find_elements(By.CSS_SELECTOR, ".cx-grade")]
    assert grades == ["grade 1", "grade 2"]


def test_a_graded_case_shows_each_cards_retrieval_score(report):
    # (textContent: an earlier test may have left the case open, which this click closes)
    this_run, before = opened(report, "graded").find_elements(By.CSS_SELECTOR, ".cx-run")
    # one per distinct card, its first chunk's score (B::01's 0.9 is a later sibling), to four
    # significant digits; the run before's cards carried no score and show none
    scores = [item.get_attribute("textContent") for item in this_run.find_elements(By.CSS_SELECTOR, ".cx-score")]
    assert scores == ["score 0.9124", "score 0.5", "score 0.25"]
    assert before.find_elements(By.CSS_SELECTOR, ".cx-score") == []


def test_a_binary_case_carries_no_scores_in_the_page(report):
    data = json.loads(report.find_element(By.ID, "retrieval-eval-cases").get_attribute("textContent"))
    by_id = {c["case_id"]: c for c in data}
    assert by_id["gain"]["scores"] is None and by_id["graded"]["scores"] == [0.91237, 0.5, 0.25]
