"""The metrics, each declared once: name, trec_eval name, label, formula and whether the gate
guards it. sql/case_metrics.sql computes them; aggregates, the report, the charts, the gate,
the JSON output, the TREC export and the tests read them from here (SPEC 2.6)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str  # the column of case_metrics and the `metric` of aggregates
    trec_eval: str  # trec_eval's measure, suffixed with _{k} where it takes a cutoff
    label: str  # short label for tables and charts
    formula: str  # the definition, as SPEC 2.6 states it
    gated: bool  # guarded by the regression gate (SPEC 8)

    def trec_eval_name(self, k: int) -> str:
        return self.trec_eval.format(k=k)


METRICS = (
    Metric(
        "hit_at_k", "success_{k}", "hit",
        "1 if any relevant card is among the first k distinct cards, else 0 (ranx hit_rate@k); "
        "the headline figure: gold is disjunctive",
        gated=True,
    ),
    Metric(
        "recall_at_k", "recall_{k}", "recall",
        "relevant cards among the first k / relevant cards; a lower bound under disjunctive gold",
        gated=True,
    ),
    Metric(
        "ndcg_at_k", "ndcg_cut_{k}", "nDCG",
        "DCG / IDCG: DCG sums gain / log2(rank + 1) over the first k, IDCG the same over the "
        "ideal ranking of every graded card cut at k (gain 1 without grades); never above 1",
        gated=True,
    ),
    Metric(
        "precision_at_k", "P_{k}", "P",
        "relevant cards among the first k / k, even when fewer than k were retrieved",
        gated=False,
    ),
    Metric(
        # trec_eval's recip_rank has no cutoff; this is it over the first k distinct cards
        "reciprocal_rank_at_k", "recip_rank_{k}", "RR",
        "1 / rank of the first relevant card when within k, else 0",
        gated=False,
    ),
)

BY_NAME = {metric.name: metric for metric in METRICS}
NAMES = tuple(metric.name for metric in METRICS)
GATED = tuple(metric.name for metric in METRICS if metric.gated)
LABELS = {metric.name: metric.label for metric in METRICS}
MAX_K = 2**31 - 1  # ranks are 32-bit integers; no capture is that deep
# Not a [0, 1] mean, so not aggregated: the rank at which a case first meets a relevant card.
FIRST_RELEVANT_RANK = "first_relevant_rank"


def metric(name: str) -> Metric:
    return BY_NAME[name]
