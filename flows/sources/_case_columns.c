/* The columns the metrics read from whole lines of a cases.jsonl, parsed strictly: the first
 * read's parser (flows/sources/case_file.py), in C because Arrow's JSON reader spent half of a run's
 * CPU here (benchmarks/README.md).
 *
 * parse(block) takes whole lines and returns the columns of CASES_SCHEMA
 * (transforms/case_schema.py) as buffers Arrow wraps without a copy, or None when any line is
 * not one clean record, whereupon the line-by-line rules (transforms/records.py) judge the
 * file. "Clean" is never wider than those rules: a line is one JSON object opening at its
 * first byte (RFC 8259: no NaN or Infinity, no trailing comma, valid UTF-8 with no encoded
 * or unpaired surrogate, no raw control character in a string), no field the metrics read
 * written twice in one object, each of those fields of its type (strings or null; gold lists
 * of strings; items objects whose id and parent_id are strings or null and whose score is a
 * number or null), `relevance` absent or null (grades are read line by line), and no line
 * longer than max_line. Values the types allow but the rules refuse (an empty case id, a
 * null gold id, an item without id, a score beyond a double) are returned as they are, for
 * staging (transforms/staging.py) to refuse as it does for any reader. Fields it does not
 * read are checked as JSON and skipped, at any depth. The GIL is released while it parses.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data) return -2;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int put(Buf *b, const void *src, size_t n) {
    if (reserve(b, n)) return -2;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static int put_i32(Buf *b, int32_t v) { return put(b, &v, sizeof v); }
static int put_f64(Buf *b, double v) { return put(b, &v, sizeof v); }

/* A validity bitmap (Arrow's: least significant bit first) and its null count. */
typedef struct {
    Buf bits;
    int64_t n, nulls;
} Valid;

static int valid_push(Valid *v, int valid) {
    if (v->n % 8 == 0) {
        char zero = 0;
        if (put(&v->bits, &zero, 1)) return -2;
    }
    if (valid) v->bits.data[v->n / 8] |= (char)(1 << (v->n % 8));
    else v->nulls++;
    v->n++;
    return 0;
}

/* A string column: validity, int32 offsets (one more than rows) and the bytes. */
typedef struct {
    Valid valid;
    Buf offsets, data;
} Strings;

/* A list<string> column: validity and offsets of the lists, and their strings (never null). */
typedef struct {
    Valid valid;
    Buf offsets;
    Strings items;
} StringLists;

/* retrieved_context: list<struct<id, parent_id, score>>, items never null. */
typedef struct {
    Valid valid;
    Buf offsets;
    Strings id, parent_id;
    Valid score_valid;
    Buf scores;
    int64_t n_items;
} Items;

enum { CASE_ID, LOCALE, CATEGORY, QUESTION, QUERY, N_TEXT };
enum { MUST_CITE, RELEVANT, N_GOLD };
enum { F_TEXT = 0, F_GOLD = N_TEXT, F_RELEVANCE = N_TEXT + N_GOLD, F_CONTEXT, F_UNKNOWN };

static const char *const RECORD_KEYS[] = {"case_id", "locale", "category", "question", "query",
                                          "must_cite_one_of", "relevant_ids", "relevance",
                                          "retrieved_context"};
static const char *const ITEM_KEYS[] = {"id", "parent_id", "score"};

typedef struct {
    int64_t n;
    Strings text[N_TEXT];
    StringLists gold[N_GOLD];
    Items context;
    Buf stack; /* open containers while a skipped value is walked */
} Columns;

typedef struct {
    const unsigned char *p, *end;
} Cursor;

#define BAD (-1)
#define NOMEM (-2)
#define TRY(x)                     \
    do {                           \
        int status_ = (x);         \
        if (status_) return status_; \
    } while (0)

static locale_t c_locale;

static void skip_space(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r')) c->p++;
}

static int expect(Cursor *c, unsigned char byte) {
    skip_space(c);
    if (c->p >= c->end || *c->p != byte) return BAD;
    c->p++;
    return 0;
}

static int hex4(const unsigned char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char h = s[i];
        v <<= 4;
        if (h >= '0' && h <= '9') v |= h - '0';
        else if (h >= 'a' && h <= 'f') v |= h - 'a' + 10;
        else if (h >= 'A' && h <= 'F') v |= h - 'A' + 10;
        else return BAD;
    }
    *out = v;
    return 0;
}

