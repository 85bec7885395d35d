/* In-place Fisher-Yates shuffle that reproduces numpy's legacy `RandomState.shuffle` bit for bit, faster.
 *
 * numpy draws, for i = n-1 down to 1, j uniformly from [0, i] by masked rejection sampling on 32-bit MT19937
 * outputs (mask = smallest 2^k - 1 >= i) and swaps items i and j. The sequence of j values depends only on the
 * generator, never on the data, so this module draws the j values of a block of swaps first (without a branch per
 * rejection, see draw_block) and then swaps, prefetching the cache lines a few swaps ahead: the swaps (same order,
 * same values) mostly hit the cache instead of waiting on memory, which bounds numpy's loop once the array
 * outgrows the caches, and the draws run free of the mispredicted rejection branch that bounds it before.
 *
 * The generator state travels in and out as numpy's own legacy state (624 uint32 words and a position), so the
 * caller's RandomState continues exactly where numpy's shuffle would have left it. Arrays of 2^32 items or more
 * (where numpy switches to 64-bit draws) are left to numpy by the Python wrapper.
 */
#include "kernels.h"
#include <stdint.h>

#define MT_N 624
#define MT_M 397
#define AHEAD 16 /* swaps whose target cache lines are requested in advance */

typedef struct {
    uint32_t *key;
    int pos;
} mt_state;

static inline uint32_t mt_twist(uint32_t upper, uint32_t lower, uint32_t far) {
    uint32_t y = (upper & 0x80000000u) | (lower & 0x7fffffffu);
    return far ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
}

static void mt_regenerate(uint32_t *key) {
    /* One full MT19937 twist over the 624-word state (split so no index wraps inside a loop). */
    int k = 0;
    for (; k < MT_N - MT_M; k++) key[k] = mt_twist(key[k], key[k + 1], key[k + MT_M]);
    for (; k < MT_N - 1; k++) key[k] = mt_twist(key[k], key[k + 1], key[k + MT_M - MT_N]);
    key[MT_N - 1] = mt_twist(key[MT_N - 1], key[0], key[MT_M - 1]);
}

static inline uint32_t temper(uint32_t y) {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* j for i = hi, hi-1, ..., lo (hi < 2^32) into js[i - lo]: numpy's draw for max = i is "next 32-bit output AND
 * (smallest 2^k - 1 >= i), rejected while > i". Each output is tested against the current i, which moves down
 * on acceptance only: the same outputs are consumed in the same order, without a mispredicted branch per
 * rejection (a rejected value is written and then overwritten). */
static void draw_block(mt_state *s, uint32_t *js, uint64_t hi, uint64_t lo) {
    uint32_t *key = s->key;
    int pos = s->pos;
    uint64_t i = hi;
    while (i >= lo) {
        if (pos >= MT_N) {
            mt_regenerate(key);
            pos = 0;
        }
        uint32_t v = temper(key[pos++]) & (0xffffffffu >> __builtin_clz((uint32_t)i));
        js[i - lo] = v;
        i -= (v <= i);
    }
    s->pos = pos;
}

#define BLOCK 512 /* j values drawn per batch */

/* Swap items i and j of `data` for i = n-1 down to 1; the cache line of item j is requested AHEAD swaps early. */
#define DEFINE_SHUFFLE(NAME, TYPE)                                                 \
    static void NAME(TYPE *data, uint64_t n, mt_state *s) {                        \
        uint32_t js[BLOCK];                                                        \
        uint64_t hi = n - 1;                                                       \
        while (hi >= 1) {                                                          \
            uint64_t lo = hi >= BLOCK ? hi - BLOCK + 1 : 1;                        \
            draw_block(s, js, hi, lo);                                             \
            for (uint64_t k = hi; k >= lo && hi - k < AHEAD; k--)                  \
                __builtin_prefetch(data + js[k - lo], 1, 0);                       \
            for (uint64_t i = hi; i >= lo; i--) {                                  \
                if (i >= lo + AHEAD) __builtin_prefetch(data + js[i - AHEAD - lo], 1, 0); \
                uint32_t j = js[i - lo];                                           \
                TYPE t = data[j];                                                  \
                data[j] = data[i];                                                 \
                data[i] = t;                                                       \
            }                                                                      \
            hi = lo - 1;                                                           \
        }                                                                          \
    }

DEFINE_SHUFFLE(shuffle32, uint32_t)
DEFINE_SHUFFLE(shuffle64, uint64_t)

PyObject *legacy_shuffle(PyObject *self, PyObject *args) {
    Py_buffer data, key;
    int pos;
    if (!PyArg_ParseTuple(args, "w*w*i", &data, &key, &pos)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t item = data.itemsize;
    if (key.len != MT_N * 4 || pos < 0 || pos > MT_N) {
        PyErr_SetString(PyExc_ValueError, "key must be 624 uint32 words and 0 <= pos <= 624");
    } else if (!PyBuffer_IsContiguous(&data, 'C') || (item != 4 && item != 8) || data.len % item) {
        PyErr_SetString(PyExc_ValueError, "data must be a contiguous buffer of 4- or 8-byte items");
    } else if ((uint64_t)(data.len / item) > 0xffffffffull) {
        PyErr_SetString(PyExc_ValueError, "arrays of 2**32 items or more need 64-bit draws: use numpy");
    } else {
        uint64_t n = (uint64_t)(data.len / item);
        mt_state s = {(uint32_t *)key.buf, pos};
        if (n > 1) {
            Py_BEGIN_ALLOW_THREADS;
            if (item == 4)
                shuffle32((uint32_t *)data.buf, n, &s);
            else
                shuffle64((uint64_t *)data.buf, n, &s);
            Py_END_ALLOW_THREADS;
        }
        result = PyLong_FromLong(s.pos);
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&key);
    return result;
}
