/* The module energon_arrow.index._sqlite_pages: SQLite b-trees written bottom-up, page by page, from rows that
 * arrive in key order (see energon_arrow/index/sqlite_pages.py for how index.sqlite uses it).
 *
 * A writer owns an open file descriptor and up to MAX_TREES trees. Each tree is a table b-tree (cells keyed by
 * rowid) or an index b-tree (cells are records ending with the rowid). `add(writer, tree, columns, rowid_base,
 * order)` encodes one record per row (SQLite record format, file format 4) and appends it to the tree's leaf
 * level; full pages are written at once to new page numbers and their separators go up a level. Every level keeps
 * its last complete page until the next page has a cell, so that at `finish` no page is left empty: an interior
 * or index leaf page that would be empty borrows the last cell of the page before it. Each tree's top page is
 * written at its root page number (the page SQLite allocated when it ran the CREATE statements). Payloads larger
 * than a page allows go to overflow pages exactly as SQLite lays them out.
 *
 * Columns are tuples: ("i", int64 array), ("c", int) a constant, ("t", offsets, data) an Arrow string column (int32 or int64 offsets into data). Index trees append the rowid (rowid_base + row) as the
 * last field; table trees use it as the cell key. `order` (int64 array or None) lists the rows in tree order.
 * The GIL is released while the rows are encoded and the pages written. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TREES 8
#define MAX_LEVELS 32
#define MAX_COLUMNS 8

#define LEAF_TABLE 0x0D
#define INTERIOR_TABLE 0x05
#define LEAF_INDEX 0x0A
#define INTERIOR_INDEX 0x02

typedef struct {
    uint8_t *buf;   /* page_size bytes */
    int cells;      /* number of cells */
    int content;    /* offset of the first cell byte; cells grow down from the end of the page */
    int last_len;   /* size of the cell added last */
    uint32_t right; /* interior pages: the right-most child */
} Page;

typedef struct {
    Page cur, prev;
    int has_prev;
    uint8_t *sep;   /* index trees: the separator cell between prev and cur */
    int sep_len, sep_cap;
    int64_t sep_key;   /* table trees: the largest rowid below prev */
    int64_t cur_max;   /* table leaves: the largest rowid in cur */
    int64_t written;   /* pages of this level written so far */
} Level;

typedef struct {
    int is_index;
    int levels; /* levels in use */
    Level level[MAX_LEVELS];
} Tree;

typedef struct {
    int fd;
    int page_size;
    uint32_t next_page; /* the next free page number (never the lock-byte page) */
    uint32_t lock_page; /* SQLite's lock-byte page (the one holding byte 2**30): never used */
    int max_local, min_local;
    int ntrees;
    Tree tree[MAX_TREES];
    uint8_t *cell; /* scratch for one cell */
    size_t cell_cap;
    int error; /* errno of a failed write */
} Writer;

/* ---- encoding ---- */

static int varint_len(uint64_t v) {
    int n = 1;
    if (v > 0x00ffffffffffffffULL) return 9;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static int put_varint(uint8_t *p, uint64_t v) {
    uint8_t tmp[10];
    int n = 0;
    if (v > 0x00ffffffffffffffULL) {
        p[8] = (uint8_t)v;
        v >>= 8;
        for (int i = 7; i >= 0; i--) {
            p[i] = (uint8_t)((v & 0x7f) | 0x80);
            v >>= 7;
        }
        return 9;
    }
    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | 0x80);
        v >>= 7;
    } while (v != 0);
    tmp[0] &= 0x7f;
    for (int i = 0; i < n; i++) p[i] = tmp[n - 1 - i];
    return n;
}

static uint64_t get_varint(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = (v << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) return v;
    }
    return (v << 8) | p[8];
}