/* The length of the valid UTF-8 sequence at s (Unicode table 3-7: no overlong form, no
 * surrogate, nothing past U+10FFFF), or 0. */
static int utf8_length(const unsigned char *s, const unsigned char *end) {
    unsigned char c = s[0];
    int n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) n = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) n = 3;
    else if (c == 0xED) n = 3, hi = 0x9F;
    else if (c == 0xF0) n = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) n = 4, hi = 0x8F;
    else return 0;
    if (end - s < n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return n;
}

static int put_code_point(Buf *out, unsigned cp) {
    unsigned char u[4];
    size_t n;
    if (cp < 0x80) u[0] = (unsigned char)cp, n = 1;
    else if (cp < 0x800) u[0] = 0xC0 | (cp >> 6), u[1] = 0x80 | (cp & 0x3F), n = 2;
    else if (cp < 0x10000)
        u[0] = 0xE0 | (cp >> 12), u[1] = 0x80 | ((cp >> 6) & 0x3F), u[2] = 0x80 | (cp & 0x3F), n = 3;
    else
        u[0] = 0xF0 | (cp >> 18), u[1] = 0x80 | ((cp >> 12) & 0x3F), u[2] = 0x80 | ((cp >> 6) & 0x3F),
        u[3] = 0x80 | (cp & 0x3F), n = 4;
    return put(out, u, n);
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* The high bit of each byte of `w` that ends a plain run of string text ('"', '\\', a control
 * character or a byte past ASCII), and maybe of bytes after it: the lowest one is exact. */
static inline uint64_t run_ends(uint64_t w) {
    uint64_t quote = w ^ (ONES * '"'), backslash = w ^ (ONES * '\\');
    return (w | ((w - ONES * 0x20) & ~w) | ((quote - ONES) & ~quote) | ((backslash - ONES) & ~backslash)) & HIGHS;
}

/* A string at the cursor (on its opening quote), its text appended to `out` when given. */
static int string(Cursor *c, Buf *out) {
    const unsigned char *p = c->p + 1, *end = c->end;
    for (;;) {
        const unsigned char *run = p;
#ifdef __SSE2__
        while (end - p >= 16) { /* sixteen bytes at a time (x86-64 always has SSE2) */
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            /* as signed bytes, those past ASCII are negative: one compare finds them and controls */
            __m128i stops = _mm_or_si128(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
                                         _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                                      _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));
            int stop = _mm_movemask_epi8(stops);
            if (stop) {
                p += __builtin_ctz((unsigned)stop);
                goto run_ended;
            }
            p += 16;
        }
#endif
        while (end - p >= 8) { /* eight bytes at a time through plain text */
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t stop = run_ends(w);
            if (stop) {
                p += __builtin_ctzll(stop) / 8;
                break;
            }
            p += 8;
        }
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
#ifdef __SSE2__
    run_ended:
#endif
        if (out && p > run) TRY(put(out, run, (size_t)(p - run)));
        if (p >= end) return BAD;
        unsigned char ch = *p;
        if (ch == '"') {
            c->p = p + 1;
            return 0;
        }
        if (ch < 0x20) return BAD;
        if (ch >= 0x80) {
            int n = utf8_length(p, end);
            if (!n) return BAD;
            if (out) TRY(put(out, p, (size_t)n));
            p += n;
            continue;
        }
        /* an escape */
        if (end - p < 2) return BAD;
        unsigned char e = p[1];
        const char *simple = NULL;
        switch (e) {
            case '"': simple = "\""; break;
            case '\\': simple = "\\"; break;
            case '/': simple = "/"; break;
            case 'b': simple = "\b"; break;
            case 'f': simple = "\f"; break;
            case 'n': simple = "\n"; break;
            case 'r': simple = "\r"; break;
            case 't': simple = "\t"; break;
            case 'u': break;
            default: return BAD;
        }
        if (simple) {
            if (out) TRY(put(out, simple, 1));
            p += 2;
            continue;
        }
        unsigned unit, low;
        if (end - p < 6 || hex4(p + 2, &unit)) return BAD;
        p += 6;
        if (unit >= 0xDC00 && unit <= 0xDFFF) return BAD; /* a low surrogate alone */
        if (unit >= 0xD800 && unit <= 0xDBFF) {           /* must be followed by its low half */
            if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &low)) return BAD;
            if (low < 0xDC00 || low > 0xDFFF) return BAD;
            unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
            p += 6;
        }
        if (out) TRY(put_code_point(out, unit));
    }
}

