"""report.html in a real browser (SPEC 13): headless Chromium driven by Selenium loads the
report the job wrote for the sample from a file:// URL and checks what a reader sees of the
case explorer: one row per labelled case of the newest run, filters and the id search that
agree with the same filter computed here from the embedded JSON, a flipped case's evidence
beside the run before (checked against the warehouse and the KB file, not the JSON), no
network request, no horizontal scrolling at 390 px, and a page of 20,000 cases that loads
and filters.

Needs Debian's `chromium` and `chromium-driver` (CI installs them); skipped where they are
not installed."""

from __future__ import annotations

import json
import random
import re
import shutil
import tempfile
import time
from pathlib import Path

import polars as pl
import pytest
from builders import (
    SAMPLE_KB,
    SAMPLE_RUN_IDS,
    SAMPLE_RUNS,
    case,
    chunk,
    evaluate,
    job_options,
    reader,
    write_run,
)
from retrieval_eval.transforms.case_explorer import PAGE_SIZE

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip("chromium and chromium-driver are not installed", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
NEWEST, PREVIOUS = SAMPLE_RUN_IDS[-1], SAMPLE_RUN_IDS[-2]
K = 4
LARGE = 20_000

SHOWN_IDS = """return [...document.querySelectorAll('.cx-list [data-case-id]')]
  .filter((row) => row.getClientRects().length > 0).map((row) => row.getAttribute('data-case-id'));"""


class Browser:
    """One headless Chromium with a fresh profile and a log of its network requests."""

    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="report-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self.profile}")
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
        try:
            self.driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        except Exception:
            shutil.rmtree(self.profile, ignore_errors=True)
            raise

    def open(self, url: str, width: int = 1280, height: int = 900, timeout: float = 30) -> None:
        """Load `url` at this window size, the request log emptied before, and wait for the explorer."""
        # set after start: headless Chromium widens a --window-size under 500 px, this it keeps
        self.driver.set_window_size(width, height)
        self.driver.get("about:blank")
        self.requested_urls()
        self.driver.get(url)
        WebDriverWait(self.driver, timeout).until(lambda d: d.execute_script(
            "const root = document.getElementById('case-explorer'); return root && root.dataset.state") == "ready")

    def requested_urls(self) -> list[str]:
        """URLs of every request since the last call (DevTools Network.requestWillBeSent events)."""
        urls = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                urls.append(message["params"]["request"]["url"])
        return urls

    def quit(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    started = Browser()
    yield started
    started.quit()


def embedded(html: str, element_id: str):
    return json.loads(re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', html,
                                re.S).group(1))


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample's report.html as the job writes it (with the sample KB): its file:// URL,
    the explorer's embedded cases and meta, and the warehouse."""
    root = tmp_path_factory.mktemp("report-browser")
    result = evaluate(job_options(SAMPLE_RUNS, root / "wh", kb=SAMPLE_KB))
    html = result.report.html.read_text(encoding="utf-8")
    return result.report.html.as_uri(), embedded(html, "retrieval-eval-cases"), embedded(html, "retrieval-eval-meta"), \
        root / "wh"


def count_text(driver) -> str:
    return driver.find_element(By.CSS_SELECTOR, ".cx-count").text


def wait_count(driver, matched: int, total: int) -> None:
    WebDriverWait(driver, 10).until(lambda d: count_text(d).startswith(f"{matched:,} of {total:,} case"))


def set_filters(driver, **filters) -> None:
    driver.find_element(By.CSS_SELECTOR, ".cx-filters button[type=reset]").click()
    for name, value in filters.items():
        control = driver.find_element(By.CSS_SELECTOR, f".cx-filters [name={name}]")
        if name == "search":
            control.send_keys(value)
        else:
            Select(control).select_by_value(value)


def expected_ids(cases, locale="", category="", hit="", flip="", search="") -> list[str]:
    """The explorer's filters, written again from SPEC 13, over the embedded JSON."""
    def keep(c) -> bool:
        return ((not locale or c["locale"] == locale)
                and (not category or c["category"] == category)
                and (not hit or c["hit"] == (1 if hit == "hit" else 0))
                and (not flip or (flip == "flipped" and c["flip"] is not None)
                     or (flip == "none" and c["flip"] is None) or c["flip"] == flip)
                and search.strip().lower() in c["case_id"].lower())

    return [c["case_id"] for c in cases if keep(c)]


