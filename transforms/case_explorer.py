"""The case explorer of report.html: every labelled case of the newest run, with filters.

`explorer_section` returns an HTML fragment for the report's body. The cases and the
run facts travel as two JSON script elements; explorer.js (passed in as `script`) makes
one row per case from them, shows the rows that pass the filters a page at a time, and
builds a case's evidence only when the case is opened; explorer.css (passed in as
`style`) lays it out from phone to desktop width.

Data shape (cases name cards by id; meta["titles"] holds the KB titles of the cards they
name; transforms/report.py `explorer_data` builds both):

    cases: [{"case_id": "pt-BR-golden-007", "locale": "pt-BR", "category": "golden",
             "hit": 0,                     # hit at the headline k (0 or 1)
             "first_relevant_rank": 6,     # rank of the first gold card, or None
             "flip": "hit-miss",           # "hit-miss", "miss-hit" or None, against the run before
             "reason": "below_k",          # why it flipped, or None (no key when nothing was compared)
             "question": "..." or None,    # (no key when no case of the run has one)
             "gold": ["card-statin-grapefruit"],
             "retrieved": ["card-x", "card-statin-grapefruit"],  # distinct cards in rank order
                                           # (rank = position + 1), down to k or to the first
                                           # gold card if deeper, at most TOP_CARDS
             "n_cards": 2,                 # distinct cards retrieved in all
             "gold_source": "must_cite_one_of",  # or "relevant_ids", or "relevance" (graded)
                                           # ndcg, grades, ideal_gains and scores: read for a graded
                                           # case only, no keys when the run has none
             "ndcg": 0.63,                 # nDCG at the headline k
             "grades": [{"rank": 2, "grade": 1}],  # grades of the retrieved graded cards, by rank
             "ideal_gains": [1],           # every grade above 0 of the case, descending
             "scores": [0.91, 0.62],       # a graded case's retrieval score of each listed card
                                           # (null for binary gold, and where the artifact had none)
             "before": {"hit": 1, "first_relevant_rank": 1, "retrieved": [...], "n_cards": 3,
                        "gold": [...], "ndcg": 1.0, "grades": [...], "ideal_gains": [...],
                        "scores": [...]} or None}]  # (no key when there is no run before)
    meta: {"run_id": "...", "previous_run_id": "..." or None, "k": 4,
           "kb": True,                     # a KB was read: a card not in "titles" is not in it
           "titles": {"card-statin-grapefruit": "Statins and grapefruit"}}

`before` carries its own "gold" list, which marks the gold cards in the run before when the
gold changed. A flip's "reason" is why the side that missed missed: this run for "hit-miss",
the run before for "miss-hit". TOP_CARDS is transforms/rankings.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from html import escape
from itertools import chain

import polars as pl

from .escaping import embedded_json, html_text, script_safe

CASES_ELEMENT_ID = "retrieval-eval-cases"
META_ELEMENT_ID = "retrieval-eval-meta"
# rows shown at once: past a few hundred rows a browser spends seconds laying out the list,
# and a page of them is read by scrolling; the filters and the pages reach every case
PAGE_SIZE = 100
CASES_PER_CHUNK = 10_000  # cases written to JSON at a time

# value of the flip filter -> its label; explorer.js reads the same values
FLIP_CHOICES = (
    ("", "any"),
    ("flipped", "flipped either way"),
    ("hit-miss", "hit → miss"),
    ("miss-hit", "miss → hit"),
    ("none", "not flipped"),
)


# How the chunks of the cases' JSON are made: `map` itself, or any function of its shape that
# gives the results in order (the report's writer makes them on threads, flows/outputs/reports.py `ordered_map`).
ChunkMap = Callable[[Callable[[int], str], Iterable[int]], Iterable[str]]


def explorer_section(cases: pl.DataFrame, meta: dict, *, script: str, style: str,
                     map_chunks: ChunkMap = map) -> Iterator[str]:
    """The explorer as HTML fragments, in order: heading, filters, list, data, style and
    script. `cases` has one row per case with the keys of the data shape above as columns;
    it is written as a JSON array of objects by Polars, CASES_PER_CHUNK cases at a time when
    the fragments are taken (tens of MB at 100k cases, hundreds at a million: never held
    whole, never copied again), each chunk made by `map_chunks`."""
    for name, text, end_tag in (("script", script, "</script"), ("style", style, "</style")):
        if end_tag in text.lower():
            raise ValueError(f"the explorer's {name} must not contain {end_tag}")
    k = meta["k"]
    previous = meta.get("previous_run_id")
    total = cases.height
    against = f", beside the run before, {previous}" if previous else "; there is no run before it"
    parts = [
        '<section class="case-explorer" id="case-explorer" aria-labelledby="case-explorer-heading">',
        f"<style>{style}</style>",
        f'<h2 id="case-explorer-heading">Cases of {html_text(meta["run_id"])}</h2>',
        f'<p class="cx-intro">{_count(total, "labelled case")} of the newest run at headline '
        f"k = {k}{html_text(against)}. Open a case for its question, gold cards and retrieved list.</p>",
        '<form class="cx-filters" role="search" aria-label="Filter the cases">',
        _select("locale", "Locale", "all locales", _counts(cases, "locale")),
        _select("category", "Category", "all categories", _counts(cases, "category")),
        _choice_select("hit", f"hit@{k}", (("", "hit or miss"), ("hit", "hit"), ("miss", "miss"))),
        _choice_select("flip", "Flip against the run before", FLIP_CHOICES, disabled=previous is None),
        '<label class="cx-search">Case id contains <input type="search" name="search" '
        'autocomplete="off" spellcheck="false"></label>',
        '<button type="reset">Clear filters</button>',
        "</form>",
        f'<p class="cx-count" role="status" aria-live="polite">{_count(total, "case")}</p>',
        '<div class="cx-columns" aria-hidden="true"><span>case</span><span>locale</span>'
        f"<span>category</span><span>hit@{k}</span><span>first relevant rank</span><span>flip</span></div>",
        f'<ul class="cx-list" role="list" data-page-size="{PAGE_SIZE}"></ul>',
        '<nav class="cx-pager" aria-label="Pages of cases" hidden><button type="button" class="cx-previous">'
        f'← previous {PAGE_SIZE}</button><span class="cx-page"></span><button type="button" class="cx-next">'
        f"next {PAGE_SIZE} →</button></nav>",
        "<noscript><p>The case list needs JavaScript; every case is in the warehouse's "
        "case_metrics view.</p></noscript>",
        f'<script type="application/json" id="{CASES_ELEMENT_ID}">',
    ]
    tail = [
        "</script>",
        f'<script type="application/json" id="{META_ELEMENT_ID}">{embedded_json(meta)}</script>',
        f"<script>{script}</script>",
        "</section>",
    ]
    return chain(["\n".join(parts)], _cases_json(cases, map_chunks), ["\n".join(tail) + "\n"])


def _cases_json(cases: pl.DataFrame, map_chunks: ChunkMap = map) -> Iterator[str]:
    """The JSON array of `cases`, in chunks; each chunk is whole objects, so no "</" or
    "<!--" can straddle two chunks and each is made script-safe alone."""

    def objects(start: int) -> str:
        return script_safe(cases.slice(start, CASES_PER_CHUNK).write_json()[1:-1])

    yield "["
    for number, chunk in enumerate(map_chunks(objects, range(0, cases.height, CASES_PER_CHUNK))):
        yield ("," if number else "") + chunk
    yield "]"


def _counts(cases: pl.DataFrame, column: str) -> dict[str, int]:
    return dict(cases.group_by(column).len().iter_rows())


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _select(name: str, label: str, everything: str, counts: dict[str, int]) -> str:
    choices = [("", everything)] + [(value, f"{value} ({n:,})") for value, n in sorted(counts.items())]
    return _choice_select(name, label, choices)


def _choice_select(name: str, label: str, choices, disabled: bool = False) -> str:
    options = "".join(
        # the value is the raw locale or category the filter compares with; the text shows its escapes
        f'<option value="{escape(value)}">{html_text(text)}</option>' for value, text in choices
    )
    off = " disabled" if disabled else ""
    return f'<label>{html_text(label)} <select name="{name}"{off}>{options}</select></label>'
