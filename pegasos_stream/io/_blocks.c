/* The compiled reading of a file's blocks and lines, and the process's malloc setting (pegasos_stream.io._blocks).
 *
 * read_block: a file's next block, read in (not copied) after the end of the last block's last line, carried;
 * split_lines: a block of a file to the spans of its lines, for parse_svmlight to read in place;
 *     span_list: the spans as bytes objects, for the parsers that take those.
 * keep_freed_memory: glibc's malloc keeps freed blocks below a size in the heap, for reuse, instead of
 *     returning their pages to the system (which the next block of that size touches again, page by page).
 *
 * Shared with the other compiled modules: _common.h (buffers, growing buffers) and _lines.h (the spans of lines).
 */
#include "../_lines.h"
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* span_list(buffer, starts, ends) -> the list of buffer[starts[i]:ends[i]] (the lines of a LineSet as bytes). */
static PyObject *span_list(PyObject *self, PyObject *args) {
    LineSet set;
    if (open_lines(args, &set, "span_list") < 0 || !set.buffer) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "span_list: expected (bytes, starts, ends)");
        close_lines(&set);
        return NULL;
    }
    PyObject *list = PyList_New(set.n);
    for (Py_ssize_t r = 0; list && r < set.n; r++) {
        Py_ssize_t len;
        const char *line = line_at(&set, r, &len);
        PyObject *value = PyBytes_FromStringAndSize(line, len);
        if (!value) Py_CLEAR(list);
        else PyList_SET_ITEM(list, r, value);
    }
    close_lines(&set);
    return list;
}

/* bytes.strip()'s whitespace. */
static inline int py_space(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13); }

/* split_lines(buffer, keep) -> (starts, ends, sizes, blank, used): the lines of ``buffer`` that end in "\n",
 * as int64 spans [start, end) of their records and the bytes each takes (its "\n" included), and a flag byte
 * each, 1 for a record that is blank (whitespace only); ``used``, the bytes up to the last "\n". A record is
 * its line without its "\n" and the "\r"s before it, or, for a line of ``keep`` bytes or more (keep >= 0),
 * its first keep - 1 bytes as they are. */
static PyObject *split_lines(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t keep;
    if (!PyArg_ParseTuple(args, "y*n", &view, &keep)) return NULL;
    const char *s = view.buf, *newline;
    Py_ssize_t len = view.len, start = 0;
    Growing starts = {.in_bytes = 1}, ends = {.in_bytes = 1}, sizes = {.in_bytes = 1}, blank = {.in_bytes = 1};
    int failed = 0;
    while (!failed && start < len && (newline = memchr(s + start, '\n', len - start))) {
        Py_ssize_t stop = newline - s, end = stop;
        if (keep >= 0 && stop - start >= keep) end = start + keep - 1;
        else while (end > start && s[end - 1] == '\r') end--;
        char empty = 1;
        for (Py_ssize_t k = start; k < end && empty; k++) empty = (char)py_space((unsigned char)s[k]);
        int64_t span[3] = {start, end, stop + 1 - start};
        failed = grow(&starts, &span[0], 8) < 0 || grow(&ends, &span[1], 8) < 0 || grow(&sizes, &span[2], 8) < 0
            || grow(&blank, &empty, 1) < 0;
        start = stop + 1;
    }
    PyBuffer_Release(&view);
    if (failed) {
        discard(&starts);
        discard(&ends);
        discard(&sizes);
        discard(&blank);
        return NULL;
    }
    return Py_BuildValue("NNNNn", take_bytes(&starts), take_bytes(&ends), take_bytes(&sizes), take_bytes(&blank),
                         start);
}

/* read_block(file, carry, size, max_carry) -> (block, carry): a block of ``size`` bytes (fewer at the end of the file),
 * ``carry`` and then the bytes of ``file`` read in after it (readinto, nothing copied); and, when the block is whole,
 * its end after its last "\n" if that is at most ``max_carry`` bytes (else b""), to carry to the start of the next
 * block. The block keeps that end too: every block is ``size`` bytes, so that each one freed can hold the next. */
