/* What the compiled modules of the package share (pegasos_stream/learners/_loops.c, pegasos_stream/parse/_parse.c,
 * pegasos_stream/io/_blocks.c): the checked buffers of numpy arrays, the buffers that grow as they fill and become
 * bytes objects, and the columns of a vocabulary. Each module compiles its own copy (everything here is static
 * inline); none of them calls another. */
#ifndef PEGASOS_STREAM_COMMON_H
#define PEGASOS_STREAM_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Inlined into each caller even at -O2: the loops over index arrays are written once, for int64 and int32
 * indices, and compiled for each (``wide`` a constant at every call). */
#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define ALWAYS_INLINE __forceinline
#else
#define ALWAYS_INLINE inline
#endif

/* A hint to load the cache line of an address about to be read (nothing where the compiler has no such hint). */
#if defined(__GNUC__)
#define PREFETCH(address) __builtin_prefetch(address)
#else
#define PREFETCH(address) ((void)(address))
#endif

/* The item types of the arrays: numpy's float64, int64, bool and int32, by buffer format character(s) and size;
 * IDX, an index array, takes int64 or int32 items. */
typedef enum { F64, I64, BOOL, I32, IDX } Kind;
static const struct { const char *name, *formats; Py_ssize_t itemsize; } KINDS[] = {
    {"float64", "d", 8},
    {"int64", sizeof(long) == 8 ? "ql" : "q", 8},
    {"bool", "?", 1},
    {"int32", sizeof(long) == 4 ? "il" : "i", 4},
    {"int64 or int32", "", 0},
};

/* Whether a buffer format (NULL stands for "B") is one item of this kind, in native byte order. */
static inline int format_is(const char *format, Kind kind) {
    if (!format) format = "B";
    if (*format == '@' || *format == '=' || *format == (PY_LITTLE_ENDIAN ? '<' : '>')) format++;
    return format[0] && !format[1] && strchr(KINDS[kind].formats, format[0]);
}

typedef struct { Py_buffer view; int held; } Buf;

/* The buffer of ``obj``, a 1-d C-contiguous array of this kind (writable if asked); a ValueError naming the
 * argument otherwise. */
static inline int get_buffer(PyObject *obj, Buf *b, int writable, Kind kind, const char *function, const char *name) {
    const char *expected = KINDS[kind].name, *access = writable ? "writable " : "";
    if (PyObject_GetBuffer(obj, &b->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_TypeError)
            && !PyErr_ExceptionMatches(PyExc_ValueError))  /* numpy's refusals are ValueErrors */
            return -1;
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyErr_NormalizeException(&type, &value, &traceback);
        PyErr_Format(PyExc_ValueError, "%s: %s: expected a %s1-d C-contiguous %s array (%S)", function, name, access,
                     expected, value ? value : Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return -1;
    }
    b->held = 1;
    if (kind == IDX) kind = b->view.itemsize == 4 ? I32 : I64;
    if (b->view.ndim != 1 || b->view.itemsize != KINDS[kind].itemsize || !format_is(b->view.format, kind)) {
        PyErr_Format(PyExc_ValueError, "%s: %s: expected a %s1-d C-contiguous %s array, got %d-d items of format '%s'",
                     function, name, access, expected, b->view.ndim, b->view.format ? b->view.format : "B");
        return -1;
    }
    return 0;
}

static inline Py_ssize_t length(const Buf *b) { return b->view.shape[0]; }

/* Whether the index array of a checked IDX buffer holds int64 items (else int32). */
static inline int wide(const Buf *b) { return b->view.itemsize == 8; }

static inline void release(Buf *bufs, int n) {
    for (int i = 0; i < n; i++) if (bufs[i].held) PyBuffer_Release(&bufs[i].view);
}

/* -- CSR building ------------------------------------------------------------------------------ */

/* A buffer that doubles as it fills: PyMem memory, or, when ``in_bytes``, the inside of a bytes object
 * that take_bytes hands over without a copy (nor the page faults of a second big buffer). */
typedef struct { char *data; Py_ssize_t len, cap; PyObject *bytes; int in_bytes; } Growing;

static inline int reserve(Growing *g, Py_ssize_t size) {
    if (g->len + size > g->cap) {
        Py_ssize_t cap = g->cap ? g->cap * 2 : 4096;
        while (cap < g->len + size) cap *= 2;
        if (g->in_bytes) {
            if (g->bytes ? _PyBytes_Resize(&g->bytes, cap) < 0 : !(g->bytes = PyBytes_FromStringAndSize(NULL, cap))) {
                g->data = NULL;
                g->len = g->cap = 0;
                return -1;
            }
            g->data = PyBytes_AS_STRING(g->bytes);
        } else {
            char *data = PyMem_Realloc(g->data, cap);
            if (!data) { PyErr_NoMemory(); return -1; }
            g->data = data;
        }
        g->cap = cap;
    }
    return 0;
}

/* Free the buffer (on an error path). */
static inline void discard(Growing *g) {
    if (g->in_bytes) Py_CLEAR(g->bytes);
    else PyMem_Free(g->data);
    g->data = NULL;
}

static inline int grow(Growing *g, const void *item, Py_ssize_t size) {
    if (g->len + size > g->cap && reserve(g, size) < 0) return -1;
    memcpy(g->data + g->len, item, size);
    g->len += size;
    return 0;
}

/* The int64 at ``index`` of a table that starts out zero, extended with zeros as needed; NULL on error. */
static inline int64_t *table_slot(Growing *g, int64_t index) {
    Py_ssize_t size = (Py_ssize_t)(index + 1) * 8;
    if (g->len < size) {
        if (reserve(g, size - g->len) < 0) return NULL;
        memset(g->data + g->len, 0, size - g->len);
        g->len = size;
    }
    return (int64_t *)g->data + index;
}

static inline PyObject *take_bytes(Growing *g) {
    if (g->bytes) {
        PyObject *bytes = g->bytes;
        g->bytes = NULL;
        g->data = NULL;
        return _PyBytes_Resize(&bytes, g->len) < 0 ? NULL : bytes;
    }
    PyObject *bytes = PyBytes_FromStringAndSize(g->data ? g->data : "", g->len);
    PyMem_Free(g->data);
    g->data = NULL;
    return bytes;
}

/* The column of ``key``: vocabulary[key], or a new column appended to ``keys``. -1 on error (a column that is
 * not an int naming an entry of ``keys`` included). */
static inline int64_t column_of(PyObject *key, PyObject *vocabulary, PyObject *keys) {
    Py_INCREF(key);
    PyObject *found = PyDict_GetItemWithError(vocabulary, key);
    int64_t column = -1;
    if (found) {
        column = PyLong_CheckExact(found) ? PyLong_AsLongLong(found) : -1;
        if (!PyErr_Occurred() && (column < 0 || column >= PyList_GET_SIZE(keys))) {
            PyErr_SetString(PyExc_ValueError, "the vocabulary must map each key to its index in keys");
            column = -1;
        }
    } else if (!PyErr_Occurred()) {
        PyObject *number = PyLong_FromSsize_t(PyList_GET_SIZE(keys));
        if (number && PyDict_SetItem(vocabulary, key, number) == 0 && PyList_Append(keys, key) == 0)
            column = PyList_GET_SIZE(keys) - 1;
        Py_XDECREF(number);
    }
    Py_DECREF(key);
    return column;
}

#endif