/* The value of a number in JSON's grammar, [p, end), when at most 15 significant digits and a
 * power of ten up to 1e22 make it one exact product or quotient of two doubles, which IEEE
 * rounds correctly (Clinger's fast path); 0 otherwise, for strtod. */
static int exact_double(const unsigned char *p, const unsigned char *end, double *value) {
    static const double powers[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    int negative = *p == '-', digits = 0, exponent = 0, fraction = 0;
    uint64_t mantissa = 0;
    p += negative;
    for (; p < end && *p != 'e' && *p != 'E'; p++) {
        if (*p == '.') {
            fraction = 1;
            continue;
        }
        int d = *p - '0';
        if (mantissa == 0 && d == 0) { /* a leading zero */
            exponent -= fraction;
            continue;
        }
        if (++digits > 15) return 0;
        mantissa = mantissa * 10 + (uint64_t)d;
        exponent -= fraction;
    }
    if (p < end) { /* the exponent part */
        p++;
        int sign = 1, e = 0;
        if (*p == '+' || *p == '-') sign = *p++ == '-' ? -1 : 1;
        for (; p < end; p++) {
            if (e > 1000) return 0;
            e = e * 10 + (*p - '0');
        }
        exponent += sign * e;
    }
    double m = (double)mantissa;
    if (mantissa == 0) *value = 0.0;
    else if (exponent >= 0 && exponent <= 22) *value = m * powers[exponent];
    else if (exponent < 0 && exponent >= -22) *value = m / powers[-exponent];
    else return 0;
    if (negative) *value = -*value;
    return 1;
}

/* A number at the cursor, checked against JSON's grammar; its value when asked. */
static int number(Cursor *c, double *value) {
    const unsigned char *p = c->p, *end = c->end, *start = p;
    if (p < end && *p == '-') p++;
    if (p >= end) return BAD;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9')
        while (p < end && *p >= '0' && *p <= '9') p++;
    else return BAD;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return BAD;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return BAD;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (value && !exact_double(start, p, value)) {
        size_t n = (size_t)(p - start);
        char small[64], *text = n < sizeof small ? small : malloc(n + 1);
        if (!text) return NOMEM;
        memcpy(text, start, n);
        text[n] = '\0';
        *value = strtod_l(text, NULL, c_locale); /* correctly rounded, as Arrow's and Python's */
        if (text != small) free(text);
    }
    c->p = p;
    return 0;
}

static int literal(Cursor *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n)) return BAD;
    c->p += n;
    return 0;
}

static int is_null(Cursor *c) { return c->p < c->end && *c->p == 'n'; }

/* Just past an opening bracket: 1 when the container is empty (its closing bracket taken). */
static int empty(Cursor *c, unsigned char close) {
    skip_space(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 1;
    }
    return 0;
}

/* After a member: 1 when another follows (its comma taken), 0 when the container closes. */
static int another(Cursor *c, unsigned char close) {
    skip_space(c);
    if (c->p < c->end && *c->p == ',') {
        c->p++;
        return 1;
    }
    return expect(c, close);
}

/* The members of a container, from just past its opening bracket to its closing one. */
#define MEMBERS(c, close, ...)                          \
    do {                                                \
        if (!empty(c, close)) {                         \
            int more_;                                  \
            do {                                        \
                __VA_ARGS__;                            \
                more_ = another(c, close);              \
                if (more_ < 0) return more_;            \
            } while (more_);                            \
        }                                               \
    } while (0)

/* Any JSON value, checked and skipped; nesting is walked with a stack, not recursion. */
static int skip_value(Cursor *c, Buf *stack) {
    size_t base = stack->len;
    for (;;) {
        skip_space(c);
        if (c->p >= c->end) return BAD;
        unsigned char ch = *c->p;
        if (ch == '{' || ch == '[') {
            c->p++;
            skip_space(c);
            if (c->p < c->end && *c->p == (ch == '{' ? '}' : ']')) {
                c->p++;
            } else {
                TRY(put(stack, &ch, 1));
                if (ch == '{') {
                    if (c->p >= c->end || *c->p != '"') return BAD;
                    TRY(string(c, NULL));
                    TRY(expect(c, ':'));
                }
                continue; /* the first value of the container */
            }
        } else if (ch == '"') {
            TRY(string(c, NULL));
        } else if (ch == 't') {
            TRY(literal(c, "true"));
        } else if (ch == 'f') {
            TRY(literal(c, "false"));
        } else if (ch == 'n') {
            TRY(literal(c, "null"));
        } else {
            TRY(number(c, NULL));
        }
        /* a value ended: close containers, or go on to the next member */
        for (;;) {
            if (stack->len == base) return 0;
            unsigned char open = (unsigned char)stack->data[stack->len - 1];
            skip_space(c);
            if (c->p >= c->end) return BAD;
            if (*c->p == ',') {
                c->p++;
                if (open == '{') {
                    skip_space(c);
                    if (c->p >= c->end || *c->p != '"') return BAD;
                    TRY(string(c, NULL));
                    TRY(expect(c, ':'));
                }
                break;
            }
            if (*c->p != (open == '{' ? '}' : ']')) return BAD;
            c->p++;
            stack->len--;
        }
    }
}