def per_case(warehouse, run_id: str) -> dict[str, dict]:
    """case_id → its case_metrics row at k with its gold, and its distinct cards in rank order."""
    with reader(warehouse) as con:
        metrics = con.table("case_metrics").pl().filter((pl.col("run_id") == run_id) & (pl.col("k") == K))
        gold = con.table("cases").pl().filter(pl.col("run_id") == run_id).select("case_id", "gold")
        cards = (con.table("retrieved").pl()
                 .filter((pl.col("run_id") == run_id) & pl.col("card_rank").is_not_null())
                 .sort("card_rank").group_by("case_id", maintain_order=True).agg(pl.col("card_id").alias("cards")))
    joined = metrics.join(gold, on="case_id").join(cards, on="case_id", how="left")
    return {row["case_id"]: row | {"cards": row["cards"] or []} for row in joined.iter_rows(named=True)}


# ---- the sample's page ----------------------------------------------------------------


def test_the_explorer_lists_every_labelled_case_of_the_newest_run(browser, sample):
    url, cases, meta, warehouse = sample
    newest, previous = per_case(warehouse, NEWEST), per_case(warehouse, PREVIOUS)
    assert (meta["run_id"], meta["previous_run_id"], meta["k"]) == (NEWEST, PREVIOUS, K)
    assert [c["case_id"] for c in cases] == sorted(newest) and len(cases) == 240
    # the embedded data agrees with the warehouse: hit at k, and flips against the run before
    for c in cases:
        was, now = previous.get(c["case_id"]), newest[c["case_id"]]
        assert c["hit"] == int(now["hit_at_k"]) and c["first_relevant_rank"] == now["first_relevant_rank"]
        flip = None if was is None or was["hit_at_k"] == now["hit_at_k"] else (
            "hit-miss" if was["hit_at_k"] > now["hit_at_k"] else "miss-hit")
        assert c["flip"] == flip, c["case_id"]

    browser.open(url)
    driver = browser.driver
    ids = driver.execute_script(
        "return [...document.querySelectorAll('[data-case-id]')].map((row) => row.getAttribute('data-case-id'))")
    assert ids == [c["case_id"] for c in cases]
    assert count_text(driver) == f"240 of 240 cases · showing 1–{PAGE_SIZE}"
    assert driver.execute_script(SHOWN_IDS) == ids[:PAGE_SIZE]


