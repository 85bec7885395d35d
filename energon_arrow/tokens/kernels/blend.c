/* Megatron's greedy blending walk, one step per sample: sample k goes to the dataset with the largest error
 * w_i * max(k, 1) - count_i (float64, the first dataset wins ties), and its dataset_sample_index is that dataset's
 * count before the step. Built with -ffp-contract=off so every product and difference rounds as in Megatron.
 */
#include "kernels.h"
#include <stdint.h>
#include <stdlib.h>

PyObject *blending_indices(PyObject *self, PyObject *args) {
    Py_buffer weights, dataset_index, sample_index;
    if (!PyArg_ParseTuple(args, "y*w*w*", &weights, &dataset_index, &sample_index)) return NULL;
    PyObject *result = NULL;
    int64_t d = weights.len / 8, size = dataset_index.len / 2;
    int64_t *counts = NULL;
    if (weights.itemsize != 8 || dataset_index.itemsize != 2 || sample_index.itemsize != 8 || d < 1 ||
        d > 32767 || sample_index.len / 8 != size) {
        PyErr_SetString(PyExc_ValueError,
                        "blending_indices: weights float64 (1..32767), outputs int16 and int64 of one length");
    } else if (!(counts = calloc((size_t)d, sizeof(int64_t)))) {
        PyErr_NoMemory();
    } else {
        const double *w = weights.buf;
        int16_t *which = dataset_index.buf;
        int64_t *before = sample_index.buf;
        Py_BEGIN_ALLOW_THREADS;
        for (int64_t k = 0; k < size; k++) {
            double x = k > 1 ? (double)k : 1.0;
            int64_t best = 0;
            double best_error = w[0] * x - (double)counts[0];
            for (int64_t i = 1; i < d; i++) {
                double error = w[i] * x - (double)counts[i];
                if (error > best_error) {
                    best_error = error;
                    best = i;
                }
            }
            which[k] = (int16_t)best;
            before[k] = counts[best]++;
        }
        Py_END_ALLOW_THREADS;
        free(counts);
        Py_INCREF(Py_None);
        result = Py_None;
    }
    PyBuffer_Release(&weights);
    PyBuffer_Release(&dataset_index);
    PyBuffer_Release(&sample_index);
    return result;
}