/* An object key at the cursor, matched against `keys`: its index, n_keys for any other key.
 * A key with escapes is decoded before it is matched, as json.loads reads it. */
static int key(Cursor *c, const char *const *keys, int n_keys, int *which) {
    skip_space(c);
    if (c->p >= c->end || *c->p != '"') return BAD;
    const unsigned char *opening = c->p;
    TRY(string(c, NULL));
    const char *name = (const char *)opening + 1;
    size_t n = (size_t)(c->p - opening) - 2;
    Buf decoded = {0};
    if (memchr(name, '\\', n)) {
        Cursor again = {opening, c->end};
        int status = string(&again, &decoded);
        if (status) {
            free(decoded.data);
            return status;
        }
        name = decoded.data ? decoded.data : "";
        n = decoded.len;
    }
    *which = n_keys;
    for (int i = 0; i < n_keys; i++)
        if (keys[i][0] == name[0] && strnlen(keys[i], n + 1) == n && !memcmp(keys[i], name, n)) *which = i;
    free(decoded.data);
    return expect(c, ':');
}

static int text_value(Cursor *c, Strings *s, int *seen) {
    *seen = 1;
    if (is_null(c)) {
        TRY(literal(c, "null"));
        TRY(valid_push(&s->valid, 0));
    } else {
        if (c->p >= c->end || *c->p != '"') return BAD;
        TRY(string(c, &s->data));
        TRY(valid_push(&s->valid, 1));
    }
    return put_i32(&s->offsets, (int32_t)s->data.len);
}

static int null_text(Strings *s) {
    TRY(valid_push(&s->valid, 0));
    return put_i32(&s->offsets, (int32_t)s->data.len);
}

static int gold_value(Cursor *c, StringLists *g) {
    if (is_null(c)) {
        TRY(literal(c, "null"));
        TRY(valid_push(&g->valid, 0));
        return put_i32(&g->offsets, (int32_t)g->items.valid.n);
    }
    if (c->p >= c->end || *c->p != '[') return BAD;
    c->p++;
    MEMBERS(c, ']', {
        skip_space(c);
        if (c->p >= c->end || *c->p != '"') return BAD; /* a gold id is a string */
        TRY(string(c, &g->items.data));
        TRY(valid_push(&g->items.valid, 1));
        TRY(put_i32(&g->items.offsets, (int32_t)g->items.data.len));
    });
    TRY(valid_push(&g->valid, 1));
    return put_i32(&g->offsets, (int32_t)g->items.valid.n);
}

static int item(Cursor *c, Items *it, Buf *stack) {
    if (c->p >= c->end || *c->p != '{') return BAD; /* an item is an object */
    c->p++;
    int seen[3] = {0, 0, 0};
    double score = 0;
    MEMBERS(c, '}', {
        int which;
        TRY(key(c, ITEM_KEYS, 3, &which));
        skip_space(c);
        if (which < 3 && seen[which]) return BAD; /* written twice */
        if (which == 0 || which == 1) {
            TRY(text_value(c, which == 0 ? &it->id : &it->parent_id, &seen[which]));
        } else if (which == 2) {
            seen[2] = 1;
            if (is_null(c)) {
                TRY(literal(c, "null"));
                seen[2] = 2;
            } else {
                if (c->p >= c->end || !(*c->p == '-' || (*c->p >= '0' && *c->p <= '9'))) return BAD;
                TRY(number(c, &score));
            }
        } else {
            TRY(skip_value(c, stack));
        }
    });
    if (!seen[0]) TRY(null_text(&it->id));
    if (!seen[1]) TRY(null_text(&it->parent_id));
    TRY(valid_push(&it->score_valid, seen[2] == 1));
    TRY(put_f64(&it->scores, seen[2] == 1 ? score : 0.0));
    it->n_items++;
    return 0;
}