FILTERS = [
    {"locale": "pt-BR"},
    {"hit": "miss"},
    {"flip": "hit-miss"},
    {"flip": "miss-hit"},
    {"flip": "flipped"},
    {"category": "adversarial"},
    {"search": "PT-br-GOLDEN-00"},  # a case-insensitive substring of the id
    {"locale": "pt-BR", "hit": "miss", "flip": "hit-miss"},
    {"search": "no-such-case"},
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
def test_filters_and_search_show_what_the_spec_selects(browser, sample, filters):
    url, cases, _meta, _warehouse = sample
    expected = expected_ids(cases, **filters)
    assert len(expected) < len(cases)  # each filter narrows the list
    browser.open(url)
    driver = browser.driver
    set_filters(driver, **filters)
    wait_count(driver, len(expected), len(cases))
    assert driver.execute_script(SHOWN_IDS) == expected[:PAGE_SIZE]
    if not expected:
        assert "no case matches the filters" in count_text(driver)
    driver.find_element(By.CSS_SELECTOR, ".cx-filters button[type=reset]").click()
    wait_count(driver, len(cases), len(cases))


def test_the_flip_filter_finds_the_sample_regression(browser, sample):
    # The sample's newest run: 11 hit → miss, 10 of them pt-BR (tests/test_report.py derives them).
    url, cases, _meta, _warehouse = sample
    browser.open(url)
    set_filters(browser.driver, locale="pt-BR", flip="hit-miss")
    wait_count(browser.driver, 10, 240)
    shown = browser.driver.execute_script(SHOWN_IDS)
    assert len(shown) == 10 and all(i.startswith("pt-BR-") for i in shown)


def test_an_opened_flipped_case_shows_its_gold_and_both_retrieved_lists(browser, sample):
    url, _cases, _meta, warehouse = sample
    titles = {card["id"]: card["title"] for card in
              (json.loads(line) for line in SAMPLE_KB.read_text(encoding="utf-8").splitlines() if line.strip())}
    newest, previous = per_case(warehouse, NEWEST), per_case(warehouse, PREVIOUS)
    # a pt-BR case that hit in the run before and whose gold is now retrieved below k
    case_id = next(c for c, row in sorted(newest.items()) if row["locale"] == "pt-BR" and previous[c]["hit_at_k"]
                   and not row["hit_at_k"] and row["first_relevant_rank"] is not None)
    now, was = newest[case_id], previous[case_id]

    browser.open(url)
    driver = browser.driver
    set_filters(driver, search=case_id)
    wait_count(driver, 1, 240)
    row = driver.find_element(By.CSS_SELECTOR, f'.cx-list [data-case-id="{case_id}"]')
    button = row.find_element(By.CSS_SELECTOR, ".cx-summary")
    button.click()
    assert button.get_attribute("aria-expanded") == "true"
    detail = row.find_element(By.CSS_SELECTOR, ".cx-detail")
    assert detail.is_displayed()
    reason = detail.find_element(By.CSS_SELECTOR, ".cx-reason").text
    assert "Flipped hit → miss" in reason and f"rank {now['first_relevant_rank']}, below k = {K}" in reason

    gold = driver.execute_script("""return [...arguments[0].querySelectorAll('.cx-gold-card')].map((item) =>
        [item.querySelector('.cx-card-id').textContent, item.querySelector('.cx-title').textContent]);""", detail)
    assert gold == [[card, titles[card]] for card in now["gold"]]

    def ranked(column) -> list[list]:
        return driver.execute_script("""return [...arguments[0].querySelectorAll('.cx-card')].map((item) => [
            item.querySelector('.cx-rank-no').textContent, item.querySelector('.cx-card-id').textContent,
            item.querySelector('.cx-title').textContent, item.querySelector('.cx-gold-mark') !== null]);""", column)

    def listed(row) -> int:  # down to k, or to the first gold card when deeper (explorer_data)
        return max(K, row["first_relevant_rank"] or 0)

    def expected(row) -> list[list]:
        return [[str(rank), card, titles[card], card in row["gold"]] for rank, card in enumerate(row["cards"][:listed(row)], 1)]

    def more(column) -> str | None:
        notes = column.find_elements(By.CSS_SELECTOR, ".cx-more")
        return notes[0].text if notes else None

    def expected_more(row) -> str | None:
        hidden = len(row["cards"]) - listed(row)
        return f"{hidden} more cards below rank {listed(row)} are not listed." if hidden > 0 else None

    this_run = detail.find_element(By.CSS_SELECTOR, ".cx-run:not(.cx-before)")
    before = detail.find_element(By.CSS_SELECTOR, ".cx-run.cx-before")
    assert NEWEST in this_run.find_element(By.CSS_SELECTOR, "h3").text
    assert PREVIOUS in before.find_element(By.CSS_SELECTOR, "h3").text
    assert ranked(this_run) == expected(now) and ranked(before) == expected(was)
    assert (more(this_run), more(before)) == (expected_more(now), expected_more(was))
    assert [r[3] for r in ranked(this_run)].index(True) + 1 == now["first_relevant_rank"] > K
    assert this_run.find_element(By.CSS_SELECTOR, ".cx-outcome").text == (
        f"hit@{K}: miss · first relevant rank: {now['first_relevant_rank']}")
    assert before.find_element(By.CSS_SELECTOR, ".cx-outcome").text == (
        f"hit@{K}: hit · first relevant rank: {was['first_relevant_rank']}")


def test_the_page_requests_nothing_from_the_network(browser, sample):
    url, cases, _meta, _warehouse = sample
    browser.open(url)
    driver = browser.driver
    set_filters(driver, flip="hit-miss")
    for row in driver.find_elements(By.CSS_SELECTOR, ".cx-list [data-case-id]:not([hidden]) .cx-summary"):
        # every flipped case's evidence built and shown (clicked where it is: the cases opened
        # before it push it down the page, and a click on a row being laid out failed in CI)
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].click();", row)
    set_filters(driver)
    driver.find_element(By.CSS_SELECTOR, ".cx-next").click()
    time.sleep(0.5)  # let any late request reach the log
    urls = browser.requested_urls()
    assert driver.current_url in urls  # the log does see the document itself
    assert [u for u in urls if u != driver.current_url and not u.startswith("data:")] == []


