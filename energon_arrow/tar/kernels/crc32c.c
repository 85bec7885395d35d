/* CRC32C (Castagnoli) of many byte ranges of one buffer in one call, with the GIL released: what prepare records
 * per part (energon_arrow/tar/crc.py). One Python call per part cost ~0.35 us each and held the GIL the download
 * threads need (a 64-shard S3 prepare lost ~20% of its throughput); here the per-range cost is a few ns.
 * Hardware CRC32 instructions (SSE4.2, checked at run time); without them `ranges` raises and crc.py uses the
 * crc32c package. Same values as crc32c.crc32c(data): initial value ~0, final complement. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define HAVE_X86 1

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t value, const uint8_t *p, int64_t n) {
    uint64_t c = ~value & 0xffffffffu;
    while (n > 0 && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

static int hardware(void) {
#ifdef HAVE_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
#else
    return 0;
#endif
}

static PyObject *py_ranges(PyObject *self, PyObject *args) {
    Py_buffer data, starts, sizes, out;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &data, &starts, &sizes, &out))
        return NULL;
    PyObject *result = NULL;
    int64_t n = starts.len / 8;
    if (!hardware())
        PyErr_SetString(PyExc_RuntimeError, "no CRC32 instructions on this CPU");
    else if (sizes.len != starts.len || out.len != n * 4)
        PyErr_SetString(PyExc_ValueError, "starts, sizes (int64) and out (uint32) must have one entry per range");
    else {
        const int64_t *lo = (const int64_t *)starts.buf, *len = (const int64_t *)sizes.buf;
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            if (lo[i] < 0 || len[i] < 0 || lo[i] > data.len || len[i] > data.len - lo[i])
                bad = 1;
        if (bad)
            PyErr_SetString(PyExc_ValueError, "a range lies outside the buffer");
        else {
#ifdef HAVE_X86
            uint32_t *crc = (uint32_t *)out.buf;
            const uint8_t *base = (const uint8_t *)data.buf;
            Py_BEGIN_ALLOW_THREADS
            for (int64_t i = 0; i < n; i++)
                crc[i] = crc_hw(0, base + lo[i], len[i]);
            Py_END_ALLOW_THREADS
#endif
            result = Py_NewRef(Py_None);
        }
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *py_hardware(PyObject *self, PyObject *args) { return PyBool_FromLong(hardware()); }

static PyMethodDef methods[] = {
    {"ranges", py_ranges, METH_VARARGS,
     "ranges(data, starts, sizes, out): out[i] = CRC32C of data[starts[i] : starts[i] + sizes[i]] (int64 starts and sizes, uint32 out)."},
    {"hardware", py_hardware, METH_NOARGS, "Whether this CPU has the CRC32 instructions `ranges` needs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_crc32c", NULL, -1, methods};

PyMODINIT_FUNC PyInit__crc32c(void) { return PyModule_Create(&module); }