static int context_value(Cursor *c, Items *it, Buf *stack) {
    if (is_null(c)) {
        TRY(literal(c, "null"));
        TRY(valid_push(&it->valid, 0));
        return put_i32(&it->offsets, (int32_t)it->n_items);
    }
    if (c->p >= c->end || *c->p != '[') return BAD;
    c->p++;
    MEMBERS(c, ']', {
        skip_space(c);
        TRY(item(c, it, stack));
    });
    TRY(valid_push(&it->valid, 1));
    return put_i32(&it->offsets, (int32_t)it->n_items);
}

/* One line, [c->p, c->end): one record, or BAD. */
static int record(Cursor *c, Columns *cols) {
    if (c->p >= c->end || *c->p != '{') return BAD; /* blank, or not an object at its first byte */
    c->p++;
    int seen[F_UNKNOWN] = {0};
    MEMBERS(c, '}', {
        int which;
        TRY(key(c, RECORD_KEYS, F_UNKNOWN, &which));
        skip_space(c);
        if (which < F_UNKNOWN) {
            if (seen[which]) return BAD; /* written twice */
            seen[which] = 1;
        }
        if (which < N_TEXT) {
            TRY(text_value(c, &cols->text[which], &seen[which]));
        } else if (which < F_RELEVANCE) {
            TRY(gold_value(c, &cols->gold[which - F_GOLD]));
        } else if (which == F_RELEVANCE) {
            TRY(literal(c, "null")); /* grades: read line by line */
        } else if (which == F_CONTEXT) {
            TRY(context_value(c, &cols->context, &cols->stack));
        } else {
            TRY(skip_value(c, &cols->stack));
        }
    });
    skip_space(c);
    if (c->p != c->end) return BAD; /* more than one value on the line */
    for (int i = 0; i < N_TEXT; i++)
        if (!seen[F_TEXT + i]) TRY(null_text(&cols->text[i]));
    for (int i = 0; i < N_GOLD; i++)
        if (!seen[F_GOLD + i]) {
            TRY(valid_push(&cols->gold[i].valid, 0));
            TRY(put_i32(&cols->gold[i].offsets, (int32_t)cols->gold[i].items.valid.n));
        }
    if (!seen[F_CONTEXT]) {
        TRY(valid_push(&cols->context.valid, 0));
        TRY(put_i32(&cols->context.offsets, (int32_t)cols->context.n_items));
    }
    cols->n++;
    return 0;
}

static int start_offsets(Columns *cols) {
    for (int i = 0; i < N_TEXT; i++) TRY(put_i32(&cols->text[i].offsets, 0));
    for (int i = 0; i < N_GOLD; i++) {
        TRY(put_i32(&cols->gold[i].offsets, 0));
        TRY(put_i32(&cols->gold[i].items.offsets, 0));
    }
    TRY(put_i32(&cols->context.offsets, 0));
    TRY(put_i32(&cols->context.id.offsets, 0));
    return put_i32(&cols->context.parent_id.offsets, 0);
}

/* Every line of the block; no line (its newline left out) longer than max_line bytes. */
static int parse_block(const unsigned char *data, size_t size, size_t max_line, Columns *cols) {
    if (size > (size_t)INT32_MAX) return BAD; /* offsets are 32-bit; no text decodes longer than it is written */
    TRY(start_offsets(cols));
    const unsigned char *p = data, *end = data + size;
    while (p < end) {
        const unsigned char *eol = memchr(p, '\n', (size_t)(end - p));
        const unsigned char *line_end = eol ? eol : end;
        if ((size_t)(line_end - p) > max_line) return BAD; /* as the rules count a record's bytes */
        Cursor c = {p, line_end};
        TRY(record(&c, cols));
        p = eol ? eol + 1 : end;
    }
    return 0;
}

static void free_strings(Strings *s) {
    free(s->valid.bits.data);
    free(s->offsets.data);
    free(s->data.data);
}

static void free_columns(Columns *cols) {
    for (int i = 0; i < N_TEXT; i++) free_strings(&cols->text[i]);
    for (int i = 0; i < N_GOLD; i++) {
        free(cols->gold[i].valid.bits.data);
        free(cols->gold[i].offsets.data);
        free_strings(&cols->gold[i].items);
    }
    free(cols->context.valid.bits.data);
    free(cols->context.offsets.data);
    free_strings(&cols->context.id);
    free_strings(&cols->context.parent_id);
    free(cols->context.score_valid.bits.data);
    free(cols->context.scores.data);
    free(cols->stack.data);
}

