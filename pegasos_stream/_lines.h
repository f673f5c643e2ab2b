/* The lines a parser reads, one at a time, from a list of bytes or from the spans of a block of a file: what the
 * parsers (pegasos_stream/parse/_parse.c) read and the file block reader (pegasos_stream/io/_blocks.c) hands out. */
#ifndef PEGASOS_STREAM_LINES_H
#define PEGASOS_STREAM_LINES_H

#include "_common.h"

/* The lines a parser reads: the bytes objects of a list (held by a tuple of them while they are read), or
 * the spans [starts[i], ends[i]) of one bytes object (lines read from a file a block at a time, none copied). */
typedef struct { PyObject *tuple, *buffer; Buf starts, ends; Py_ssize_t n; } LineSet;

static inline void close_lines(LineSet *set) {
    Py_CLEAR(set->tuple);
    Py_CLEAR(set->buffer);
    release(&set->starts, 1);
    release(&set->ends, 1);
}

/* Take ``lines``: a list of bytes, or a tuple (bytes, starts, ends) of int64 spans within the bytes; an error
 * naming ``function`` otherwise (close_lines releases what was taken either way). */
static inline int open_lines(PyObject *lines, LineSet *set, const char *function) {
    memset(set, 0, sizeof *set);
    if (PyList_Check(lines)) {
        if (!(set->tuple = PyList_AsTuple(lines))) return -1;
        set->n = PyTuple_GET_SIZE(set->tuple);
        for (Py_ssize_t r = 0; r < set->n; r++)
            if (!PyBytes_Check(PyTuple_GET_ITEM(set->tuple, r))) {
                PyErr_Format(PyExc_TypeError, "%s: expected bytes", function);
                return -1;
            }
        return 0;
    }
    PyObject *buffer, *starts, *ends;
    if (!PyTuple_Check(lines) || PyTuple_GET_SIZE(lines) != 3 || !PyBytes_Check(buffer = PyTuple_GET_ITEM(lines, 0))) {
        PyErr_Format(PyExc_TypeError, "%s: lines: expected a list of bytes or a tuple (bytes, starts, ends)", function);
        return -1;
    }
    starts = PyTuple_GET_ITEM(lines, 1);
    ends = PyTuple_GET_ITEM(lines, 2);
    Py_INCREF(buffer);
    set->buffer = buffer;
    if (get_buffer(starts, &set->starts, 0, I64, function, "starts") < 0
        || get_buffer(ends, &set->ends, 0, I64, function, "ends") < 0)
        return -1;
    set->n = length(&set->starts);
    if (length(&set->ends) != set->n) {
        PyErr_Format(PyExc_ValueError, "%s: starts and ends: %zd and %zd spans, expected as many of each", function,
                     set->n, length(&set->ends));
        return -1;
    }
    const int64_t *a = set->starts.view.buf, *e = set->ends.view.buf;
    int64_t size = PyBytes_GET_SIZE(buffer);
    for (Py_ssize_t r = 0; r < set->n; r++)
        if (a[r] < 0 || a[r] > e[r] || e[r] > size) {
            PyErr_Format(PyExc_ValueError, "%s: span %zd: [%lld, %lld) is not within the %lld bytes", function, r,
                         (long long)a[r], (long long)e[r], (long long)size);
            return -1;
        }
    return 0;
}

/* Line ``r`` of a set, and its length into *len. */
static inline const char *line_at(const LineSet *set, Py_ssize_t r, Py_ssize_t *len) {
    if (set->tuple) {
        PyObject *line = PyTuple_GET_ITEM(set->tuple, r);
        *len = PyBytes_GET_SIZE(line);
        return PyBytes_AS_STRING(line);
    }
    const int64_t *a = set->starts.view.buf, *e = set->ends.view.buf;
    *len = (Py_ssize_t)(e[r] - a[r]);
    return PyBytes_AS_STRING(set->buffer) + a[r];
}

#endif