static void put_u16(uint8_t *p, int v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* serial type and body size of an integer (file format 4: 0 and 1 have types of their own) */
static int int_type(int64_t v, int *size) {
    static const int sizes[7] = {0, 1, 2, 3, 4, 6, 8};
    int t;
    if (v == 0 || v == 1) {
        *size = 0;
        return 8 + (int)v;
    }
    uint64_t u = v < 0 ? ~(uint64_t)v : (uint64_t)v;
    if (u <= 127) t = 1;
    else if (u <= 32767) t = 2;
    else if (u <= 8388607) t = 3;
    else if (u <= 2147483647) t = 4;
    else if (u <= 140737488355327LL) t = 5;
    else t = 6;
    *size = sizes[t];
    return t;
}

static void put_int(uint8_t *p, int64_t v, int size) {
    uint64_t u = (uint64_t)v;
    for (int i = size - 1; i >= 0; i--) {
        p[i] = (uint8_t)u;
        u >>= 8;
    }
}

typedef struct {
    char kind; /* 'i' int64 column, 'c' constant, 't' text, 'r' the rowid */
    const int64_t *ints;
    int64_t constant;
    const void *offsets;
    int wide_offsets;
    const uint8_t *data;
    Py_ssize_t length; /* rows ('i', 't') */
} Column;

/* the value of an integer column at row r */
static int64_t column_int(const Column *c, int64_t r, int64_t rowid) {
    switch (c->kind) {
    case 'i': return c->ints[r];
    case 'c': return c->constant;
    default: return rowid;
    }
}

static void column_text(const Column *c, int64_t r, const uint8_t **p, int64_t *n) {
    int64_t a, b;
    if (c->wide_offsets) {
        a = ((const int64_t *)c->offsets)[r];
        b = ((const int64_t *)c->offsets)[r + 1];
    } else {
        a = ((const int32_t *)c->offsets)[r];
        b = ((const int32_t *)c->offsets)[r + 1];
    }
    *p = c->data + a;
    *n = b - a;
}

/* ---- pages ---- */

static int header_size(int leaf) { return leaf ? 8 : 12; }

static void page_reset(Page *pg, int page_size) {
    memset(pg->buf, 0, (size_t)page_size);
    pg->cells = 0;
    pg->content = page_size;
    pg->last_len = 0;
    pg->right = 0;
}

static int page_fits(const Writer *w, const Page *pg, int leaf, int len) {
    int used = header_size(leaf) + 2 * (pg->cells + 1) + (w->page_size - pg->content) + len;
    return used <= w->page_size;
}

static void page_append(Page *pg, int leaf, const uint8_t *cell, int len) {
    pg->content -= len;
    memcpy(pg->buf + pg->content, cell, (size_t)len);
    put_u16(pg->buf + header_size(leaf) + 2 * pg->cells, pg->content);
    pg->cells++;
    pg->last_len = len;
}

/* remove the cell added last (one removal at most after an append) into out; returns its size */
static int page_pop(Page *pg, uint8_t *out) {
    int len = pg->last_len;
    memcpy(out, pg->buf + pg->content, (size_t)len);
    pg->content += len;
    pg->cells--;
    pg->last_len = 0;
    return len;
}

static int write_at(Writer *w, const uint8_t *buf, uint32_t pgno) {
    off_t at = (off_t)(pgno - 1) * w->page_size;
    size_t done = 0;
    while (done < (size_t)w->page_size) {
        ssize_t n = pwrite(w->fd, buf + done, (size_t)w->page_size - done, at + (off_t)done);
        if (n < 0) {
            if (errno == EINTR) continue;
            w->error = errno;
            return -1;
        }
        done += (size_t)n;
    }
    return 0;
}

/* the next page number of the file (0: SQLite's largest page count is reached). The page holding byte offset
 * 2**30 is SQLite's lock-byte page, which no b-tree may use: next_page steps over it, so that it also predicts the
 * page an overflow chain gets next. */
static uint32_t alloc_page(Writer *w) {
    if (w->next_page >= 0xfffffffeU) {
        w->error = EFBIG;
        return 0;
    }
    uint32_t pgno = w->next_page++;
    if (w->next_page == w->lock_page) w->next_page++;
    return pgno;
}

static int page_write(Writer *w, Page *pg, int flag, uint32_t pgno) {
    uint8_t *h = pg->buf;
    int leaf = flag == LEAF_TABLE || flag == LEAF_INDEX;
    h[0] = (uint8_t)flag;
    put_u16(h + 1, 0);
    put_u16(h + 3, pg->cells);
    put_u16(h + 5, pg->content == 65536 ? 0 : pg->content);
    h[7] = 0;
    if (!leaf) put_u32(h + 8, pg->right);
    return write_at(w, pg->buf, pgno);
}

static int level_flag(const Tree *t, int lvl) {
    if (t->is_index) return lvl == 0 ? LEAF_INDEX : INTERIOR_INDEX;
    return lvl == 0 ? LEAF_TABLE : INTERIOR_TABLE;
}

static int level_open(Writer *w, Tree *t, int lvl) {
    if (lvl >= MAX_LEVELS) {
        w->error = EFBIG;
        return -1;
    }
    while (t->levels <= lvl) {
        Level *L = &t->level[t->levels];
        memset(L, 0, sizeof(*L));
        L->cur.buf = malloc((size_t)w->page_size);
        L->prev.buf = malloc((size_t)w->page_size);
        L->sep_cap = w->page_size;
        L->sep = malloc((size_t)L->sep_cap);
        if (!L->cur.buf || !L->prev.buf || !L->sep) {
            w->error = ENOMEM;
            return -1;
        }
        page_reset(&L->cur, w->page_size);
        page_reset(&L->prev, w->page_size);
        t->levels++;
    }
    return 0;
}

static int level_add(Writer *w, Tree *t, int lvl, const uint8_t *cell, int len, uint32_t child,
                     const uint8_t *sep, int sep_len, int64_t key);

/* write the complete page before cur and send (its page number, separator) up a level */
static int flush_prev(Writer *w, Tree *t, int lvl) {
    Level *L = &t->level[lvl];
    if (!L->has_prev) return 0;
    uint32_t pgno = alloc_page(w);
    if (pgno == 0 || page_write(w, &L->prev, level_flag(t, lvl), pgno) < 0) return -1;
    L->has_prev = 0;
    L->written++;
    if (level_open(w, t, lvl + 1) < 0) return -1;
    /* the interior cell (child page number + separator), kept apart: the separator may travel on up */
    int n = 4 + (t->is_index ? L->sep_len : varint_len((uint64_t)L->sep_key));
    uint8_t *copy = malloc((size_t)n);
    if (!copy) {
        w->error = ENOMEM;
        return -1;
    }
    put_u32(copy, pgno);
    if (t->is_index) memcpy(copy + 4, L->sep, (size_t)L->sep_len);
    else put_varint(copy + 4, (uint64_t)L->sep_key);
    int rc = level_add(w, t, lvl + 1, copy, n, pgno, copy + 4, n - 4, L->sep_key);
    free(copy);
    return rc;
}

static int keep_sep(Writer *w, Level *L, const uint8_t *sep, int len) {
    if (len > L->sep_cap) {
        uint8_t *grown = realloc(L->sep, (size_t)len);
        if (!grown) {
            w->error = ENOMEM;
            return -1;
        }
        L->sep = grown;
        L->sep_cap = len;
    }
    memcpy(L->sep, sep, (size_t)len);
    L->sep_len = len;
    return 0;
}

/* move cur to prev (cur is complete) and start an empty cur */
static void rotate(Writer *w, Level *L) {
    Page tmp = L->prev;
    L->prev = L->cur;
    L->cur = tmp;
    page_reset(&L->cur, w->page_size);
    L->has_prev = 1;
}

/* Add one cell to a level. Leaves: `cell` (table leaves: `key` is its rowid). Interior levels: `cell` is the
 * interior cell for (child, separator); `sep` / `key` is that separator, which goes up instead if the cell does
 * not fit (the page then ends with `child` as its right-most pointer). */
static int level_add(Writer *w, Tree *t, int lvl, const uint8_t *cell, int len, uint32_t child,
                     const uint8_t *sep, int sep_len, int64_t key) {
    Level *L = &t->level[lvl];
    int leaf = lvl == 0;
    if (!page_fits(w, &L->cur, leaf, len)) {
        if (leaf && !t->is_index) { /* the cell starts the next page; the page ends at its largest rowid */
            L->sep_key = L->cur_max;
            rotate(w, L);
        } else if (leaf) { /* the cell itself separates this page from the next */
            if (keep_sep(w, L, cell, len) < 0) return -1;
            rotate(w, L);
            return 0;
        } else {
            L->cur.right = child;
            if (t->is_index) {
                if (keep_sep(w, L, sep, sep_len) < 0) return -1;
            } else {
                L->sep_key = key;
            }
            rotate(w, L);
            return 0;
        }
    }
    page_append(&L->cur, leaf, cell, len);
    if (leaf && !t->is_index) L->cur_max = key;
    return flush_prev(w, t, lvl);
}

/* the last page of a level (and of those above): `final_child` is the right-most child of interior levels */
static int level_finish(Writer *w, Tree *t, int lvl, uint32_t final_child, uint32_t root) {
    Level *L = &t->level[lvl];
    int leaf = lvl == 0;
    if (!leaf) L->cur.right = final_child;
    if (L->cur.cells == 0 && L->has_prev) {
        /* borrow the last cell of prev: it becomes the separator, and the old separator moves into cur */
        uint8_t *last = malloc((size_t)w->page_size);
        if (!last) {
            w->error = ENOMEM;
            return -1;
        }
        int n = page_pop(&L->prev, last), rc = 0;
        if (leaf) { /* index leaves (table leaves never leave cur empty) */
            page_append(&L->cur, 1, L->sep, L->sep_len);
            rc = keep_sep(w, L, last, n);
        } else {
            uint8_t *moved = malloc((size_t)L->sep_len + 13);
            if (!moved) {
                free(last);
                w->error = ENOMEM;
                return -1;
            }
            int m;
            put_u32(moved, L->prev.right);
            if (t->is_index) {
                memcpy(moved + 4, L->sep, (size_t)L->sep_len);
                m = 4 + L->sep_len;
            } else {
                m = 4 + put_varint(moved + 4, (uint64_t)L->sep_key);
            }
            page_append(&L->cur, 0, moved, m);
            free(moved);
            L->prev.right = get_u32(last);
            if (t->is_index) rc = keep_sep(w, L, last + 4, n - 4);
            else L->sep_key = (int64_t)get_varint(last + 4);
        }
        free(last);
        if (rc < 0) return -1;
    }
    if (flush_prev(w, t, lvl) < 0) return -1;
    if (L->written == 0) return page_write(w, &L->cur, level_flag(t, lvl), root);
    uint32_t pgno = alloc_page(w);
    if (pgno == 0 || page_write(w, &L->cur, level_flag(t, lvl), pgno) < 0) return -1;
    return level_finish(w, t, lvl + 1, pgno, root);
}

/* ---- cells ---- */

static int ensure_cell(Writer *w, size_t need) {
    if (need <= w->cell_cap) return 0;
    size_t cap = w->cell_cap * 2 > need ? w->cell_cap * 2 : need;
    uint8_t *grown = realloc(w->cell, cap);
    if (!grown) {
        w->error = ENOMEM;
        return -1;
    }
    w->cell = grown;
    w->cell_cap = cap;
    return 0;
}

/* Turn the payload at w->cell + at (size p) into a cell in place: the bytes beyond the local part go to overflow
 * pages, followed by the 4-byte number of the first one. Returns the cell size. */
static int64_t spill(Writer *w, size_t at, int64_t p, int max_local) {
    if (p <= max_local) return (int64_t)at + p;
    int64_t usable = w->page_size - 4;
    int64_t local = w->min_local + (p - w->min_local) % usable;
    if (local > max_local) local = w->min_local;
    uint8_t *page = malloc((size_t)w->page_size);
    if (!page) {
        w->error = ENOMEM;
        return -1;
    }
    const uint8_t *rest = w->cell + at + local;
    int64_t left = p - local;
    uint32_t first = w->next_page;
    while (left > 0) {
        int64_t n = left < usable ? left : usable;
        uint32_t pgno = alloc_page(w);
        memset(page, 0, (size_t)w->page_size);
        put_u32(page, left > n ? w->next_page : 0);
        memcpy(page + 4, rest, (size_t)n);
        if (pgno == 0 || write_at(w, page, pgno) < 0) {
            free(page);
            return -1;
        }
        rest += n;
        left -= n;
    }
    free(page);
    put_u32(w->cell + at + local, first);
    return (int64_t)at + local + 4;
}

/* encode row r as a cell of tree t into w->cell; returns its size (-1: error) */
static int64_t encode_cell(Writer *w, const Tree *t, const Column *cols, int ncols, int64_t r, int64_t rowid) {
    int types[MAX_COLUMNS + 1], sizes[MAX_COLUMNS + 1];
    const uint8_t *text[MAX_COLUMNS + 1];
    int64_t header = 0, body = 0;
    for (int j = 0; j < ncols; j++) {
        if (cols[j].kind == 't') {
            int64_t n;
            column_text(&cols[j], r, &text[j], &n);
            if (n > 0x3fffffffLL) {
                w->error = EFBIG;
                return -1;
            }
            types[j] = (int)(13 + 2 * n);
            sizes[j] = (int)n;
        } else {
            types[j] = int_type(column_int(&cols[j], r, rowid), &sizes[j]);
        }
        header += varint_len((uint64_t)types[j]);
        body += sizes[j];
    }
    int hlen = 1;
    while (varint_len((uint64_t)(header + hlen)) != hlen) hlen++;
    int64_t payload = header + hlen + body;
    if (ensure_cell(w, (size_t)payload + 32) < 0) return -1;
    uint8_t *p = w->cell;
    p += put_varint(p, (uint64_t)payload);
    if (!t->is_index) p += put_varint(p, (uint64_t)rowid);
    size_t at = (size_t)(p - w->cell);
    p += put_varint(p, (uint64_t)(header + hlen));
    for (int j = 0; j < ncols; j++) p += put_varint(p, (uint64_t)types[j]);
    for (int j = 0; j < ncols; j++) {
        if (cols[j].kind == 't') memcpy(p, text[j], (size_t)sizes[j]);
        else put_int(p, column_int(&cols[j], r, rowid), sizes[j]);
        p += sizes[j];
    }
    return spill(w, at, payload, t->is_index ? w->max_local : w->page_size - 35);
}

static int add_rows(Writer *w, Tree *t, const Column *cols, int ncols, int64_t rows, int64_t rowid_base,
                    const int64_t *order) {
    if (level_open(w, t, 0) < 0) return -1;
    for (int64_t i = 0; i < rows; i++) {
        int64_t r = order ? order[i] : i;
        int64_t rowid = rowid_base + r;
        int64_t len = encode_cell(w, t, cols, ncols, r, rowid);
        if (len < 0) return -1;
        /* the cell may be kept as a separator: level_add copies what it keeps */
        if (level_add(w, t, 0, w->cell, (int)len, 0, NULL, 0, rowid) < 0) return -1;
    }
    return 0;
}

/* ---- Python ---- */

static const char *CAPSULE = "energon_arrow.sqlite_pages";

static void writer_free(PyObject *capsule) {
    Writer *w = PyCapsule_GetPointer(capsule, CAPSULE);
    if (!w) return;
    for (int i = 0; i < w->ntrees; i++)
        for (int l = 0; l < w->tree[i].levels; l++) {
            free(w->tree[i].level[l].cur.buf);
            free(w->tree[i].level[l].prev.buf);
            free(w->tree[i].level[l].sep);
        }
    free(w->cell);
    free(w);
}

static Writer *get_writer(PyObject *capsule) { return PyCapsule_GetPointer(capsule, CAPSULE); }

static PyObject *raise_writer_error(Writer *w) {
    errno = w->error;
    w->error = 0;
    return PyErr_SetFromErrno(errno == ENOMEM ? PyExc_MemoryError : PyExc_OSError);
}

static PyObject *pages_open(PyObject *self, PyObject *args) {
    int fd, page_size;
    unsigned int next_page;
    PyObject *kinds;
    if (!PyArg_ParseTuple(args, "iiIO!", &fd, &page_size, &next_page, &PyBytes_Type, &kinds)) return NULL;
    if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1))) {
        PyErr_Format(PyExc_ValueError, "page size %d is not a power of two in 512..65536", page_size);
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(kinds);
    if (n < 1 || n > MAX_TREES || next_page < 2) {
        PyErr_SetString(PyExc_ValueError, "1..8 trees ('t' table, 'i' index) and a first free page > 1");
        return NULL;
    }
    Writer *w = calloc(1, sizeof(Writer));
    if (!w) return PyErr_NoMemory();
    w->fd = fd;
    w->page_size = page_size;
    w->lock_page = (uint32_t)(0x40000000U / (uint32_t)page_size) + 1;
    w->next_page = next_page == w->lock_page ? next_page + 1 : next_page;
    w->max_local = (page_size - 12) * 64 / 255 - 23;
    w->min_local = (page_size - 12) * 32 / 255 - 23;
    w->ntrees = (int)n;
    w->cell_cap = (size_t)page_size * 2;
    w->cell = malloc(w->cell_cap);
    PyObject *capsule = PyCapsule_New(w, CAPSULE, writer_free);
    if (!capsule) {
        free(w->cell);
        free(w);
        return NULL;
    }
    if (!w->cell) {
        Py_DECREF(capsule);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        char k = PyBytes_AS_STRING(kinds)[i];
        if (k != 't' && k != 'i') {
            Py_DECREF(capsule);
            PyErr_Format(PyExc_ValueError, "tree kind %c: use 't' (table) or 'i' (index)", k);
            return NULL;
        }
        w->tree[i].is_index = k == 'i';
    }
    return capsule;
}