def test_the_request_log_sees_a_request_when_there_is_one(browser, tmp_path):
    """The check above would pass vacuously if the log missed requests: it does not."""
    probe = tmp_path / "probe.html"
    probe.write_text('<!DOCTYPE html><img src="http://127.0.0.1:9/probe.png" alt="">', encoding="utf-8")
    browser.driver.get("about:blank")
    browser.requested_urls()
    browser.driver.get(probe.as_uri())
    time.sleep(0.5)
    assert "http://127.0.0.1:9/probe.png" in browser.requested_urls()


def test_nothing_scrolls_the_page_sideways_at_390_px(browser, sample):
    url, cases, _meta, _warehouse = sample
    browser.open(url, width=390)
    driver = browser.driver
    assert driver.execute_script("return window.innerWidth") == 390
    longest = max(cases, key=lambda c: len(c["case_id"]))["case_id"]
    set_filters(driver, search=longest)
    wait_count(driver, len(expected_ids(cases, search=longest)), len(cases))
    driver.find_element(By.CSS_SELECTOR, f'.cx-list [data-case-id="{longest}"] .cx-summary').click()
    width, client = driver.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width <= 390 and width <= client  # client: the viewport less a classic scrollbar
    # wide tables scroll inside their own box; nothing else reaches past the viewport
    overflowing = driver.execute_script("""return [...document.body.querySelectorAll('*')]
        .filter((node) => !node.closest('.scroll') && node.getClientRects().length
                && node.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)
        .map((node) => node.tagName + '.' + node.className);""")
    assert overflowing == []


# ---- 20,000 cases ----------------------------------------------------------------------


def synthetic_runs(root: Path, n_cases: int) -> None:
    """Two runs of `n_cases` labelled cases over 60 cards (seeded): each case's gold is one
    or two cards, each run retrieves five distinct cards; the runs differ, so some flip."""
    cards = [f"card-{i:02d}" for i in range(60)]
    locales, categories = ("en", "es-419", "pt-BR"), ("golden", "expanded_domain", "adversarial")
    rng = random.Random(20_000)
    gold = [rng.sample(cards, rng.choice((1, 2))) for _ in range(n_cases)]
    for day, run_id in ((1, "run-before"), (2, "run-now")):
        records = []
        for i in range(n_cases):
            retrieved = rng.sample(cards, 5)
            records.append(case(f"{locales[i % 3]}-{categories[i // 3 % 3]}-{i:05d}",
                                [chunk(f"{card}::00", card, round(1 - r / 10, 2)) for r, card in enumerate(retrieved)],
                                gold[i], locale=locales[i % 3], category=categories[i // 3 % 3],
                                question=f"Question {i}?"))
        write_run(root, run_id, records, created_at=f"2026-11-0{day}T02:00:00Z")


def test_twenty_thousand_cases_load_and_filter(browser, tmp_path, capsys):
    synthetic_runs(tmp_path / "runs", LARGE)
    result = evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    page = result.report.html
    cases = embedded(page.read_text(encoding="utf-8"), "retrieval-eval-cases")
    assert len(cases) == LARGE
    start = time.perf_counter()
    browser.open(page.as_uri(), timeout=60)
    loaded = time.perf_counter() - start
    driver = browser.driver
    assert driver.execute_script("return document.querySelectorAll('[data-case-id]').length") == LARGE

    timings = {}
    for label, filters in (("locale filter", {"locale": "pt-BR"}), ("flip filter", {"flip": "hit-miss"}),
                           ("id search", {"search": "golden-1999"})):
        expected = expected_ids(cases, **filters)
        assert 0 < len(expected) < LARGE
        start = time.perf_counter()
        set_filters(driver, **filters)
        wait_count(driver, len(expected), LARGE)
        timings[label] = time.perf_counter() - start
        assert driver.execute_script(SHOWN_IDS) == expected[:PAGE_SIZE]
    with capsys.disabled():
        print(f"\n{LARGE:,} cases, {page.stat().st_size / 1e6:.1f} MB page: loaded in {loaded:.2f} s; "
              + "; ".join(f"{label} {seconds:.2f} s" for label, seconds in timings.items())
              + " (Selenium round trips included)")  # printed, not asserted: the waits bound them
