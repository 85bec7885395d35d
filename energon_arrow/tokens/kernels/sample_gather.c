/* Copy the tokens of many GPT samples out of a memory-mapped .bin into one [B, width] buffer.
 *
 * Sample k spans the document-index positions sample_index[k][0] .. sample_index[k+1][0]: from token offset
 * sample_index[k][1] of the first document to offset sample_index[k+1][1] + extra of the last (whole documents
 * in between). Each piece is one memcpy; the GIL is released while copying. Every index is bounds-checked
 * first, so a corrupt index raises instead of reading outside the map (the caller then reports it precisely).
 */
#include "kernels.h"
#include <stdint.h>
#include <string.h>

typedef struct {
    const char *bin;
    int64_t bin_len;
    int item;
    const int64_t *pointers;
    const int32_t *sizes;
    int64_t num_sequences;
    const int32_t *doc_index;
    int64_t doc_len;
    const void *sample_index; /* [n + 1][2] of int32 or int64 */
    int wide;
    int64_t samples;
    int64_t extra;
} corpus;

static inline int64_t boundary(const corpus *c, int64_t k, int col) {
    return c->wide ? ((const int64_t *)c->sample_index)[2 * k + col]
                   : ((const int32_t *)c->sample_index)[2 * k + col];
}

/* Fill one row; returns the tokens written (< width: a short row), or -1 on an out-of-range index. */
static int64_t fill_row(const corpus *c, int64_t k, char *row, int64_t width) {
    if (k < 0 || k >= c->samples) return -1;
    int64_t p0 = boundary(c, k, 0), o0 = boundary(c, k, 1);
    int64_t p1 = boundary(c, k + 1, 0), o1 = boundary(c, k + 1, 1) + c->extra;
    if (p0 < 0 || p1 < p0 || p1 >= c->doc_len) return -1;
    int64_t written = 0;
    for (int64_t p = p0; p <= p1; p++) {
        int64_t seq = c->doc_index[p];
        if (seq < 0 || seq >= c->num_sequences) return -1;
        int64_t begin = p == p0 ? o0 : 0, end = p == p1 ? o1 : c->sizes[seq];
        int64_t at = c->pointers[seq];
        if (begin < 0 || end < begin || end > c->sizes[seq] || written + end - begin > width || at < 0 ||
            at + end * c->item > c->bin_len)
            return -1;
        memcpy(row + written * c->item, c->bin + at + begin * c->item, (size_t)((end - begin) * c->item));
        written += end - begin;
    }
    return written;
}

PyObject *gather_samples(PyObject *self, PyObject *args) {
    Py_buffer bin, pointers, sizes, doc_index, sample_index, ids, out;
    long long extra;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*Lw*", &bin, &pointers, &sizes, &doc_index, &sample_index, &ids,
                          &extra, &out))
        return NULL;
    PyObject *result = NULL;
    int64_t b = ids.len / 8;
    int wide = sample_index.itemsize == 8;
    if (pointers.itemsize != 8 || sizes.itemsize != 4 || doc_index.itemsize != 4 || ids.itemsize != 8 ||
        (sample_index.itemsize != 4 && sample_index.itemsize != 8) || pointers.len / 8 != sizes.len / 4 ||
        bin.itemsize < 1 || sample_index.len < 2 * sample_index.itemsize || b == 0 || out.len % b ||
        (out.len / b) % bin.itemsize) {
        PyErr_SetString(PyExc_ValueError, "gather_samples: unexpected array shapes or dtypes");
    } else {
        corpus c = {bin.buf, bin.len, (int)bin.itemsize, pointers.buf, sizes.buf, sizes.len / 4,
                    doc_index.buf, doc_index.len / 4, sample_index.buf, wide,
                    sample_index.len / (2 * sample_index.itemsize) - 1, extra};
        int64_t row_bytes = out.len / b, width = row_bytes / c.item, bad = -1, shortest = width;
        const int64_t *ks = ids.buf;
        Py_BEGIN_ALLOW_THREADS;
        for (int64_t r = 0; r < b; r++) {
            int64_t got = fill_row(&c, ks[r], (char *)out.buf + r * row_bytes, width);
            if (got < 0) {
                bad = r;
                break;
            }
            if (got < shortest) shortest = got;
        }
        Py_END_ALLOW_THREADS;
        if (bad >= 0)
            PyErr_Format(PyExc_IndexError, "gather_samples: sample %lld (row %lld) is out of range of the index",
                         (long long)ks[bad], (long long)bad);
        else
            result = PyLong_FromLongLong(shortest);
    }
    PyBuffer_Release(&bin);
    PyBuffer_Release(&pointers);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&doc_index);
    PyBuffer_Release(&sample_index);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&out);
    return result;
}