/* parse one column tuple; buffers are appended to views (released by the caller) */
static int parse_column(PyObject *spec, Column *c, Py_buffer *views, int *nviews, Py_ssize_t *rows) {
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(spec, 0))) {
        PyErr_SetString(PyExc_TypeError, "a column is a tuple (kind, ...)");
        return -1;
    }
    const char *kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(spec, 0));
    if (!kind) return -1;
    memset(c, 0, sizeof(*c));
    c->kind = kind[0];
    Py_ssize_t size = PyTuple_GET_SIZE(spec);
    if (c->kind == 'c' && size == 2) {
        c->constant = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 1));
        return c->constant == -1 && PyErr_Occurred() ? -1 : 0;
    }
    if (c->kind == 'i' && size == 2) {
        Py_buffer *v = &views[(*nviews)];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(spec, 1), v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
        (*nviews)++;
        if (v->itemsize != 8 || (v->format[0] != 'q' && v->format[0] != 'l')) {
            PyErr_SetString(PyExc_TypeError, "an 'i' column must be a contiguous int64 array");
            return -1;
        }
        c->ints = v->buf;
        c->length = v->len / 8;
    } else if (c->kind == 't' && size == 3) {
        Py_buffer *o = &views[(*nviews)];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(spec, 1), o, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
        (*nviews)++;
        Py_buffer *d = &views[(*nviews)];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(spec, 2), d, PyBUF_SIMPLE) < 0) return -1;
        (*nviews)++;
        if (o->itemsize != 4 && o->itemsize != 8) {
            PyErr_SetString(PyExc_TypeError, "text offsets must be int32 or int64");
            return -1;
        }
        c->wide_offsets = o->itemsize == 8;
        c->offsets = o->buf;
        c->data = d->buf;
        c->length = o->len / o->itemsize - 1;
        if (c->length < 0) {
            PyErr_SetString(PyExc_ValueError, "text offsets are empty");
            return -1;
        }
        /* every row's bytes must lie inside data: offsets ascend from 0 or more to at most its length */
        int64_t before = 0;
        for (Py_ssize_t r = 0; r <= c->length; r++) {
            int64_t at = c->wide_offsets ? ((const int64_t *)o->buf)[r] : ((const int32_t *)o->buf)[r];
            if (at < before || at > d->len) {
                PyErr_Format(PyExc_ValueError, "text offset %lld at row %zd is out of range", (long long)at, r);
                return -1;
            }
            before = at;
        }
    } else {
        PyErr_Format(PyExc_TypeError, "unknown column %R", spec);
        return -1;
    }
    if (*rows >= 0 && c->length != *rows) {
        PyErr_SetString(PyExc_ValueError, "columns differ in length");
        return -1;
    }
    *rows = c->length;
    return 0;
}

