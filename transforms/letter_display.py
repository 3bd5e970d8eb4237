"""Tied groups of runs as a compact letter display (SPEC 11, 16): the groups `compare` prints
beside its pairwise tests, built so that they agree with those tests.

Piepho's insert-and-absorb algorithm (H.-P. Piepho, "An algorithm for a letter-based
representation of all-pairwise comparisons", Journal of Computational and Graphical
Statistics 13(2), 2004, 456–466):

1. Start with one group holding every run.
2. Insert: for each significant pair (a, b), every group holding both is replaced by two
   copies, one without a and one without b.
3. Absorb: after each insertion, a group that is a subset of another group is dropped.

Afterwards no significant pair shares a group (each was split), every pair that is not
significant still shares one (a split keeps any other pair together in one copy), and no
group lies inside another. Groups may overlap: with paired tests, significance need not
follow the order of the means (A can differ from B and not from C though mean(B) > mean(C)).
"""

from __future__ import annotations

from string import ascii_lowercase
from typing import Hashable, Iterable, Mapping


def tied_groups(means: Mapping[Hashable, float], significant_pairs: Iterable[frozenset]) -> list[list[Hashable]]:
    """The groups of the compact letter display of `means` under `significant_pairs`.

    Runs inside a group are ordered by mean, highest first (equal means by run id as text);
    groups are ordered by their first run in that order, then by the rest of their runs, so
    the first group (letter a) holds the best run.
    """
    order = sorted(means, key=lambda run: (-means[run], str(run)))
    rank = {run: i for i, run in enumerate(order)}
    groups: list[frozenset] = [frozenset(order)] if order else []
    pairs = {frozenset(p) for p in significant_pairs}
    pairs = [p for p in pairs if len(p) == 2 and all(run in rank for run in p)]
    for pair in sorted(pairs, key=lambda p: sorted(rank[r] for r in p)):
        a, b = sorted(pair, key=rank.__getitem__)
        split = []
        for group in groups:
            split += [group - {a}, group - {b}] if a in group and b in group else [group]
        groups = _absorbed(split)
    ordered = [sorted(group, key=rank.__getitem__) for group in groups]
    return sorted(ordered, key=lambda group: [rank[run] for run in group])


def _absorbed(groups: list[frozenset]) -> list[frozenset]:
    """`groups` without duplicates, empty groups, and groups inside another."""
    distinct = [g for g in dict.fromkeys(groups) if g]
    return [g for g in distinct if not any(g < other for other in distinct)]


def letter(i: int) -> str:
    """The letter of group i (from 0): a, b, …, z, then aa, ab, …"""
    return ascii_lowercase[i] if i < 26 else letter(i // 26 - 1) + ascii_lowercase[i % 26]


def letters(groups: list[list[Hashable]]) -> dict[Hashable, str]:
    """Each run's letters, in the order of `groups`' first appearance of the run: group i is
    `letter(i)`; runs sharing a letter are not significantly different."""
    out: dict[Hashable, str] = {}
    for i, group in enumerate(groups):
        for run in group:
            out[run] = out.get(run, "") + letter(i)
    return out