static PyObject *read_block(PyObject *self, PyObject *args) {
    PyObject *file, *carry;
    Py_ssize_t size, max_carry;
    if (!PyArg_ParseTuple(args, "OO!nn", &file, &PyBytes_Type, &carry, &size, &max_carry)) return NULL;
    Py_ssize_t kept = PyBytes_GET_SIZE(carry);
    if (max_carry < 0 || kept > size) {
        PyErr_SetString(PyExc_ValueError, "read_block: expected 0 <= max_carry and a carry of at most size bytes");
        return NULL;
    }
    PyObject *block = PyBytes_FromStringAndSize(NULL, size);
    if (!block) return NULL;
    char *s = PyBytes_AS_STRING(block);
    memcpy(s, PyBytes_AS_STRING(carry), kept);
    Py_ssize_t end = kept;
    while (end < size) {
        PyObject *view = PyMemoryView_FromMemory(s + end, size - end, PyBUF_WRITE);
        if (!view) goto fail;
        PyObject *n = PyObject_CallMethod(file, "readinto", "O", view), *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);  /* (readinto's error, raised after the view is released) */
        PyObject *released = PyObject_CallMethod(view, "release", NULL);  /* (an export kept by the file refuses) */
        Py_DECREF(view);
        if (!released) {
            Py_XDECREF(n);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
            goto fail;
        }
        Py_DECREF(released);
        PyErr_Restore(type, value, traceback);
        if (!n) goto fail;
        Py_ssize_t got = n == Py_None ? -1 : PyLong_AsSsize_t(n);
        Py_DECREF(n);
        if (got == -1 && PyErr_Occurred()) goto fail;
        if (got < 0 || got > size - end) {
            PyErr_SetString(PyExc_ValueError, "read_block: readinto returned no byte count within the buffer");
            goto fail;
        }
        if (got == 0) break;
        end += got;
    }
    Py_ssize_t cut = end;  /* the start of the end carried: after the last "\n" within reach */
    if (end == size)
        for (Py_ssize_t k = end; k >= 1 && end - k <= max_carry; k--)
            if (s[k - 1] == '\n') {
                cut = k;
                break;
            }
    if (end < size && _PyBytes_Resize(&block, end) < 0) return NULL;  /* the end of the file: no carry */
    return Py_BuildValue("(Ny#)", block, end < size ? "" : s + cut, end < size ? (Py_ssize_t)0 : end - cut);
fail:
    Py_DECREF(block);
    return NULL;
}

/* keep_freed_memory(block, slack) -> whether the process's malloc now serves blocks under ``block`` bytes
 * from its heap (M_MMAP_THRESHOLD) and keeps up to ``slack`` free bytes at the heap's top (M_TRIM_THRESHOLD):
 * True with glibc, False elsewhere (nothing changed). Each must be in [0, 2**25]: glibc's limit of the first. */
static PyObject *keep_freed_memory(PyObject *self, PyObject *args) {
    Py_ssize_t block, slack;
    if (!PyArg_ParseTuple(args, "nn", &block, &slack)) return NULL;
    if (block < 0 || block > (1 << 25) || slack < 0 || slack > (1 << 25)) {
        PyErr_SetString(PyExc_ValueError, "keep_freed_memory: block and slack must be in [0, 2**25] bytes");
        return NULL;
    }
#ifdef __GLIBC__
    return PyBool_FromLong(mallopt(M_MMAP_THRESHOLD, (int)block) && mallopt(M_TRIM_THRESHOLD, (int)slack));
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    {"keep_freed_memory", keep_freed_memory, METH_VARARGS,
     "Keep freed blocks under a size in malloc's heap, for reuse (glibc); whether it was set."},
    {"read_block", read_block, METH_VARARGS, "A file's next block after the bytes carried: (block, carry)."},
    {"split_lines", split_lines, METH_VARARGS, "A block's lines as spans: (starts, ends, sizes, blank, used)."},
    {"span_list", span_list, METH_VARARGS, "The spans of a block as a list of bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "pegasos_stream.io._blocks", "Compiled reading of a file's blocks and lines.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__blocks(void) { return PyModule_Create(&module); }
