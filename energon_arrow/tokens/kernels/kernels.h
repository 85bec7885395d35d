/* The compiled kernels of the token datasets, one file each; kernels.c makes them the module
 * energon_arrow.tokens._kernels. */
#ifndef ENERGON_ARROW_KERNELS_H
#define ENERGON_ARROW_KERNELS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *blending_indices(PyObject *self, PyObject *args);
PyObject *legacy_shuffle(PyObject *self, PyObject *args);
PyObject *sample_boundaries(PyObject *self, PyObject *args);
PyObject *gather_samples(PyObject *self, PyObject *args);

#endif
