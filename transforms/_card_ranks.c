/* The card rank of each retrieved item (SPEC 2.3), for transforms/rankings.py `retrieved_items`:
 * within a case, the rank among distinct cards of the first item of each card, 0 for a later
 * chunk of a card already seen. The items come as Arrow columns, grouped by case in rank order:
 * `rank` (int32, 1 where a case starts) and `card_id` (an Arrow string view array: 16-byte views,
 * a string of at most 12 bytes held in its view, a longer one in one of the data buffers).
 *
 * Each case's cards are looked up in an open-addressing table sized to twice its items, so a
 * case costs time linear in its items however long its list (a 300k-item TREC topic too); two
 * cards are the same card only when their bytes are equal. It is what Polars'
 * `is_first_distinct().over(case)` and a running count compute, without a hash table per case
 * group and a scatter back (a sixth of a batch's CPU); transforms/rankings.py keeps that form
 * where this module was not compiled, and tests/test_card_ranks.py holds the two to each other. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const unsigned char *data;
    int32_t len;
} Text;

/* The bytes of view `i`, checked to lie within its data buffer. */
static int view_text(const unsigned char *views, Py_ssize_t i, const Py_buffer *buffers, Py_ssize_t n_buffers,
                     Text *out) {
    const unsigned char *view = views + 16 * i;
    int32_t len, index, offset;
    memcpy(&len, view, 4);
    if (len < 0) return -1;
    if (len <= 12) {
        out->data = view + 4;
        out->len = len;
        return 0;
    }
    memcpy(&index, view + 8, 4);
    memcpy(&offset, view + 12, 4);
    if (index < 0 || index >= n_buffers || offset < 0 || (Py_ssize_t)offset + len > buffers[index].len) return -1;
    out->data = (const unsigned char *)buffers[index].buf + offset;
    out->len = len;
    return 0;
}

static uint64_t text_hash(Text t) { /* FNV-1a, then mixed: only to spread the table's slots */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int32_t i = 0; i < t.len; i++) h = (h ^ t.data[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

static int same_text(Text a, Text b) { return a.len == b.len && memcmp(a.data, b.data, (size_t)a.len) == 0; }

/* ranks: [start, end) of one case's items at a time, never more than `longest` (what the
 * scratch holds: `rank` is read again here, without the GIL, and a caller's thread could have
 * written to it since it was measured); -1 on a view out of bounds. */
static int rank_cards(const int32_t *rank, const unsigned char *views, const Py_buffer *buffers, Py_ssize_t n_buffers,
                      Py_ssize_t n, Py_ssize_t longest, int32_t *out, Text *texts, int32_t *table) {
    Py_ssize_t start = 0;
    while (start < n) {
        Py_ssize_t end = start + 1;
        while (end < n && end - start < longest && rank[end] != 1) end++;
        size_t slots = 16;
        while (slots < 2 * (size_t)(end - start)) slots *= 2;
        memset(table, 0xff, slots * sizeof *table); /* -1: empty */
        int32_t next = 1;
        for (Py_ssize_t i = start; i < end; i++) {
            if (view_text(views, i, buffers, n_buffers, &texts[i - start])) return -1;
            Text t = texts[i - start];
            size_t slot = (size_t)text_hash(t) & (slots - 1);
            out[i] = next;
            while (table[slot] >= 0) {
                if (same_text(texts[table[slot]], t)) {
                    out[i] = 0;
                    break;
                }
                slot = (slot + 1) & (slots - 1);
            }
            if (out[i]) {
                table[slot] = (int32_t)(i - start);
                next++;
            }
        }
        start = end;
    }
    return 0;
}

/* first_card_ranks(rank, views, data_buffers, out): `rank` int32 values, `views` the card ids'
 * views (16 bytes each, as many as ranks), `data_buffers` a sequence of their data buffers, `out`
 * a writable buffer of as many int32, filled with each item's card rank (0: a card seen before). */
static PyObject *first_card_ranks(PyObject *self, PyObject *args) {
    Py_buffer rank, views, out;
    PyObject *data;
    if (!PyArg_ParseTuple(args, "y*y*Ow*", &rank, &views, &data, &out)) return NULL;
    PyObject *result = NULL, *sequence = NULL;
    Py_buffer *buffers = NULL;
    Py_ssize_t n_buffers = 0, got = 0;
    Text *texts = NULL;
    int32_t *table = NULL;
    Py_ssize_t n = rank.len / 4;
    if (rank.len % 4 || views.len != 16 * n || out.len != 4 * n) {
        PyErr_SetString(PyExc_ValueError, "first_card_ranks: ranks, views and out must hold as many items");
        goto done;
    }
    if (n && ((const int32_t *)rank.buf)[0] != 1) {
        PyErr_SetString(PyExc_ValueError, "first_card_ranks: the first item must start a case (rank 1)");
        goto done;
    }
    sequence = PySequence_Fast(data, "first_card_ranks: data_buffers must be a sequence");
    if (!sequence) goto done;
    n_buffers = PySequence_Fast_GET_SIZE(sequence);
    buffers = PyMem_Calloc((size_t)n_buffers + 1, sizeof *buffers);
    if (!buffers) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n_buffers; got++)
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(sequence, got), &buffers[got], PyBUF_SIMPLE)) goto done;
    /* the longest case bounds the scratch: its texts and a table of twice as many slots */
    Py_ssize_t longest = 0, run = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        run = ((const int32_t *)rank.buf)[i] == 1 ? 1 : run + 1;
        if (run > longest) longest = run;
    }
    size_t slots = 16;
    while (slots < 2 * (size_t)longest) slots *= 2;
    texts = malloc(((size_t)longest + 1) * sizeof *texts);
    table = malloc(slots * sizeof *table);
    if (!texts || !table) {
        PyErr_NoMemory();
        goto done;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status = rank_cards(rank.buf, views.buf, buffers, n_buffers, n, longest, out.buf, texts, table);
    Py_END_ALLOW_THREADS;
    if (status) {
        PyErr_SetString(PyExc_ValueError, "first_card_ranks: a view points outside its data buffers");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&buffers[i]);
    PyMem_Free(buffers);
    free(texts);
    free(table);
    Py_XDECREF(sequence);
    PyBuffer_Release(&rank);
    PyBuffer_Release(&views);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"first_card_ranks", first_card_ranks, METH_VARARGS,
     "first_card_ranks(rank, views, data_buffers, out): each item's rank among its case's distinct cards, 0 for "
     "a card seen before in its case"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_card_ranks", NULL, -1, methods};

PyMODINIT_FUNC PyInit__card_ranks(void) { return PyModule_Create(&module); }
