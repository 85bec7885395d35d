/* The module energon_arrow.tokens._kernels: the method table over the kernels of this folder. */
#include "kernels.h"

static PyMethodDef methods[] = {
    {"blending_indices", blending_indices, METH_VARARGS,
     "blending_indices(weights, dataset_index, dataset_sample_index): fill the int16 / int64 outputs with "
     "Megatron's greedy blend of normalised float64 `weights`."},
    {"legacy_shuffle", legacy_shuffle, METH_VARARGS,
     "legacy_shuffle(data, key, pos) -> pos: shuffle `data` (4- or 8-byte items) in place like numpy's "
     "RandomState.shuffle from MT19937 state (key: 624 uint32 words, updated in place; pos); returns the new pos."},
    {"sample_boundaries", sample_boundaries, METH_VARARGS,
     "sample_boundaries(lengths, sequence_length, extra, out): fill `out` ([num_samples + 1, 2], int32 or int64) "
     "with the (document-index position, offset) of every sample boundary over `lengths` (1-D int32, any "
     "stride)."},
    {"gather_samples", gather_samples, METH_VARARGS,
     "gather_samples(bin, pointers, sizes, document_index, sample_index, sample_ids, extra, out) -> shortest: "
     "copy samples `sample_ids` (int64) into the rows of `out` (C-contiguous [B, width], the .bin's dtype); "
     "returns the fewest tokens written to a row (< width: rows need padding). IndexError on a corrupt index."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
