"""The case explorer of report.html: every labelled case of the newest run, with filters.

`explorer_section` returns an HTML fragment for the report's body. The cases and the
run facts travel as two JSON script elements; explorer.js (passed in as `script`) makes
one row per case from them, shows the rows that pass the filters a page at a time, and
builds a case's evidence only when the case is opened; explorer.css (passed in as
`style`) lays it out from phone to desktop width.

Data shape (card ids and titles are listed once, in meta["cards"], and cases refer to
them by index; `CardTable` builds that list):

    cases: [{"case_id": "pt-BR-golden-007", "locale": "pt-BR", "category": "golden",
             "hit": 0,                     # hit at the headline k (0 or 1)
             "first_relevant_rank": 6,     # rank of the first gold card, or None
             "flip": "hit-miss",           # "hit-miss", "miss-hit" or None, against the run before
             "reason": "below_k",          # why it flipped, or None
             "question": "..." or None,
             "gold": [3, 17],              # indexes into meta["cards"]
             "retrieved": [5, 3, 9],       # distinct cards in rank order (rank = position + 1)
             "before": {"hit": 1, "first_relevant_rank": 2, "retrieved": [3, 5, 9]} or None}]
    meta: {"run_id": "...", "previous_run_id": "..." or None, "k": 4,
           "cards": [["card-statin-grapefruit", "Statins and grapefruit"], ["card-x", None]]}

A card whose title is None is not in the KB. `before` may also carry its own "gold"
list, used to mark gold cards in the run before when the gold changed between runs.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from html import escape

CASES_ELEMENT_ID = "retrieval-eval-cases"
META_ELEMENT_ID = "retrieval-eval-meta"
# rows shown at once: past a few hundred rows a browser spends seconds laying out the list,
# and a page of them is read by scrolling; the filters and the pages reach every case
PAGE_SIZE = 100

# value of the flip filter -> its label; explorer.js reads the same values
FLIP_CHOICES = (
    ("", "any"),
    ("flipped", "flipped either way"),
    ("hit-miss", "hit → miss"),
    ("miss-hit", "miss → hit"),
    ("none", "not flipped"),
)


class CardTable:
    """Numbers each card once for meta["cards"]; cases then list cards by their number."""

    def __init__(self, titles: Mapping[str, str]):
        self._titles = titles  # KB card id -> title; a card missing here is not in the KB
        self._numbers: dict[str, int] = {}
        self.rows: list[list[str | None]] = []

    def number(self, card_id: str) -> int:
        if card_id not in self._numbers:
            self._numbers[card_id] = len(self.rows)
            self.rows.append([card_id, self._titles.get(card_id)])
        return self._numbers[card_id]

    def numbers(self, card_ids: Iterable[str]) -> list[int]:
        return [self.number(card_id) for card_id in card_ids]


def embedded_json(value) -> str:
    """JSON that is safe as the text of a <script type="application/json"> element.

    A string holding "</script" would end the element and "<!--" followed by "<script"
    would keep the real end tag from ending it, so "</" and "<!--" are written with JSON
    escapes, which JSON.parse reads back unchanged. U+2028 and U+2029 are escaped too, so
    the text stays valid if it is ever read as JavaScript source.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return (
        text.replace("<!--", "\\u003c!--")
        .replace("</", "<\\/")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def explorer_section(cases: list[dict], meta: dict, *, script: str, style: str) -> str:
    """The explorer as an HTML fragment: heading, filters, list, data, style and script."""
    for name, text, end_tag in (("script", script, "</script"), ("style", style, "</style")):
        if end_tag in text.lower():
            raise ValueError(f"the explorer's {name} must not contain {end_tag}")
    k = meta["k"]
    previous = meta.get("previous_run_id")
    total = len(cases)
    against = f", beside the run before, {previous}" if previous else "; there is no run before it"
    parts = [
        '<section class="case-explorer" id="case-explorer" aria-labelledby="case-explorer-heading">',
        f"<style>{style}</style>",
        f'<h2 id="case-explorer-heading">Cases of {escape(meta["run_id"])}</h2>',
        f'<p class="cx-intro">{_count(total, "labelled case")} of the newest run at headline '
        f"k = {k}{escape(against)}. Open a case for its question, gold cards and retrieved list.</p>",
        '<form class="cx-filters" role="search" aria-label="Filter the cases">',
        _select("locale", "Locale", "all locales", Counter(c["locale"] for c in cases)),
        _select("category", "Category", "all categories", Counter(c["category"] for c in cases)),
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
        f'<script type="application/json" id="{CASES_ELEMENT_ID}">{embedded_json(cases)}</script>',
        f'<script type="application/json" id="{META_ELEMENT_ID}">{embedded_json(meta)}</script>',
        f"<script>{script}</script>",
        "</section>",
    ]
    return "\n".join(parts) + "\n"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _select(name: str, label: str, everything: str, counts: Counter) -> str:
    choices = [("", everything)] + [(value, f"{value} ({n:,})") for value, n in sorted(counts.items())]
    return _choice_select(name, label, choices)


def _choice_select(name: str, label: str, choices, disabled: bool = False) -> str:
    options = "".join(
        f'<option value="{escape(value)}">{escape(text)}</option>' for value, text in choices
    )
    off = " disabled" if disabled else ""
    return f'<label>{escape(label)} <select name="{name}"{off}>{options}</select></label>'
