/* Case explorer of report.html.
 *
 * Reads the cases and the run facts from the JSON script elements that case_explorer.py
 * writes, keeps one row per case (data-case-id and the other data-* attributes), shows
 * the rows that pass the filters a page at a time by toggling `hidden`, and builds a
 * case's evidence (question, gold cards, retrieved lists of both runs) only when the case
 * is opened. Every string from the data is put in the page with textContent,
 * never parsed as HTML.
 */
(function () {
  "use strict";

  const root = document.getElementById("case-explorer");
  if (!root) return;
  const cases = JSON.parse(document.getElementById("retrieval-eval-cases").textContent);
  const meta = JSON.parse(document.getElementById("retrieval-eval-meta").textContent);
  const k = meta.k;
  const form = root.querySelector(".cx-filters");
  const list = root.querySelector(".cx-list");
  const count = root.querySelector(".cx-count");
  const numbers = new Intl.NumberFormat("en");

  const FLIP_LABELS = { "hit-miss": "hit → miss", "miss-hit": "miss → hit" };
  // Why the side of a flip that missed missed (transforms/flips.py): this run for hit → miss,
  // the run before for miss → hit. `missed` is that side's figures, `is` the verb of its tense.
  const REASONS = {
    gold_changed: () => "the gold cards differ between the two runs",
    gold_not_in_kb: (missed, is) => `a gold card ${is} not in the KB`,
    empty_retrieval: () => "it retrieved nothing",
    not_retrieved: (missed, is) => `no gold card ${is} in the retrieved list`,
    below_k: (missed, is) => `the first gold card ${is} at rank ${missed.first_relevant_rank}, below k = ${k}`,
  };
  const GOLD_HEADERS = {
    must_cite_one_of: "Gold cards (must_cite_one_of: citing any one counts)",
    relevant_ids: "Relevant cards (relevant_ids: each one counts toward recall)",
    relevance: "Relevant cards (graded relevance: the grade of each retrieved card is beside it)",
  };

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function rankText(rank) {
    return rank === null || rank === undefined ? "none" : String(rank);
  }

  // ---- the list: one row per case, filled in when it is first shown ------------------
  //
  // Every case has its <li> with data attributes from the start, hidden. Only one page of
  // matching rows is shown at a time, so filtering touches the DOM of two pages at most
  // and the browser lays out a page, not the whole run.

  const pageSize = Number(list.getAttribute("data-page-size"));
  const pager = root.querySelector(".cx-pager");
  const previousPage = pager.querySelector(".cx-previous");
  const nextPage = pager.querySelector(".cx-next");
  const pageText = pager.querySelector(".cx-page");

  const summaryTemplate = el("button", "cx-summary");
  summaryTemplate.type = "button";
  summaryTemplate.setAttribute("aria-expanded", "false");
  for (const name of ["cx-id", "cx-locale", "cx-category", "cx-hit", "cx-rank", "cx-flip"]) {
    summaryTemplate.appendChild(el("span", name));
  }

  const rows = new Array(cases.length);
  const searchKeys = new Array(cases.length);
  const fragment = document.createDocumentFragment();
  cases.forEach((c, i) => {
    const row = document.createElement("li");
    row.className = "cx-case";
    row.hidden = true;
    row.setAttribute("data-case-id", c.case_id);
    row.setAttribute("data-locale", c.locale);
    row.setAttribute("data-category", c.category);
    row.setAttribute("data-hit", c.hit ? "1" : "0");
    row.setAttribute("data-flip", c.flip || "none");
    row.setAttribute("data-index", String(i));
    rows[i] = row;
    searchKeys[i] = c.case_id.toLowerCase();
    fragment.appendChild(row);
  });
  list.appendChild(fragment);

  function fillRow(row, c) {
    const summary = summaryTemplate.cloneNode(true);
    const [id, locale, category, hit, rank, flip] = summary.children;
    id.textContent = c.case_id;
    locale.textContent = c.locale;
    category.textContent = c.category;
    hit.textContent = c.hit ? "hit" : "miss";
    rank.textContent = c.first_relevant_rank === null ? "gold not retrieved" : "rank " + c.first_relevant_rank;
    if (c.flip) flip.textContent = FLIP_LABELS[c.flip] || c.flip;
    row.appendChild(summary);
  }

  // ---- filters and pages -----------------------------------------------------------

  let matching = []; // indexes of the cases that pass the filters, in list order
  let page = 0;
  let shownRows = [];

  function currentFilters() {
    const f = form.elements;
    return {
      locale: f.locale.value,
      category: f.category.value,
      hit: f.hit.value,
      flip: f.flip.value,
      search: f.search.value.trim().toLowerCase(),
    };
  }

  function matches(c, i, f) {
    if (f.locale && c.locale !== f.locale) return false;
    if (f.category && c.category !== f.category) return false;
    if (f.hit && (c.hit ? "hit" : "miss") !== f.hit) return false;
    if (f.flip === "flipped" && !c.flip) return false;
    if (f.flip === "none" && c.flip) return false;
    if (f.flip && f.flip !== "flipped" && f.flip !== "none" && c.flip !== f.flip) return false;
    if (f.search && searchKeys[i].indexOf(f.search) === -1) return false;
    return true;
  }

  function applyFilters() {
    const f = currentFilters();
    matching = [];
    for (let i = 0; i < cases.length; i++) {
      if (matches(cases[i], i, f)) matching.push(i);
    }
    showPage(0);
  }

  function pageCount() {
    return Math.max(1, Math.ceil(matching.length / pageSize));
  }

  function showPage(number) {
    page = Math.min(Math.max(number, 0), pageCount() - 1);
    for (const row of shownRows) row.hidden = true;
    const first = page * pageSize;
    shownRows = matching.slice(first, first + pageSize).map((i) => rows[i]);
    for (const row of shownRows) {
      if (!row.firstChild) fillRow(row, cases[Number(row.getAttribute("data-index"))]);
      row.hidden = false;
    }
    const noun = cases.length === 1 ? "case" : "cases";
    const range = shownRows.length
      ? ` · showing ${numbers.format(first + 1)}–${numbers.format(first + shownRows.length)}`
      : " · no case matches the filters";
    count.textContent = `${numbers.format(matching.length)} of ${numbers.format(cases.length)} ${noun}${range}`;
    pageText.textContent = `page ${numbers.format(page + 1)} of ${numbers.format(pageCount())}`;
    previousPage.disabled = page === 0;
    nextPage.disabled = page >= pageCount() - 1;
    pager.hidden = pageCount() === 1;
  }

  function turnPage(step) {
    showPage(page + step);
    count.scrollIntoView({ block: "nearest" });
  }
  previousPage.addEventListener("click", () => turnPage(-1));
  nextPage.addEventListener("click", () => turnPage(1));

  // one pass per frame however fast the search box is typed into
  let pending = false;
  function scheduleFilters() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      applyFilters();
    });
  }
  form.addEventListener("input", scheduleFilters);
  form.addEventListener("change", scheduleFilters);
  form.addEventListener("reset", scheduleFilters); // fields take their defaults after this event
  form.addEventListener("submit", (event) => event.preventDefault());

  // ---- a case's evidence, built when it is first opened --------------------------------

  list.addEventListener("click", (event) => {
    const button = event.target.closest(".cx-summary");
    if (button && list.contains(button)) toggle(button.parentElement);
  });

  function toggle(row) {
    const button = row.firstChild;
    const open = button.getAttribute("aria-expanded") !== "true";
    let detail = row.querySelector(".cx-detail");
    if (open && !detail) {
      const index = Number(row.getAttribute("data-index"));
      detail = caseDetail(cases[index]);
      detail.id = "cx-detail-" + index;
      row.appendChild(detail);
      button.setAttribute("aria-controls", detail.id);
    }
    if (detail) detail.hidden = !open;
    button.setAttribute("aria-expanded", String(open));
    row.classList.toggle("cx-open", open);
  }

  function caseDetail(c) {
    const detail = el("div", "cx-detail");
    if (c.question) {
      const question = el("p", "cx-question");
      question.append(el("span", "cx-label", "Question"), el("span", "cx-question-text", c.question));
      detail.appendChild(question);
    }
    if (c.flip) detail.appendChild(flipNote(c));
    detail.appendChild(goldCards(c));
    const runs = el("div", "cx-runs");
    runs.appendChild(runColumn("This run", meta.run_id, c, c.gold, c.gold_source === "relevance"));
    runs.appendChild(beforeColumn(c));
    detail.appendChild(runs);
    return detail;
  }

  function flipNote(c) {
    const note = el("p", "cx-reason cx-reason-" + c.flip);
    note.appendChild(el("strong", null, "Flipped " + (FLIP_LABELS[c.flip] || c.flip)));
    if (c.reason) {
      const beforeMissed = c.flip === "miss-hit";
      const explain = REASONS[c.reason];
      note.append(beforeMissed ? " — the run before missed: " : " — this run missed: ",
                  el("code", "cx-reason-code", c.reason));
      if (explain) note.append(": " + explain(beforeMissed ? c.before || {} : c, beforeMissed ? "was" : "is"));
    }
    return note;
  }

  // a card's id and KB title as one run of text that wraps as a whole
  // (meta.titles holds the KB titles of the cards named; without a KB there are none)
  function cardText(cardId) {
    const text = el("span", "cx-card-text");
    text.appendChild(el("code", "cx-card-id", cardId));
    if (meta.kb) {
      const known = Object.prototype.hasOwnProperty.call(meta.titles, cardId);
      text.append(" ", known ? el("span", "cx-title", meta.titles[cardId] || "") : el("span", "cx-title cx-not-in-kb", "not in the KB"));
    }
    // a card another tool named by its text (SPEC 15): the text is the card
    const texts = meta.texts || {};
    if (Object.prototype.hasOwnProperty.call(texts, cardId)) {
      text.append(" ", el("q", "cx-card-content", texts[cardId]));
    }
    return text;
  }

  function goldCards(c) {
    const gold = c.gold;
    const section = el("section", "cx-gold");
    section.appendChild(el("h3", null, GOLD_HEADERS[c.gold_source] || "Gold cards"));
    if (c.gold_source === "relevance" && c.ideal_gains && c.ideal_gains.length) {
      section.appendChild(el("p", "cx-grades", "Grades above 0 of this case: " + c.ideal_gains.join(", ")));
    }
    if (!gold.length) {
      section.appendChild(el("p", "cx-empty", "No gold card."));
      return section;
    }
    const items = el("ul", "cx-gold-list");
    for (const cardId of gold) {
      const item = el("li", "cx-gold-card");
      item.appendChild(cardText(cardId));
      items.appendChild(item);
    }
    section.appendChild(items);
    return section;
  }

  function outcome(run, graded) {
    const line = el("p", "cx-outcome");
    line.append(
      `hit@${k}: `,
      el("span", run.hit ? "cx-hit cx-is-hit" : "cx-hit cx-is-miss", run.hit ? "hit" : "miss"),
      " · first relevant rank: ",
      el("span", "cx-first-rank", rankText(run.first_relevant_rank)),
    );
    if (graded && run.ndcg !== null && run.ndcg !== undefined) {
      line.append(` · nDCG@${k}: `, el("span", "cx-ndcg", run.ndcg.toFixed(3)));
    }
    return line;
  }

  // card rank -> grade of a graded case's retrieved cards
  function gradesByRank(run) {
    const grades = new Map();
    for (const g of run.grades || []) grades.set(g.rank, g.grade);
    return grades;
  }

  function runColumn(title, runId, run, gold, graded) {
    const section = el("section", "cx-run");
    const heading = el("h3", null, title + " ");
    heading.appendChild(el("span", "cx-run-id", runId));
    const grades = graded ? gradesByRank(run) : null;
    section.append(heading, outcome(run, graded),
                   rankedCards(run.retrieved, run.n_cards, new Set(gold), grades, run.scores || null));
    return section;
  }

  function beforeColumn(c) {
    if (c.before) {
      const column = runColumn("Run before", meta.previous_run_id, c.before, c.before.gold || c.gold,
                               c.gold_source === "relevance");
      column.classList.add("cx-before");
      return column;
    }
    const section = el("section", "cx-run cx-before");
    section.appendChild(el("h3", null, "Run before"));
    const why = meta.previous_run_id
      ? `Not a labelled case of ${meta.previous_run_id}.`
      : "There is no run before this one.";
    section.appendChild(el("p", "cx-empty", why));
    return section;
  }

  // a retrieval score as the artifact gave it, to four significant digits
  function formatScore(score) {
    return Number.isInteger(score) ? String(score) : String(Number(score.toPrecision(4)));
  }

  // retrieved cards in rank order, with a line at the headline-k cutoff: the cards above
  // it are the ones hit@k looks at; a graded case's cards carry their retrieval scores
  function rankedCards(retrieved, total, gold, grades, scores) {
    const wrap = el("div", "cx-ranked");
    if (!retrieved.length) {
      // a run evaluated before the warehouse kept each case's cards lists none of them
      const text = total ? `${total} cards retrieved; the version that evaluated this run did not keep them (the retrieved view has them).` : "Nothing retrieved.";
      wrap.appendChild(el("p", "cx-empty", text));
      return wrap;
    }
    let ranks = el("ol", "cx-cards");
    wrap.appendChild(ranks);
    retrieved.forEach((cardId, position) => {
      if (position === k) {
        wrap.appendChild(cutoff(`k = ${k} cutoff`));
        ranks = el("ol", "cx-cards");
        ranks.start = k + 1;
        wrap.appendChild(ranks);
      }
      const item = el("li", gold.has(cardId) ? "cx-card cx-is-gold" : "cx-card");
      item.append(el("span", "cx-rank-no", String(position + 1)), cardText(cardId));
      if (gold.has(cardId)) item.appendChild(el("span", "cx-gold-mark", "gold"));
      if (grades && grades.has(position + 1)) item.appendChild(el("span", "cx-grade", "grade " + grades.get(position + 1)));
      const score = scores ? scores[position] : null;
      if (score !== null && score !== undefined) item.appendChild(el("span", "cx-score", "score " + formatScore(score)));
      ranks.appendChild(item);
    });
    if (retrieved.length <= k && total === retrieved.length) {
      wrap.appendChild(cutoff(`k = ${k} cutoff (${retrieved.length} retrieved)`));
    } else if (retrieved.length === k) {
      wrap.appendChild(cutoff(`k = ${k} cutoff`));
    }
    if (total > retrieved.length) {
      // the list stops at the cases table's top_cards depth
      const where = retrieved.length < k ? ` (the k = ${k} cutoff falls among them)` : "";
      wrap.appendChild(el("p", "cx-more", `${total - retrieved.length} more cards below rank ${retrieved.length} are not listed${where}.`));
    }
    return wrap;
  }

  function cutoff(text) {
    const line = el("p", "cx-cutoff");
    line.appendChild(el("span", null, text));
    return line;
  }

  applyFilters();
  root.setAttribute("data-state", "ready");
})();
