/* libFuzzer harness of the strict parser (flows/sources/_case_columns.c) under AddressSanitizer and
 * UBSan: any block of bytes, parsed as ingest parses a block of lines, must never read or
 * write out of bounds, leak, or meet undefined behaviour; and a block it takes must give
 * columns Arrow can wrap (one row per line, offsets that rise and end at their data).
 *
 * The parser's source is compiled into this file as it is (tests/fuzz/run.sh puts its folder
 * on the include path), so its static core, parse_block, is called without Python; libpython
 * is linked only because the module's Python layer is compiled along.
 */
#include "_case_columns.c"

#include <stdio.h>

#define MAX_LINE ((size_t)64 << 20) /* MAX_RECORD_BYTES, transforms/records.py */

static void require(int holds, const char *rule) {
    if (holds) return;
    fprintf(stderr, "parser_memory_fuzzer: broken rule: %s\n", rule);
    abort();
}

static int32_t offset_at(const Buf *offsets, int64_t i) {
    int32_t v;
    memcpy(&v, offsets->data + i * (int64_t)sizeof v, sizeof v);
    return v;
}

/* rows + 1 offsets, from 0, never falling, the last at `last`. */
static void check_offsets(const Buf *offsets, int64_t rows, int64_t last, const char *column) {
    require(offsets->len == (size_t)(rows + 1) * sizeof(int32_t), column);
    require(offset_at(offsets, 0) == 0, column);
    for (int64_t i = 0; i < rows; i++) require(offset_at(offsets, i) <= offset_at(offsets, i + 1), column);
    require(offset_at(offsets, rows) == last, column);
}

static void check_valid(const Valid *v, int64_t rows, const char *column) {
    require(v->n == rows, column);
    require(v->bits.len == (size_t)(rows + 7) / 8, column);
    require(v->nulls >= 0 && v->nulls <= rows, column);
}

static void check_strings(const Strings *s, int64_t rows, const char *column) {
    check_valid(&s->valid, rows, column);
    check_offsets(&s->offsets, rows, (int64_t)s->data.len, column);
}

static void check_columns(const Columns *cols, int64_t lines) {
    int64_t n = cols->n;
    require(n == lines, "one row per line");
    for (int i = 0; i < N_TEXT; i++) check_strings(&cols->text[i], n, RECORD_KEYS[i]);
    for (int i = 0; i < N_GOLD; i++) {
        const StringLists *g = &cols->gold[i];
        check_valid(&g->valid, n, RECORD_KEYS[F_GOLD + i]);
        check_offsets(&g->offsets, n, g->items.valid.n, RECORD_KEYS[F_GOLD + i]);
        check_strings(&g->items, g->items.valid.n, RECORD_KEYS[F_GOLD + i]);
        require(g->items.valid.nulls == 0, "gold ids are never null");
    }
    const Items *it = &cols->context;
    check_valid(&it->valid, n, "retrieved_context");
    check_offsets(&it->offsets, n, it->n_items, "retrieved_context");
    check_strings(&it->id, it->n_items, "retrieved_context.id");
    check_strings(&it->parent_id, it->n_items, "retrieved_context.parent_id");
    check_valid(&it->score_valid, it->n_items, "retrieved_context.score");
    require(it->scores.len == (size_t)it->n_items * sizeof(double), "retrieved_context.score");
}

/* The block parsed with a line limit; BAD, NOMEM or 0 (then the columns are checked). */
static int parse_checked(const uint8_t *data, size_t size, size_t max_line, int64_t lines) {
    Columns cols;
    memset(&cols, 0, sizeof cols);
    int status = parse_block(data, size, max_line, &cols);
    if (status == 0) check_columns(&cols, lines);
    free_columns(&cols);
    return status;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); /* as PyInit__case_columns sets it */
    require(c_locale != (locale_t)0, "the C locale opens");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t lines = 0;
    size_t longest = 0, start = 0;
    for (size_t i = 0; i <= size; i++) {
        if (i == size && start == size) break; /* a final newline opens no line */
        if (i == size || data[i] == '\n') {
            lines++;
            if (i - start > longest) longest = i - start;
            start = i + 1;
        }
    }
    int status = parse_checked(data, size, MAX_LINE, lines);
    /* The line limit counts a line's bytes without its newline: the longest line fits in its
     * own length, and not in one byte less. */
    require(parse_checked(data, size, longest, lines) == status, "a line as long as the limit is taken");
    if (longest > 0) require(parse_checked(data, size, longest - 1, lines) == BAD, "a line past the limit is refused");
    return 0;
}