/* A buffer the parser filled, handed to Python without a copy: it owns the memory (freed with
 * it) and exposes it, read-only, through the buffer protocol, which pyarrow wraps
 * (pa.py_buffer); len() is its size in bytes. Copying every column into a bytes object cost a pass over them with the
 * GIL held, and as many fresh pages again. */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
} Owned;

static void owned_dealloc(Owned *self) {
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int owned_getbuffer(Owned *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->len, 1, flags);
}

static Py_ssize_t owned_length(Owned *self) { return self->len; }

static PyBufferProcs owned_as_buffer = {(getbufferproc)owned_getbuffer, NULL};
static PySequenceMethods owned_as_sequence = {.sq_length = (lenfunc)owned_length};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_case_columns.Owned",
    .tp_doc = "A column buffer of the parser's, read-only (the buffer protocol).",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
    .tp_as_sequence = &owned_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

/* The buffer's memory, now the Python object's (the Buf is left empty: free_columns skips it). */
static PyObject *handed_over(Buf *b) {
    if (b->len < b->cap) { /* give back what the doubling reserved beyond the end */
        char *data = realloc(b->data, b->len ? b->len : 1);
        if (data) b->data = data;
    } else if (!b->data && !(b->data = malloc(1))) { /* nothing put: an empty buffer, not a NULL one */
        return PyErr_NoMemory();
    }
    Owned *owned = PyObject_New(Owned, &OwnedType);
    if (!owned) return NULL;
    owned->data = b->data;
    owned->len = (Py_ssize_t)b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)owned;
}

/* (bitmap or None, null count): no bitmap when nothing is null, as Arrow writes it. */
static PyObject *validity(Valid *v) {
    if (v->nulls == 0) return Py_BuildValue("(OL)", Py_None, (long long)0);
    return Py_BuildValue("(NL)", handed_over(&v->bits), (long long)v->nulls);
}

static PyObject *strings_tuple(Strings *s) {
    return Py_BuildValue("(NNN)", validity(&s->valid), handed_over(&s->offsets), handed_over(&s->data));
}

static PyObject *columns_tuple(Columns *cols) {
    PyObject *text = PyTuple_New(N_TEXT), *gold = PyTuple_New(N_GOLD);
    if (!text || !gold) goto fail;
    for (int i = 0; i < N_TEXT; i++) {
        PyObject *column = strings_tuple(&cols->text[i]);
        if (!column) goto fail;
        PyTuple_SET_ITEM(text, i, column);
    }
    for (int i = 0; i < N_GOLD; i++) {
        StringLists *g = &cols->gold[i];
        PyObject *column = Py_BuildValue("(NNN)", validity(&g->valid), handed_over(&g->offsets), strings_tuple(&g->items));
        if (!column) goto fail;
        PyTuple_SET_ITEM(gold, i, column);
    }
    Items *it = &cols->context;
    return Py_BuildValue("(LNN(NNLNN(NN)))", (long long)cols->n, text, gold, validity(&it->valid),
                         handed_over(&it->offsets), (long long)it->n_items, strings_tuple(&it->id),
                         strings_tuple(&it->parent_id), validity(&it->score_valid), handed_over(&it->scores));
fail:
    Py_XDECREF(text);
    Py_XDECREF(gold);
    return NULL;
}

static PyObject *parse(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t max_line;
    if (!PyArg_ParseTuple(args, "y*n", &view, &max_line)) return NULL;
    Columns cols;
    memset(&cols, 0, sizeof cols);
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = parse_block(view.buf, (size_t)view.len, (size_t)max_line, &cols);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (status == NOMEM) {
        PyErr_NoMemory();
    } else if (status == BAD) {
        result = Py_NewRef(Py_None);
    } else {
        result = columns_tuple(&cols);
    }
    free_columns(&cols);
    return result;
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS,
     "parse(block, max_line) -> the columns of the block's records, or None when a line is not "
     "one clean record (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_case_columns",
    .m_doc = "Strict columns of cases.jsonl lines (flows/sources/_case_columns.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__case_columns(void) {
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!c_locale) return PyErr_NoMemory();
    if (PyType_Ready(&OwnedType) < 0) return NULL;
    return PyModule_Create(&module);
}
