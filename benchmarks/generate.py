"""Write one synthetic run folder (manifest.json + cases.jsonl) for benchmarking.

    python benchmarks/generate.py --cases 100000 --depth 20 --out benchmarks/work/data/bench-100k-d20 --seed 7

The folder name is the run id. Output is deterministic for a given (cases, depth, seed):
cases are made in fixed blocks, each from its own seeded generator, so the bytes do not
depend on how many worker processes wrote them.

Shape of each case (the input format of `retrieval-eval run`):
- locale en / es-419 / pt-BR, category golden / adversarial / regression / long_tail;
- `must_cite_one_of`: 1-3 card ids, or [] for about 10% of cases (unlabelled);
- `retrieved_context`: `depth` chunks with strictly decreasing scores (6 decimals), card
  identity in `parent_id`; about 15% of the items are sibling chunks of a card already in
  the list; gold cards land at random ranks (some beyond k = 10, some never retrieved);
- chunk text ~80 characters and an answer ~200 characters, so 100k cases at depth 20
  come to about 440 MB, like real stored artifacts. Text and answers are drawn from a
  pool made once per seed, with accents in the es-419 and pt-BR pools.

`--shape sparse` makes artifacts unlike those: 100 times as many distinct cards (ids rarely
repeat, so dictionaries do not help), gold cards rarely retrieved (few hits), and large fields
the metrics ignore (chunk text of 300-500 characters, a metadata object on every chunk and
an answer of about 1,500 characters): about twice the bytes per case.

`--shape lean` makes lines that carry little beyond the metric fields and short passage text:
each chunk is only `id`, `parent_id`, `score` and `text` (no `chunk_index`, no `source`), and a
case has no `answer` and no `cited_ids`. Cards, gold and ranks are drawn as for the standard
shape. A plain `json.loads` has the least to parse per metric field here, which is where a
script over pytrec_eval is fastest.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import time
from pathlib import Path

BLOCK = 5000  # cases per block; each block has its own seeded generator
N_CARDS = 200_000
TOP_K = 10
LOCALES = ("en", "es-419", "pt-BR")
CATEGORIES = ("golden", "golden", "golden", "adversarial", "regression", "long_tail")
TEXT_LEN = (60, 100)  # chunk text length range (characters)
ANSWER_LEN = (170, 230)
POOL_SIZE = 4096
# The artifact shapes: how many distinct cards, how often a gold card is retrieved (within the
# top 4, anywhere), the lengths of chunk text and answers, a metadata object per chunk, and
# whether a line carries the fields the metrics ignore (`chunk_index`, `source`, `answer`,
# `cited_ids`).
SHAPES = {
    "standard": {"cards": N_CARDS, "gold_top": 0.55, "gold_any": 0.80, "text": TEXT_LEN, "answer": ANSWER_LEN,
                 "metadata": False, "extras": True},
    "sparse": {"cards": N_CARDS * 100, "gold_top": 0.06, "gold_any": 0.15, "text": (300, 500),
               "answer": (1300, 1700), "metadata": True, "extras": True},
    "lean": {"cards": N_CARDS, "gold_top": 0.55, "gold_any": 0.80, "text": TEXT_LEN, "answer": ANSWER_LEN,
             "metadata": False, "extras": False},
}

WORDS = {
    "en": (
        "take your medicine with food and water each morning unless the pharmacist says "
        "otherwise ask about missed doses side effects dizziness kidney liver blood pressure "
        "heart rate tablets capsules dose schedule refill doctor nurse clinic symptoms "
        "report swelling rash fever store below room temperature away from children"
    ).split(),
    "es-419": (
        "tome su medicamento con comida y agua cada mañana salvo que el farmacéutico indique "
        "otra cosa pregunte por dosis olvidadas efectos secundarios mareo riñón hígado presión "
        "arterial ritmo cardíaco tabletas cápsulas horario receta médico enfermera clínica "
        "síntomas hinchazón sarpullido fiebre guárdelo lejos de los niños"
    ).split(),
    "pt-BR": (
        "tome seu remédio com comida e água toda manhã a menos que o farmacêutico diga "
        "outra coisa pergunte sobre doses esquecidas efeitos colaterais tontura rim fígado "
        "pressão arterial frequência cardíaca comprimidos cápsulas horário receita médico "
        "enfermeira clínica sintomas inchaço erupção febre guarde longe das crianças"
    ).split(),
}


def _sentence(rng: random.Random, words: list[str], lo: int, hi: int) -> str:
    target = rng.randint(lo, hi)
    parts: list[str] = []
    length = 0
    while True:
        word = rng.choice(words)
        if parts and length + len(word) > target:
            break
        parts.append(word)
        length += len(word) + 1
    text = " ".join(parts)
    return text[0].upper() + text[1:] + "."


def text_pools(seed: int, shape: str = "standard") -> dict[str, tuple[list[str], list[str]]]:
    """Per locale: (chunk texts, answers), each already a JSON string literal."""
    rng = random.Random(f"pool-{seed}")
    lengths = SHAPES[shape]
    pools = {}
    for locale in LOCALES:
        words = WORDS[locale]
        texts = [json.dumps(_sentence(rng, words, *lengths["text"]), ensure_ascii=False) for _ in range(POOL_SIZE)]
        answers = [json.dumps(_sentence(rng, words, *lengths["answer"]), ensure_ascii=False) for _ in range(POOL_SIZE)]
        pools[locale] = (texts, answers)
    return pools


_POOLS: dict[str, tuple[list[str], list[str]]] = {}


def _init_worker(seed: int, shape: str = "standard") -> None:
    _POOLS.clear()
    _POOLS.update(text_pools(seed, shape))


def make_block(task: tuple[int, int, int, int, str]) -> bytes:
    """Cases [start, stop) as JSONL bytes; depends only on (seed, block index, depth, shape)."""
    seed, start, stop, depth, shape = task
    spec = SHAPES[shape]
    n_cards = spec["cards"]
    rng = random.Random(seed * 1_000_003 + start // BLOCK)
    rand = rng.random
    randrange = rng.randrange
    pools = _POOLS
    step_max = max(2, 900_000 // (depth + 1))
    lines: list[str] = []
    for n in range(start, stop):
        locale = LOCALES[n % 3]
        texts, answers = pools[locale]
        category = CATEGORIES[randrange(len(CATEGORIES))]
        # Gold: 1-3 cards, or none for ~10% of cases.
        if rand() < 0.10:
            gold: list[int] = []
        else:
            g = 1 + (rand() < 0.35) + (rand() < 0.15)
            gold = [randrange(n_cards) for _ in range(g)]
        # Card order of the list: random cards, with gold cards placed at random ranks.
        cards: list[int] = []
        chunks_of: dict[int, int] = {}
        gold_slots = {}
        for card in gold:
            u = rand()
            if u < spec["gold_top"]:
                gold_slots.setdefault(randrange(min(depth, 4)), card)
            elif u < spec["gold_any"]:
                gold_slots.setdefault(randrange(depth), card)
            # else: not retrieved at all
        items: list[str] = []
        score = 990_000 - randrange(60_000)
        for rank in range(depth):
            if rank in gold_slots:
                card = gold_slots[rank]
            elif cards and rand() < 0.15:
                card = cards[randrange(len(cards))]  # a sibling chunk of a card already seen
            else:
                card = randrange(n_cards)
            used = chunks_of.get(card)
            if used is None:
                cards.append(card)
                idx = randrange(6)
                chunks_of[card] = 1 << idx
            else:
                idx = randrange(16)
                while used >> idx & 1:
                    idx += 1
                chunks_of[card] = used | 1 << idx
            score -= 1 + randrange(step_max)
            metadata = (f', "metadata": {{"section": "s{randrange(90)}", "tokens": {randrange(40, 400)}, '
                        f'"tags": ["t{randrange(50)}", "t{randrange(50)}"], "offsets": [{randrange(9000)}, {randrange(9000)}]}}'
                        if spec["metadata"] else "")
            text = texts[randrange(POOL_SIZE)]
            if spec["extras"]:
                items.append(
                    f'{{"id": "card-{card}::{idx:02d}", "parent_id": "card-{card}", "chunk_index": {idx}, '
                    f'"score": 0.{score:06d}, "source": "kb", "text": {text}{metadata}}}'
                )
            else:
                items.append(f'{{"id": "card-{card}::{idx:02d}", "parent_id": "card-{card}", '
                             f'"score": 0.{score:06d}, "text": {text}}}')
        gold_json = ", ".join(f'"card-{c}"' for c in gold)
        n_cited = 1 + (rand() < 0.3)
        cited = ", ".join(f'"card-{c}"' for c in cards[:n_cited])
        answer = answers[randrange(POOL_SIZE)]
        extras = f', "answer": {answer}, "cited_ids": [{cited}]' if spec["extras"] else ""
        lines.append(
            f'{{"case_id": "{locale}-{category}-{n:08d}", "locale": "{locale}", "category": "{category}", '
            f'"must_cite_one_of": [{gold_json}], "retrieved_context": [{", ".join(items)}]{extras}}}\n'
        )
    return "".join(lines).encode("utf-8")


def generate(cases: int, depth: int, out: Path, seed: int = 7, processes: int | None = None,
             shape: str = "standard") -> Path:
    """Write `out`/manifest.json and `out`/cases.jsonl; returns the cases file."""
    if cases < 1 or depth < 1:
        raise ValueError("cases and depth must be >= 1")
    out.mkdir(parents=True, exist_ok=True)
    manifest = {
        "run_id": out.name,
        "created_at": "2026-11-01T00:00:00Z",
        "retrieval_top_k": TOP_K,
        "git_sha": None,
        "dataset_version": f"synthetic-seed{seed}",
        "config": {"retriever": "synthetic", "cases": cases, "depth": depth, "seed": seed, "shape": shape},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    tasks = [(seed, start, min(start + BLOCK, cases), depth, shape) for start in range(0, cases, BLOCK)]
    processes = processes or min(os.cpu_count() or 1, 2)
    target = out / "cases.jsonl"
    partial = out / "cases.jsonl.partial"
    with open(partial, "wb", buffering=16 << 20) as handle:
        if processes == 1 or len(tasks) == 1:
            _init_worker(seed, shape)
            for task in tasks:
                handle.write(make_block(task))
        else:
            ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
            with ctx.Pool(processes, initializer=_init_worker, initargs=(seed, shape)) as pool:
                for block in pool.imap(make_block, tasks, chunksize=1):
                    handle.write(block)
    partial.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, required=True)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True, help="run folder to write (its name is the run id)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--processes", type=int, default=None, help="worker processes (default: up to 2)")
    parser.add_argument("--shape", choices=tuple(SHAPES), default="standard")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    path = generate(args.cases, args.depth, args.out, args.seed, args.processes, args.shape)
    size = path.stat().st_size
    print(f"{path}: {args.cases} cases x {args.depth} chunks, {size / 1e6:.1f} MB "
          f"in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
