"""The report model (SPEC 13): one object built from frames the warehouse gives, rendered many
ways by transforms/report_render.py (terminal, markdown, HTML, JSON, Prefect artifacts).

It opens with what changed — the newest run against the run before it (or the baseline) —
then holds every run's headline figures (the runs table and the trend), the newest run in
detail, its diagnostics, and the data of the case explorer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from .baseline import relevance_mismatch
from .comparison import compare_runs, p_family
from .flips import flipped_cases, reasons_by_slice
from .metrics import GATED, LABELS, NAMES
from .run_summary import IDENTITY_COUNTS
from .tables import signed

RECALL_CAVEAT = (
    "recall@k is a lower bound: gold is disjunctive (citing any one listed card satisfies a "
    "case), so a case can be fully served with recall below 1. hit@k is the headline figure."
)
# Only `must_cite_one_of` is disjunctive: `relevant_ids` and graded `relevance` (a TREC run's
# qrels among them) list every relevant card, so recall there is recall, not a bound.
DISJUNCTIVE_SOURCE = "must_cite_one_of"
LOCALE_CAVEAT = "Per-locale and per-category figures are indicative: read them with their n."
CI_NOTE = (
    "Slice intervals are 95% Wilson score intervals (conservative for metrics other than hit); "
    "changes carry paired 95% bootstrap intervals, and * marks a change that a paired "
    "randomization test tells from noise at 5%, after Holm's correction over every slice and metric compared."
)
CHANGE_SLICES = ["all", "locale", "category"]
CHANGE_ALPHA = 0.05  # the level of the * of "what changed" (CI_NOTE says 5%)
MOVED_LINES = 6  # the changes the report opens with: the largest, whatever their sign


@dataclass(frozen=True)
class RunReport:
    """One run in detail: its figures at the headline k (every slice) and at every k (slice all)."""

    run_id: str
    created_at: str
    headline_k: int
    retrieval_top_k: int
    ks: list[int]
    n_cases: int
    n_labelled: int
    n_rejected: int
    vacuous: bool
    config: str
    headline: pl.DataFrame  # aggregates at the headline k, every slice
    sweep: pl.DataFrame  # aggregates of slice `all` at every k
    warnings: list[str] = field(default_factory=list)

    def figure(self, metric: str, slice_: str = "all", value: str = "all") -> dict | None:
        rows = self.headline.filter(
            (pl.col("metric") == metric) & (pl.col("slice") == slice_) & (pl.col("slice_value") == value)
        )
        return rows.row(0, named=True) if rows.height else None


@dataclass(frozen=True)
class Changes:
    """The newest run against a reference (the run before it, or a baseline), case by case."""

    run_id: str
    reference: str  # "run <id>" or "baseline <id>"
    k: int
    lines: pl.DataFrame  # comparison rows (transforms/comparison.py), largest |delta| first
    flips: pl.DataFrame  # transforms/flips.py flipped_cases
    reasons: pl.DataFrame  # hit → miss flips per reason and slice
    n_shared: int
    n_added: int
    n_removed: int
    notes: tuple[str, ...] = ()  # what the reader must know to read the figures (the k compared at)
    p_family: str = ""  # what p (Holm) was adjusted over, in words
    alpha: float = CHANGE_ALPHA

    def moved(self, limit: int = MOVED_LINES) -> pl.DataFrame:
        return self.lines.head(limit)


@dataclass(frozen=True)
class Report:
    runs: pl.DataFrame  # one row per run, oldest first: its account and headline figures on `all`
    aggregates: pl.DataFrame  # every run: every slice at its headline k, slice all at every k
    newest: RunReport | None
    previous: RunReport | None
    changes: Changes | None
    never_hit: pl.DataFrame  # newest run: labelled cases with no gold card in the whole capture
    entry_ranks: pl.DataFrame  # newest run: first_relevant_rank distribution at the headline k
    explorer: tuple[pl.DataFrame, dict] | None = None  # the case explorer's cases and meta
    uncompared: tuple[str, ...] = ()  # without changes: why a baseline given was not compared
    charts: dict[str, str] = field(default_factory=dict)  # chart name → file name in the report folder
    notes: tuple[str, ...] = (LOCALE_CAVEAT, CI_NOTE)


def report_notes(gold_sources: pl.Series) -> tuple[str, ...]:
    """The notes a reader needs for the newest run, whose labelled cases' gold came from
    `gold_sources` (the `cases` view's gold_source): the recall caveat only where gold is
    disjunctive, and for how many cases when only some of them are."""
    disjunctive = int((gold_sources == DISJUNCTIVE_SOURCE).sum())
    if disjunctive == 0:
        return (LOCALE_CAVEAT, CI_NOTE)
    caveat = RECALL_CAVEAT if disjunctive == gold_sources.len() else (
        f"For the {disjunctive} of {gold_sources.len()} labelled cases whose gold is {DISJUNCTIVE_SOURCE}, " + RECALL_CAVEAT)
    return (caveat, LOCALE_CAVEAT, CI_NOTE)


def run_report(run: dict, aggregates: pl.DataFrame, warnings: list[str] | None = None) -> RunReport:
    mine = aggregates.filter(pl.col("run_id") == run["run_id"])
    return RunReport(
        run_id=run["run_id"],
        created_at=run["created_at"],
        headline_k=run["headline_k"],
        retrieval_top_k=run["retrieval_top_k"],
        ks=list(run["ks"]),
        n_cases=run["n_cases"],
        n_labelled=run["n_labelled"],
        n_rejected=run["n_rejected"],
        vacuous=run["vacuous"],
        config=run["config"],
        headline=mine.filter(pl.col("k") == run["headline_k"]),
        sweep=mine.filter(pl.col("slice") == "all"),
        warnings=warnings or [],
    )


def runs_table(runs: pl.DataFrame, aggregates: pl.DataFrame) -> pl.DataFrame:
    """One row per run, oldest first: its account and each metric's mean on `all` at its
    headline k, with the n of hit."""
    on_all = (
        aggregates.join(runs.select("run_id", "headline_k"), on="run_id")
        .filter((pl.col("slice") == "all") & (pl.col("k") == pl.col("headline_k")))
    )
    means = on_all.pivot(on="metric", index="run_id", values="mean")
    n = on_all.filter(pl.col("metric") == "hit_at_k").select("run_id", "n")
    table = (
        runs.select("run_id", "created_at", "created_at_utc", "headline_k", "n_cases", "n_labelled", "n_rejected",
                    "vacuous")
        .join(means, on="run_id", how="left")
        .join(n, on="run_id", how="left")
        .sort("created_at_utc", "run_id")
    )
    return table.with_columns(
        *[pl.lit(None, dtype=pl.Float64).alias(m) for m in NAMES if m not in table.columns],
        pl.col("n").fill_null(0),
    )


def run_warnings(run: dict, labelled_cases: pl.DataFrame) -> list[str]:
    """Loud flags of one run: vacuous (SPEC 2.9), nothing labelled, k beyond depth at any of
    its cutoffs (SPEC 2.7: from each labelled case's n_cards, its distinct cards), rejects."""
    warnings = []
    if run["vacuous"]:
        warnings.append(
            f"VACUOUS RUN: none of its {run['n_labelled']} labelled cases retrieved anything "
            "(did the runner have a store?). Its figures are not a measurement of retrieval."
        )
    if run["n_labelled"] == 0:
        warnings.append("No labelled cases: nothing in this run can be scored.")
    shallow = []
    for k in run["ks"]:
        if k > run["max_depth"]:
            warnings.append(
                f"k={k} is beyond the deepest capture of this run ({run['max_depth']} distinct "
                f"cards): the run cannot show k={k}; figures at k={k} are computed on what was captured."
            )
            continue
        n = labelled_cases.filter(pl.col("n_cards") < k).height  # sql/case_metrics.sql's k_beyond_depth
        if n:
            shallow.append(f"k={k}: {n}")
    if shallow:
        warnings.append(
            f"Labelled cases that captured fewer than k distinct cards (sibling chunks or short lists), "
            f"of {run['n_labelled']}: {', '.join(shallow)}; they are scored on what was captured."
        )
    if run["n_rejected"]:
        warnings.append(f"{run['n_rejected']} record(s) were rejected and left out (see the `rejects` view).")
    return warnings + identity_notes(run)


def identity_notes(run: dict) -> list[str]:
    """How another tool's run named its cards (SPEC 15: the `runs` row's identity counts, null
    for a run folder or a TREC run): the counts by method, and, when most of its retrieved
    items and gold entries were named by their text, that matching is exact."""
    counts = {name: run.get(name) for name in IDENTITY_COUNTS}
    if any(value is None for value in counts.values()):
        return []
    sides = {side: [counts[f"{side}_by_{method}"] for method in ("id", "metadata", "content")]
             for side in ("retrieved", "gold")}
    said = "; ".join(f"{side} {total:,} (id {by[0]:,}, metadata {by[1]:,}, content {by[2]:,})"
                     for side, by in sides.items() for total in [sum(by)])
    notes = [f"Cards identified by id, metadata or content: {said}."]
    content = sides["retrieved"][2] + sides["gold"][2]
    if content * 2 > sum(sides["retrieved"]) + sum(sides["gold"]):
        notes.append("Most cards of this run were identified by their text, matched exactly after normalising "
                     "Unicode and whitespace: a paraphrased chunk cannot match its gold, so hits may be missed.")
    return notes


def kb_warnings(run_id: str, unknown_gold: pl.DataFrame | None, kb_name: str) -> list[str]:
    """The warning of a run whose gold ids are not all cards of the KB named `kb_name`."""
    if unknown_gold is None:
        return []
    mine = unknown_gold.filter(pl.col("run_id") == run_id)
    if mine.height == 0:
        return []
    return [
        f"{mine['n_ids'][0]} gold id(s) in {mine['n_cases'][0]} case(s) are not cards of the "
        f"knowledge base {kb_name}: those cases can never hit (see `retrieval-eval check-kb`)."
    ]


def changes(newest_cases: pl.DataFrame, reference_cases: pl.DataFrame, *, run_id: str, reference: str, k: int,
            unknown_gold: set[str] | None = None, notes: tuple[str, ...] = ()) -> Changes:
    """What changed from `reference_cases` to `newest_cases` (per-case rows at k: case_id,
    locale, category, the metrics, first_relevant_rank, gold, n_retrieved): the gated metrics
    on all, each locale and each category, compared on the cases both scored."""
    both = pl.concat([
        reference_cases.select("case_id", "locale", "category", *GATED).with_columns(pl.lit("reference").alias("run_id")),
        newest_cases.select("case_id", "locale", "category", *GATED).with_columns(pl.lit(run_id).alias("run_id")),
    ])
    lines = compare_runs(both, "reference", metrics=list(GATED), slices=CHANGE_SLICES, alpha=CHANGE_ALPHA)
    lines = lines.sort(pl.col("delta").abs(), "slice", "slice_value", descending=[True, False, False])
    flips = flipped_cases(reference_cases, newest_cases, unknown_gold)
    reference_ids, newest_ids = set(reference_cases["case_id"]), set(newest_cases["case_id"])
    family = p_family("holm", lines.height, "slice × metric change", " compared")
    return Changes(run_id, reference, k, lines, flips, reasons_by_slice(flips), len(reference_ids & newest_ids),
                   len(newest_ids - reference_ids), len(reference_ids - newest_ids), notes, p_family=family)


def baseline_set_aside(baseline: dict, newest: RunReport, newest_level: int | None) -> str | None:
    """Why "what changed" cannot compare the newest run (evaluated at relevance level
    `newest_level`) with the baseline, or None: the baseline is at another k, or counts other
    grades as gold."""
    if baseline["k"] != newest.headline_k:
        return f"baseline {baseline['run_id']} is at k={baseline['k']}, not at this run's headline k={newest.headline_k}"
    mismatch = relevance_mismatch(baseline, newest.run_id, newest_level)
    return None if mismatch is None else f"baseline {baseline['run_id']}: {mismatch}"


def comparison_notes(newest: RunReport, previous: RunReport | None, set_aside: str | None) -> tuple[str, ...]:
    """What a reader of "what changed" must know: why a baseline given was left aside
    (`set_aside`, from baseline_set_aside) for the run before, and that runs evaluated at
    different headline k are both compared at the newest run's."""
    k = newest.headline_k
    notes = []
    if set_aside is not None:
        notes.append(f"{set_aside}: " + ("compared with the run before instead" if previous else "not compared"))
    if previous is not None and previous.headline_k != k:
        computed = "" if k in previous.ks else f" (its figures at k={k} computed from its stored rankings)"
        notes.append(f"run {previous.run_id} has headline k={previous.headline_k}; both runs are compared at k={k}{computed}")
    return tuple(notes)


def diagnostics(case_metrics: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The newest run's never-hit cases and the distribution of its first relevant ranks."""
    never_hit = case_metrics.filter(pl.col("first_relevant_rank").is_null()).select(
        "case_id", "locale", "category", "n_gold").sort("case_id")
    entry_ranks = (case_metrics.group_by("first_relevant_rank").agg(pl.len().alias("n_cases"))
                   .sort("first_relevant_rank", nulls_last=True))
    return never_hit, entry_ranks


def headline_of(changes: Changes) -> str:
    """The change a reader needs first, as one phrase: e.g. 'pt-BR hit@4 −0.125 (95% CI …)'."""
    if changes.lines.height == 0:
        return "no case in common to compare"
    row = changes.lines.row(0, named=True)
    return change_phrase(row, changes.k)


def change_phrase(row: dict, k: int) -> str:
    where = "all" if row["slice"] == "all" else row["slice_value"]
    mark = " *" if row["significant"] else ""
    return (f"{where} {LABELS[row['metric']]}@{k} {signed(row['delta'])} "
            f"(95% CI {signed(row['ci_low'])} … {signed(row['ci_high'])}){mark}")


def explorer_data(newest: pl.DataFrame, previous: pl.DataFrame | None, flips: pl.DataFrame | None,
                  titles: dict[str, str | None] | None, *, run_id: str, previous_run_id: str | None, k: int,
                  texts: dict[str, str] | None = None) -> tuple[pl.DataFrame, dict]:
    """The case explorer's cases and meta (transforms/case_explorer.py): one row per labelled
    case of the newest run (case_id order). `newest` and `previous` are per-case rows at the
    headline k with case_id, locale, category, hit_at_k, first_relevant_rank, question, gold,
    cards (its distinct cards in rank order down to k or to its first gold card, whichever is
    deeper: sql/report_cases.sql) and n_cards (how many it retrieved in all); `titles` are
    the KB's, None when no KB was read. meta["titles"] holds the titles of the
    KB cards the cases name; with a KB, a card missing there is not in the KB. meta["texts"]
    holds the text of each card identified by its content that the cases name (SPEC 15)."""
    newest = newest.sort("case_id")
    if previous is not None:
        previous = previous.join(newest.select("case_id"), on="case_id", how="semi")
    hit = pl.col("hit_at_k").cast(pl.Int8).alias("hit")
    no_ids = pl.lit([], dtype=pl.List(pl.String))
    shown = pl.col("cards").fill_null(no_ids)
    # a graded case's evidence: its nDCG at k, the grades of its retrieved cards by card rank,
    # and every grade above 0 it has (the ideal ranking)
    # and its cards' retrieval scores (kept for graded cases only: at 20,000 cases they would
    # add a number per listed card to the page for every case)
    # The explorer reads these only for a graded case (gold_source "relevance"): a run with
    # none leaves them out of the page (a third of its bytes at 100k cases), as it leaves out a
    # question no case has, and a flip's reason and the run before when there is none.
    is_graded = pl.col("gold_source") == "relevance"
    graded = [pl.col("ndcg_at_k").alias("ndcg"), pl.col("graded_ranks").alias("grades"), "ideal_gains",
              pl.when(is_graded).then(pl.col("card_scores")).alias("scores")]
    if not newest.select(is_graded.any()).item():
        graded = []
    question = ["question"] if newest["question"].null_count() < newest.height else []
    cases = newest.select("case_id", "locale", "category", hit, "first_relevant_rank", *question, "gold_source",
                          pl.col("gold").fill_null(no_ids), shown.alias("retrieved"), "n_cards", *graded)
    if flips is not None:
        flip = pl.concat_str(pl.col("from"), pl.lit("-"), pl.col("to")).alias("flip")
        cases = cases.join(flips.select("case_id", flip, "reason"), on="case_id", how="left", maintain_order="left")
    else:
        cases = cases.with_columns(pl.lit(None, dtype=pl.String).alias("flip"))
    if previous is not None:
        before = previous.select("case_id", pl.struct(
            hit, "first_relevant_rank", shown.alias("retrieved"), "n_cards",
            pl.col("gold").fill_null(no_ids), *graded).alias("before"))
        cases = cases.join(before, on="case_id", how="left", maintain_order="left")
    meta = {"run_id": run_id, "previous_run_id": previous_run_id, "k": k, "kb": titles is not None,
            "titles": _titles_named(titles, [newest] if previous is None else [newest, previous]),
            "texts": texts or {}}
    return cases, meta


def _titles_named(titles: dict[str, str | None] | None, sides: list[pl.DataFrame]) -> dict[str, str | None]:
    """The titles of the KB cards named in the sides' gold and cards (a hash probe of every
    named id against the KB's ids, then the few distinct matches)."""
    if not titles:
        return {}
    known = pl.Series(list(titles), dtype=pl.String)
    named = pl.concat([side.get_column(column).explode() for side in sides for column in ("gold", "cards")])
    return {card: titles[card] for card in named.filter(named.is_in(known.implode())).unique().sort().to_list()}
