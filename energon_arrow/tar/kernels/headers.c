/* The module energon_arrow.tar._headers: the plain-shard header walk of energon_arrow/tar/fastscan.py in one
 * sequential pass (see `scan_members_fast` there for the rules and for what it does when this walk declines).
 *
 * `walk(buffer)` follows the header chain of a whole tar held in memory from block 0: each header's type flag must
 * be a regular file ('0', '7') or a member without payload ('1'..'6'), its size field the usual "%011o\0" octal
 * text, its USTAR prefix field empty and its checksum field one of the usual forms ("%06o\0 ", "%07o\0") equal to
 * the unsigned byte sum. The walk stops at a block whose name and type flag bytes are NUL (that block must be all
 * zero), or at the end of the buffer when it ends exactly with the last payload. It returns
 * (starts, sizes, name_offsets, name_data, end_block) for the regular members (int64 byte offsets of their
 * headers and payload sizes, int32 offsets into the NUL-terminated names of their 100-byte name fields), or None
 * for anything else (the vectorised walk and then the general walk decide: other forms, extension headers, bad
 * input). Only header blocks are read; payloads are stepped over. The GIL is released during the walk. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 512

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_add(Buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *grown = realloc(b->data, cap);
        if (grown == NULL)
            return -1;
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* "%011o\0": eleven octal digits and a NUL */
static int plain_size(const uint8_t *h, int64_t *out) {
    int64_t v = 0;
    for (int k = 0; k < 11; k++) {
        uint8_t d = (uint8_t)(h[124 + k] - '0');
        if (d > 7)
            return 0;
        v = v * 8 + d;
    }
    if (h[135] != 0)
        return 0;
    *out = v;
    return 1;
}

/* the checksum field in its usual forms: "%06o\0" + any byte, or "%07o\0" */
static int plain_checksum(const uint8_t *f, int64_t *out) {
    int64_t v = 0;
    for (int k = 0; k < 6; k++) {
        if ((f[k] & 0xF8) != 0x30)
            return 0;
        v = v * 8 + (f[k] - '0');
    }
    if (f[6] == 0) {
        *out = v;
        return 1;
    }
    if ((f[6] & 0xF8) == 0x30 && f[7] == 0) {
        *out = v * 8 + (f[6] - '0');
        return 1;
    }
    return 0;
}

static int checksum_ok(const uint8_t *h) {
    int64_t stored, sum = 8 * 32;
    if (!plain_checksum(h + 148, &stored))
        return 0;
    for (int k = 0; k < BLOCK; k++)
        sum += h[k];
    for (int k = 148; k < 156; k++)
        sum -= h[k];
    return sum == stored;
}

/* 1: walked (outputs filled), 0: declined, -1: out of memory */
static int walk_headers(const uint8_t *data, int64_t size, Buf *starts, Buf *sizes, Buf *offsets, Buf *names,
                        int64_t *end_block) {
    int64_t nb = size / BLOCK, i = 0, headers = 0;
    int32_t name_end = 0;
    if (nb == 0 || data[0] == 0x1F)
        return 0;
    if (buf_add(offsets, &name_end, sizeof name_end) < 0)
        return -1;
    for (;;) {
        if (i >= nb) {
            if (i == nb && size == nb * BLOCK && headers > 0) {
                *end_block = nb;
                return 1;
            }
            return 0;
        }
        const uint8_t *h = data + i * BLOCK;
        uint8_t flag = h[156];
        if (flag == 0 && h[0] == 0)
            break;
        int regular = flag == '0' || flag == '7';
        int no_data = flag >= '1' && flag <= '6';
        int64_t member_size;
        if (!(regular || no_data) || !plain_size(h, &member_size) || h[345] != 0 || !checksum_ok(h))
            return 0;
        if (regular) {
            int64_t start = i * BLOCK;
            const uint8_t *nul = memchr(h, 0, 100);
            int32_t n = nul ? (int32_t)(nul - h) : 100;
            if (name_end > INT32_MAX - n) /* names beyond int32 offsets: the vectorised walk's job */
                return 0;
            name_end += n;
            if (buf_add(starts, &start, sizeof start) < 0 || buf_add(sizes, &member_size, sizeof member_size) < 0 ||
                buf_add(names, h, (size_t)n) < 0 || buf_add(offsets, &name_end, sizeof name_end) < 0)
                return -1;
        }
        headers++;
        i += no_data ? 1 : 1 + (member_size + BLOCK - 1) / BLOCK;
    }
    if (headers == 0)
        return 0;
    for (int k = 0; k < BLOCK; k++) /* the end-of-archive block is all zero */
        if (data[i * BLOCK + k] != 0)
            return 0;
    *end_block = i;
    return 1;
}

static PyObject *as_bytes(Buf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

static PyObject *py_walk(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    Buf starts = {0}, sizes = {0}, offsets = {0}, names = {0};
    int64_t end_block = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = walk_headers((const uint8_t *)view.buf, (int64_t)view.len, &starts, &sizes, &offsets, &names, &end_block);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *out = NULL;
    if (rc < 0)
        PyErr_NoMemory();
    else if (rc == 0)
        out = Py_NewRef(Py_None);
    else {
        PyObject *parts[4] = {as_bytes(&starts), as_bytes(&sizes), as_bytes(&offsets), as_bytes(&names)};
        if (parts[0] && parts[1] && parts[2] && parts[3])
            out = Py_BuildValue("(OOOOL)", parts[0], parts[1], parts[2], parts[3], (long long)end_block);
        for (int k = 0; k < 4; k++)
            Py_XDECREF(parts[k]);
    }
    free(starts.data);
    free(sizes.data);
    free(offsets.data);
    free(names.data);
    return out;
}

static PyMethodDef methods[] = {
    {"walk", py_walk, METH_VARARGS, "Header walk of a plain tar: (starts, sizes, name offsets, names, end block) or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_headers", NULL, -1, methods};

PyMODINIT_FUNC PyInit__headers(void) { return PyModule_Create(&module); }
