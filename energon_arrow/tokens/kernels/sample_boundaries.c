/* GPT sample boundaries in one pass over the document lengths (in document-index order).
 *
 * Boundary k (k = 1 .. num_samples) sits at token-stream position k * L; it is placed in the first document whose
 * running end reaches k * L + extra (so zero-length documents never hold one) and recorded as (document-index
 * position, token offset into that document). Boundaries past the data (a kept partial tail) are clamped to the
 * last document at its length - extra. Row 0 is (0, 0).
 */
#include "kernels.h"
#include <stdint.h>

#define DEFINE_FILL(NAME, OUT)                                                                          \
    static void NAME(const char *lengths, Py_ssize_t stride, int64_t n, int64_t seq, int64_t extra,     \
                     int64_t samples, OUT *out) {                                                       \
        int64_t k = 1, end = 0;                                                                         \
        out[0] = 0;                                                                                     \
        out[1] = 0;                                                                                     \
        for (int64_t p = 0; p < n && k <= samples; p++) {                                               \
            int64_t len = *(const int32_t *)(lengths + p * stride);                                     \
            end += len;                                                                                 \
            while (k <= samples && end >= k * seq + extra) {                                            \
                out[2 * k] = (OUT)p;                                                                    \
                out[2 * k + 1] = (OUT)(k * seq - (end - len));                                          \
                k++;                                                                                    \
            }                                                                                           \
        }                                                                                               \
        int64_t last = n ? *(const int32_t *)(lengths + (n - 1) * stride) : 0;                          \
        for (; k <= samples; k++) {                                                                     \
            out[2 * k] = (OUT)(n - 1);                                                                  \
            out[2 * k + 1] = (OUT)(last - extra);                                                       \
        }                                                                                               \
    }

DEFINE_FILL(fill32, int32_t)
DEFINE_FILL(fill64, int64_t)

PyObject *sample_boundaries(PyObject *self, PyObject *args) {
    PyObject *lengths_obj;
    Py_buffer out, lengths;
    long long seq, extra;
    if (!PyArg_ParseTuple(args, "OLLw*", &lengths_obj, &seq, &extra, &out)) return NULL;
    if (PyObject_GetBuffer(lengths_obj, &lengths, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&out);
        return NULL;
    }
    PyObject *result = NULL;
    int64_t rows = out.len / (2 * (out.itemsize ? out.itemsize : 1));
    if (lengths.ndim != 1 || lengths.itemsize != 4 || (out.itemsize != 4 && out.itemsize != 8) || rows < 1 ||
        !PyBuffer_IsContiguous(&out, 'C') || seq < 1) {
        PyErr_SetString(PyExc_ValueError,
                        "sample_boundaries: lengths must be 1-D int32, out a contiguous [n + 1, 2] int32/int64");
    } else {
        int64_t n = lengths.shape[0];
        Py_BEGIN_ALLOW_THREADS;
        if (out.itemsize == 4)
            fill32(lengths.buf, lengths.strides[0], n, seq, extra, rows - 1, out.buf);
        else
            fill64(lengths.buf, lengths.strides[0], n, seq, extra, rows - 1, out.buf);
        Py_END_ALLOW_THREADS;
        Py_INCREF(Py_None);
        result = Py_None;
    }
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&out);
    return result;
}