static PyObject *pages_add(PyObject *self, PyObject *args) {
    PyObject *capsule, *columns, *order_obj;
    int tree;
    long long rowid_base;
    Py_ssize_t rows = -1;
    if (!PyArg_ParseTuple(args, "OiO!LO", &capsule, &tree, &PyTuple_Type, &columns, &rowid_base, &order_obj))
        return NULL;
    Writer *w = get_writer(capsule);
    if (!w) return NULL;
    if (tree < 0 || tree >= w->ntrees) {
        PyErr_Format(PyExc_IndexError, "tree %d of %d", tree, w->ntrees);
        return NULL;
    }
    Py_ssize_t ncols = PyTuple_GET_SIZE(columns);
    if (ncols < 1 || ncols > MAX_COLUMNS) {
        PyErr_SetString(PyExc_ValueError, "1..8 columns");
        return NULL;
    }
    Column cols[MAX_COLUMNS + 1];
    Py_buffer views[2 * MAX_COLUMNS + 1];
    int nviews = 0;
    PyObject *result = NULL;
    for (Py_ssize_t j = 0; j < ncols; j++)
        if (parse_column(PyTuple_GET_ITEM(columns, j), &cols[j], views, &nviews, &rows) < 0) goto done;
    if (rows < 0) {
        PyErr_SetString(PyExc_ValueError, "at least one column must have rows ('i' or 't')");
        goto done;
    }
    int total = (int)ncols;
    if (w->tree[tree].is_index) { /* the rowid ends every index record */
        memset(&cols[total], 0, sizeof(Column));
        cols[total++].kind = 'r';
    }
    const int64_t *order = NULL;
    if (order_obj != Py_None) {
        Py_buffer *v = &views[nviews];
        if (PyObject_GetBuffer(order_obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
        nviews++;
        if (v->itemsize != 8 || (v->format[0] != 'q' && v->format[0] != 'l') || v->len / 8 != rows) {
            PyErr_SetString(PyExc_ValueError, "order must be an int64 array with one entry per row");
            goto done;
        }
        order = v->buf;
        for (Py_ssize_t i = 0; i < rows; i++)
            if (order[i] < 0 || order[i] >= rows) {
                PyErr_Format(PyExc_IndexError, "order[%zd] = %lld is not a row", i, (long long)order[i]);
                goto done;
            }
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = add_rows(w, &w->tree[tree], cols, total, rows, rowid_base, order);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        raise_writer_error(w);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < nviews; i++) PyBuffer_Release(&views[i]);
    return result;
}

static PyObject *pages_finish(PyObject *self, PyObject *args) {
    PyObject *capsule, *roots;
    if (!PyArg_ParseTuple(args, "OO!", &capsule, &PyTuple_Type, &roots)) return NULL;
    Writer *w = get_writer(capsule);
    if (!w) return NULL;
    if (PyTuple_GET_SIZE(roots) != w->ntrees) {
        PyErr_SetString(PyExc_ValueError, "one root page number per tree");
        return NULL;
    }
    uint32_t root[MAX_TREES];
    for (int i = 0; i < w->ntrees; i++) {
        unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(roots, i));
        if (PyErr_Occurred()) return NULL;
        if (v < 2 || v >= w->next_page) {
            PyErr_Format(PyExc_ValueError, "root page %lu is not a reserved page", v);
            return NULL;
        }
        root[i] = (uint32_t)v;
    }
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < w->ntrees && rc == 0; i++) {
        rc = level_open(w, &w->tree[i], 0);
        if (rc == 0) rc = level_finish(w, &w->tree[i], 0, 0, root[i]);
    }
    Py_END_ALLOW_THREADS
    if (rc < 0) return raise_writer_error(w);
    uint32_t last = w->next_page - 1; /* the page count: the last page written (not a skipped lock-byte page) */
    return PyLong_FromUnsignedLong(last == w->lock_page ? last - 1 : last);
}

static PyMethodDef methods[] = {
    {"open", pages_open, METH_VARARGS,
     "open(fd, page_size, next_page, kinds) -> writer: trees of `kinds` (bytes, b't' table / b'i' index each), "
     "new pages written to `fd` from page number `next_page` on."},
    {"add", pages_add, METH_VARARGS,
     "add(writer, tree, columns, rowid_base, order): append one record per row (in `order`, int64 or None) to "
     "the tree; columns: ('i', int64 array), ('c', int) or ('t', offsets, data)."},
    {"finish", pages_finish, METH_VARARGS,
     "finish(writer, roots) -> pages: write the last pages, each tree's top page at its root page number "
     "(tuple); returns the page count of the file."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sqlite_pages", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sqlite_pages(void) { return PyModule_Create(&module); }
