/* The compiled parsers of the stream's records (pegasos_stream.parse._parse).
 *
 * parse_svmlight: svmlight lines to CSR rows at C speed; any line outside the plain ASCII grammar is
 *     marked for the Python parser, which gives the same event or the same error message.
 * parse_json_events: labelled JSON feature events ({id, x, label} in the plain grammar: ASCII, no escapes,
 *     distinct names, numbers as json gives them) to CSR rows, ids and labels; any other value is
 *     marked for the Python parser.
 * parse_json_texts: labelled JSON text events ({id, text, label} and members of plain values) to their texts
 *     in UTF-8, ids and labels; any other value is marked for the Python parser.
 * name_table, name_count: the table of hashed feature names parse_json_events fills, and its size.
 *
 * Shared with the other compiled modules: _common.h (buffers, growing buffers, columns of a vocabulary) and
 * _lines.h (the lines it reads: a list of bytes, or the spans io._blocks.split_lines gives); crc32.h, the hashing
 * of names.
 */
#include "../_lines.h"
#include "../crc32.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif


/* Python's str.split() whitespace, restricted to ASCII. */
static inline int is_space(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 28 && c <= 31); }

/* Exact powers of ten: 10^k is a double without rounding for k <= 22. */
static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* mantissa * 10^power as float() rounds it, when Clinger's fast path applies: the mantissa is below 2^53
 * and the power within +-22, so both operands are exact and one IEEE multiplication or division rounds
 * correctly. 0 when it does not apply. */
static inline int exact_decimal(uint64_t mantissa, Py_ssize_t power, int negative, double *out) {
    if (mantissa >= ((uint64_t)1 << 53) || power < -22 || power > 22) return 0;
    double value = (double)mantissa;
    value = power < 0 ? value / POW10[-power] : value * POW10[power];
    *out = negative ? -value : value;
    return 1;
}

static inline uint64_t load8(const char *p) {
    uint64_t word;
    memcpy(&word, p, 8);
    return word;
}

/* The value of eight digits, one a byte (their values, not their characters), the first in the lowest
 * byte: three multiplications instead of eight steps. */
static inline uint64_t eight_digits(uint64_t v) {
    v = v * 10 + (v >> 8);
    return (((v & 0x000000ff000000ffULL) * (100 + (1000000ULL << 32)))
            + (((v >> 16) & 0x000000ff000000ffULL) * (1 + (10000ULL << 32)))) >> 32;
}

static const uint64_t POW10_INT[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/* The decimal digits at s[k], up to ``end`` at most: how many, with *mantissa times ten to that many
 * plus their value (modulo 2^64). Eight bytes at a time where they can be read. */
static inline Py_ssize_t digits_at(const char *s, Py_ssize_t k, const char *end, uint64_t *mantissa) {
    Py_ssize_t start = k;
    uint64_t m = *mantissa;
#if PY_LITTLE_ENDIAN && defined(__GNUC__)
    while (end - (s + k) >= 8) {
        uint64_t x = load8(s + k) ^ 0x3030303030303030ULL;  /* a digit's byte becomes its value */
        uint64_t other = (x & 0xf0f0f0f0f0f0f0f0ULL) | ((x + 0x0606060606060606ULL) & 0x1010101010101010ULL);
        int n = other ? __builtin_ctzll(other) / 8 : 8;  /* exact up to the first byte that is no digit */
        if (n == 0) break;
        m = m * POW10_INT[n] + eight_digits(n == 8 ? x : (x & (((uint64_t)1 << (8 * n)) - 1)) << (8 * (8 - n)));
        k += n;
        if (n < 8) {
            *mantissa = m;
            return k - start;
        }
    }
#endif
    for (; s + k < end && s[k] >= '0' && s[k] <= '9'; k++) m = m * 10 + (uint64_t)(s[k] - '0');
    *mantissa = m;
    return k - start;
}

/* Take the GIL back for a moment inside a loop that runs without it (*released, from PyEval_SaveThread), and
 * let it go again; nothing when ``released`` is NULL (the caller holds the GIL). */
static inline void hold_gil(PyThreadState **released) {
    if (released) PyEval_RestoreThread(*released);
}

static inline void drop_gil(PyThreadState **released) {
    if (released) *released = PyEval_SaveThread();
}

/* grow() in a loop that may run without the GIL: it takes the GIL back to enlarge the buffer. */
static inline int grow_released(Growing *g, const void *item, Py_ssize_t size, PyThreadState **released) {
    if (g->len + size > g->cap) {
        hold_gil(released);
        int failed = reserve(g, size) < 0;
        drop_gil(released);
        if (failed) return -1;
    }
    memcpy(g->data + g->len, item, size);
    g->len += size;
    return 0;
}

/* The number in the plain grammar [+-]?(d+(.d*)?|.d+)([eE][+-]?d+)? at s[k:], parsed as float() would:
 * through exact_decimal when it applies, else through Python's own correctly rounded conversion. The
 * index past it when it is finite, at most 64 characters and followed by the end or whitespace; -1
 * otherwise. */
static ALWAYS_INLINE Py_ssize_t scan_number(const char *s, Py_ssize_t k, Py_ssize_t end, double *out,
                                             PyThreadState **released) {
    Py_ssize_t start = k, digits = 0, fraction = 0, significant = 0;
    uint64_t mantissa = 0;
    int negative = 0;
    if (k < end && (s[k] == '+' || s[k] == '-')) negative = s[k++] == '-';
    /* the digits, eight at a time where they can be read: leading zeros first (they are not significant), then
     * the rest into the mantissa (exact while there are at most 19 significant digits, the only case it is used) */
    Py_ssize_t first = k;
    while (k < end && s[k] == '0') k++;
    significant = k < end && s[k] >= '1' && s[k] <= '9' ? digits_at(s, k, s + end, &mantissa) : 0;  /* ("0.": none) */
    k += significant;
    digits = k - first;
    if (k < end && s[k] == '.') {
        Py_ssize_t point = ++k;
        if (!significant)
            while (k < end && s[k] == '0') k++;
        Py_ssize_t more = digits_at(s, k, s + end, &mantissa);
        significant += more;
        k += more;
        fraction = k - point;
        digits += fraction;
    }
    if (!digits) return -1;
    Py_ssize_t exponent = 0, exponent_digits = 0;
    if (k < end && (s[k] == 'e' || s[k] == 'E')) {
        int exponent_negative = 0;
        k++;
        if (k < end && (s[k] == '+' || s[k] == '-')) exponent_negative = s[k++] == '-';
        for (; k < end && s[k] >= '0' && s[k] <= '9'; k++, exponent_digits++)
            if (exponent < 100000) exponent = exponent * 10 + (s[k] - '0');
        if (!exponent_digits) return -1;
        if (exponent_negative) exponent = -exponent;
    }
    Py_ssize_t len = k - start;
    if ((k < end && !is_space((unsigned char)s[k])) || len > 64) return -1;
    if (significant <= 19 && exact_decimal(mantissa, exponent - fraction, negative, out)) return k;
    char text[65];
    memcpy(text, s + start, len);
    text[len] = '\0';
    hold_gil(released);  /* Python's conversion (its big-number arithmetic) needs the GIL */
    *out = PyOS_string_to_double(text, NULL, NULL);
    int failed = *out == -1.0 && PyErr_Occurred();
    if (failed) PyErr_Clear();
    drop_gil(released);
    return !failed && isfinite(*out) ? k : -1;
}

enum { LINE_ROW = 0, LINE_EMPTY = 1, LINE_PYTHON = 2 };

/* Names that are plain decimal numbers below this are looked up in an array instead of the dict. */
#define MAX_NUMBERED 4194304

/* The str of the numbered name s[0:len]: ``names[number]`` when an earlier call made it (one str per
 * name for the whole run: its hash is computed once and dict lookups of it match by identity), else a
 * new str, kept there. A new reference; NULL on error. */
static PyObject *numbered_name(const char *s, Py_ssize_t len, int64_t number, PyObject *names) {
    PyObject *name;
    if (number < PyList_GET_SIZE(names) && (name = PyList_GET_ITEM(names, number)) != Py_None) {
        Py_INCREF(name);
        return name;
    }
    name = PyUnicode_DecodeASCII(s, len, NULL);
    if (!name) return NULL;
    while (PyList_GET_SIZE(names) <= number)
        if (PyList_Append(names, Py_None) < 0) { Py_DECREF(name); return NULL; }
    Py_INCREF(name);
    PyList_SetItem(names, number, name);  /* steals the second reference */
    return name;
}

/* The column of the name s[0:len]: through ``numbered`` (column + 1 by number) for a plain decimal
 * number, else through the vocabulary. -1 on error. */
static int64_t name_column(const char *s, Py_ssize_t len, PyObject *vocabulary, PyObject *keys, Growing *numbered,
                           PyObject *names) {
    int64_t number = -1;
    if (len <= 7 && (len == 1 || s[0] != '0')) {
        number = 0;
        for (Py_ssize_t k = 0; k < len && number >= 0; k++)
            number = (s[k] >= '0' && s[k] <= '9') ? number * 10 + (s[k] - '0') : -1;
    }
    int64_t *slot = NULL;
    if (number >= 0 && number < MAX_NUMBERED) {
        slot = table_slot(numbered, number);
        if (!slot) return -1;
        if (*slot) return *slot - 1;
    }
    PyObject *name = slot ? numbered_name(s, len, number, names) : PyUnicode_DecodeASCII(s, len, NULL);
    if (!name) return -1;
    int64_t column = column_of(name, vocabulary, keys);
    Py_DECREF(name);
    if (column >= 0 && slot) *slot = column + 1;
    return column;
}

/* Parse one line into the CSR buffers, in one pass; LINE_PYTHON leaves them as they were (but for new
 * columns). A byte outside printable ASCII, in a token or between tokens (other than whitespace), sends
 * the line to Python, as does a non-ASCII byte in the comment (for the UTF-8 checks). */
static int svmlight_line(const char *s, Py_ssize_t len, PyObject *vocabulary, PyObject *keys, Growing *indices,
                         Growing *data, Growing *stamps, Growing *numbered, PyObject *names, int64_t stamp,
                         int64_t columns, double *label, int *error, PyThreadState **released) {
    Py_ssize_t rows_before = indices->len;
    int64_t previous = -1;  /* with columns: the row's last column (a row not in increasing order goes to Python) */
    const char *comment = memchr(s, '#', len);
    Py_ssize_t end = comment ? comment - s : len;
    for (Py_ssize_t k = end; k < len; k++) if ((unsigned char)s[k] >= 0x80) return LINE_PYTHON;
    Py_ssize_t k = 0;
    while (k < end && is_space((unsigned char)s[k])) k++;
    if (k == end) return LINE_EMPTY;
    k = scan_number(s, k, end, label, released);
    if (k < 0) return LINE_PYTHON;
    if (*label == 1.0) *label = 1.0;
    else if (*label == 0.0 || *label == -1.0) *label = -1.0;
    else return LINE_PYTHON;
    for (;;) {
        while (k < end && is_space((unsigned char)s[k])) k++;
        if (k == end) return LINE_ROW;
        Py_ssize_t token = k;
        if (columns >= 0) {  /* a decimal name is the column: read as it is scanned */
            int64_t column = 0;
            for (; k < end && k - token < 18 && s[k] >= '0' && s[k] <= '9'; k++) column = column * 10 + (s[k] - '0');
            if (k == end || s[k] != ':' || k == token || (s[token] == '0' && k > token + 1) || column >= columns
                || column <= previous)
                goto python;  /* no plain decimal column (a name for Python), or out of order (perhaps repeated) */
            double number;
            k = scan_number(s, k + 1, end, &number, released);
            if (k < 0) goto python;
            previous = column;
            if (grow_released(indices, &column, 8, released) < 0 || grow_released(data, &number, 8, released) < 0) {
                *error = 1;
                return LINE_PYTHON;
            }
            continue;
        }
        for (; k < end && s[k] != ':'; k++) {
            unsigned char c = (unsigned char)s[k];
            if (c < 0x21 || c >= 0x7f) goto python;  /* the token ends without a colon, or a byte for Python */
        }
        if (k == end || k == token || (k - token == 3 && !memcmp(s + token, "qid", 3))) goto python;
        double number;
        Py_ssize_t colon = k;
        k = scan_number(s, colon + 1, end, &number, NULL);
        if (k < 0) goto python;
        int64_t column = name_column(s + token, colon - token, vocabulary, keys, numbered, names);
        if (column < 0) { *error = 1; return LINE_PYTHON; }
        int64_t *seen = table_slot(stamps, column);
        if (!seen) { *error = 1; return LINE_PYTHON; }
        if (*seen == stamp) goto python;  /* a repeated name: the dict keeps the last value */
        *seen = stamp;
        if (grow(indices, &column, 8) < 0 || grow(data, &number, 8) < 0) { *error = 1; return LINE_PYTHON; }
    }
python:
    data->len -= indices->len - rows_before;
    indices->len = rows_before;
    return LINE_PYTHON;
}


/* parse_svmlight(lines, vocabulary, keys, max_bytes, names[, columns]) -> (status, indptr, indices, data, labels)
 * as bytes: status per line (0 row, 1 nothing, 2 for the Python parser); one CSR row and label per status-0
 * line. ``lines``: a list of bytes, or a tuple (bytes, starts, ends) of spans (see LineSet). ``names`` keeps the str of each numbered name from call to call (see numbered_name). With ``columns``
 * (>= 0), the names are no keys but the columns they write in decimal, below ``columns`` and increasing along a
 * row; a line with any other name goes to the Python parser. That parse touches no Python object and runs
 * without the GIL (taking it back only to enlarge a buffer or for Python's own number conversion), so calls
 * from two threads parse at once. */
static PyObject *parse_svmlight(PyObject *self, PyObject *args) {
    PyObject *given, *vocabulary, *keys, *names;
    Py_ssize_t max_bytes;
    long long columns = -1;
    if (!PyArg_ParseTuple(args, "OO!O!nO!|L", &given, &PyDict_Type, &vocabulary, &PyList_Type, &keys, &max_bytes,
                          &PyList_Type, &names, &columns))
        return NULL;
    LineSet lines;
    if (open_lines(given, &lines, "parse_svmlight") < 0) {
        close_lines(&lines);
        return NULL;
    }
    Growing status = {.in_bytes = 1}, indptr = {.in_bytes = 1}, indices = {.in_bytes = 1}, data = {.in_bytes = 1},
            labels = {.in_bytes = 1}, stamps = {0}, numbered = {0};
    int64_t nnz = 0;
    Py_ssize_t n = lines.n, text = 0, len;
    for (Py_ssize_t r = 0; r < n; r++) {
        line_at(&lines, r, &len);
        text += len;
    }
    Py_ssize_t pairs = text / 8 + 1;  /* room for a feature every eight bytes ("12:0.5 " takes seven): rarely more */
    if (reserve(&status, n) < 0 || reserve(&indptr, 8 * (n + 1)) < 0 || reserve(&labels, 8 * n) < 0
        || reserve(&indices, 8 * pairs) < 0 || reserve(&data, 8 * pairs) < 0 || grow(&indptr, &nnz, 8) < 0)
        goto fail;
    PyThreadState *state = columns >= 0 ? PyEval_SaveThread() : NULL;
    PyThreadState **released = state ? &state : NULL;
    int error = 0;
    for (Py_ssize_t r = 0; r < n && !error; r++) {
        const char *line = line_at(&lines, r, &len);
        double label = 0.0;
        char kind = len > max_bytes ? LINE_PYTHON
            : (char)svmlight_line(line, len, vocabulary, keys, &indices, &data, &stamps, &numbered, names, r + 1,
                                  (int64_t)columns, &label, &error, released);
        if (error || grow_released(&status, &kind, 1, released) < 0) error = 1;
        else if (kind == LINE_ROW) {
            nnz = indices.len / 8;
            error = grow_released(&indptr, &nnz, 8, released) < 0 || grow_released(&labels, &label, 8, released) < 0;
        }
    }
    if (state) PyEval_RestoreThread(state);
    if (error) goto fail;
    close_lines(&lines);
    PyMem_Free(stamps.data);
    PyMem_Free(numbered.data);
    return Py_BuildValue("NNNNN", take_bytes(&status), take_bytes(&indptr), take_bytes(&indices), take_bytes(&data),
                         take_bytes(&labels));
fail:
    close_lines(&lines);
    discard(&status);
    discard(&indptr);
    discard(&indices);
    discard(&data);
    discard(&labels);
    PyMem_Free(stamps.data);
    PyMem_Free(numbered.data);
    return NULL;
}

/* -- JSON events ------------------------------------------------------------------------------- */


static inline int json_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Past the JSON whitespace at s[k]. Every scan below reads s[len], the NUL that ends a bytes object,
 * as the end of the input: it belongs to no token. */
static inline Py_ssize_t skip_space(const char *s, Py_ssize_t k) {
    while (json_space((unsigned char)s[k])) k++;
    return k;
}

#define BYTES_OF(c) (0x0101010101010101ULL * (uint64_t)(c))

/* The bytes of x that equal c: 0x80 in the lowest of them (above it, a byte may be marked that is not). */
static inline uint64_t bytes_equal(uint64_t x, unsigned char c) {
    uint64_t v = x ^ BYTES_OF(c);
    return (v - BYTES_OF(1)) & ~v & BYTES_OF(0x80);
}

/* The string at s[k] == '"' if it holds printable ASCII only (no escape): the index past its closing
 * quote; -1 otherwise. ``end`` bounds what may be read: eight bytes at a time where they can be, the
 * first byte that is a quote, a backslash or not printable ASCII found without a branch per byte. */
static inline Py_ssize_t json_string(const char *s, Py_ssize_t k, const char *end) {
    k++;
#if PY_LITTLE_ENDIAN && defined(__GNUC__)
    for (; end - (s + k) >= 8; k += 8) {
        uint64_t x = load8(s + k);
        uint64_t stop = bytes_equal(x, '"') | bytes_equal(x, '\\') | bytes_equal(x, 0x7f)
                        | ((((x - BYTES_OF(0x20)) & ~x) | x) & BYTES_OF(0x80));  /* below 0x20, or above 0x7f */
        if (stop) {
            k += __builtin_ctzll(stop) / 8;
            return s[k] == '"' ? k + 1 : -1;
        }
    }
#endif
    for (;; k++) {
        unsigned char c = (unsigned char)s[k];
        if (c == '"') return k + 1;
        if (c < 0x20 || c >= 0x7f || c == '\\') return -1;
    }
}

/* A scalar JSON value, as json.loads would give it. */
enum { V_NONE, V_STRING, V_INT, V_FLOAT, V_TRUE, V_FALSE };
typedef struct { int kind; Py_ssize_t start, end; int64_t integer; double real; } Scalar;

/* The number at s[k] in the JSON grammar -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?, into ``value``: V_INT with
 * an integer of at most ``max_digits`` digits (-0 is the int 0), or V_FLOAT, the finite float() of the
 * text (through exact_decimal on the digits gathered in this one pass, else scan_number). The index
 * past it; -1 for anything else. */
static inline Py_ssize_t json_number(const char *s, Py_ssize_t k, const char *end, int max_digits, Scalar *value,
                                      PyThreadState **released) {
    Py_ssize_t start = k, digits = 0, fraction = 0, exponent = 0;
    uint64_t mantissa = 0;  /* exact while digits <= 19 */
    int negative = s[k] == '-';
    k += negative;
    if (s[k] == '0') {
        k++;
        digits = 1;
    } else if (s[k] >= '1' && s[k] <= '9') {
        digits = digits_at(s, k, end, &mantissa);
        k += digits;
    } else return -1;
    if (s[k] != '.' && s[k] != 'e' && s[k] != 'E') {
        if (digits > max_digits) return -1;
        value->kind = V_INT;
        value->integer = negative ? -(int64_t)mantissa : (int64_t)mantissa;
        return k;
    }
    if (s[k] == '.') {
        fraction = digits_at(s, k + 1, end, &mantissa);
        if (!fraction) return -1;
        k += 1 + fraction;
        digits += fraction;
    }
    if (s[k] == 'e' || s[k] == 'E') {
        int exponent_negative = 0;
        k++;
        if (s[k] == '+' || s[k] == '-') exponent_negative = s[k++] == '-';
        if (!(s[k] >= '0' && s[k] <= '9')) return -1;
        for (; s[k] >= '0' && s[k] <= '9'; k++)
            if (exponent < 100000) exponent = exponent * 10 + (s[k] - '0');
        if (exponent_negative) exponent = -exponent;
    }
    value->kind = V_FLOAT;
    if (digits <= 19 && exact_decimal(mantissa, exponent - fraction, negative, &value->real)) return k;
    return scan_number(s + start, 0, k - start, &value->real, released) >= 0 ? k : -1;  /* -1 for 1e999 and the like */
}

/* The id or label at s[k]: a string, a number or true/false (null, objects and arrays are the Python
 * parser's). The index past it; -1 for anything else. */
static Py_ssize_t json_scalar(const char *s, Py_ssize_t k, const char *end, Scalar *value, PyThreadState **released) {
    switch (s[k]) {
    case '"':
        value->kind = V_STRING;
        value->start = k + 1;
        k = json_string(s, k, end);
        value->end = k - 1;
        return k;
    case 't':
        value->kind = V_TRUE;
        return strncmp(s + k, "true", 4) ? -1 : k + 4;
    case 'f':
        value->kind = V_FALSE;
        return strncmp(s + k, "false", 5) ? -1 : k + 5;
    default:
        return json_number(s, k, end, 18, value, released);
    }
}

/* A str of the ASCII bytes s[0:len]. */
static PyObject *ascii_str(const char *s, Py_ssize_t len) {
    PyObject *str = PyUnicode_New(len, 127);
    if (str) memcpy(PyUnicode_DATA(str), s, len);
    return str;
}

static PyObject *scalar_object(const char *s, const Scalar *value) {
    switch (value->kind) {
    case V_STRING: return ascii_str(s + value->start, value->end - value->start);
    case V_INT: return PyLong_FromLongLong(value->integer);
    case V_FLOAT: return PyFloat_FromDouble(value->real);
    case V_TRUE: Py_RETURN_TRUE;
    case V_FALSE: Py_RETURN_FALSE;
    default: Py_RETURN_NONE;
    }
}

/* The feature names seen so far, by their bytes, kept from call to call (in a capsule, see name_table):
 * an open-addressing table (linear probing, at most half full) of slots, each with a name's first 8
 * bytes (zero-padded), a check (high hash bits and the length, up to 255), the last row it appeared in
 * (its stamp), the low bits of its hash (to rehash), its entry (the names are numbered in first-seen
 * order, and the entry tells where the name sits in ``arena``, read only to compare names beyond 8
 * bytes), its str (made once, so that its hash is computed once and the learner's dict lookups match it by
 * identity) and its column in the batch of the call that last met it (``call``). A table that hashes
 * (``hash_bits`` > 0) keeps no name: a name's column is computed from its bytes (json_hashed_features), and
 * the table holds the set that finds the names of a row that share a column. */
typedef struct {
    uint64_t head;
    uint32_t check, stamp;
    int64_t column;
    uint32_t hash;
    int32_t entry;  /* -1 marks a free slot */
    PyObject *name;
    uint64_t call;
} Slot;
typedef struct { Py_ssize_t offset, len; } Spelling;
/* A hashed column met in the row of stamp ``stamp``: the cells of row_collides' set. */
typedef struct { uint32_t column, stamp; } Seen;
typedef struct {
    Slot *slots;
    Py_ssize_t mask, used;
    Growing spellings, arena, pending;  /* pending: the names of the row being read */
    Growing seen;  /* Seen cells (row_collides), a power of two of them */
    Py_ssize_t columns;  /* the columns of the call's keys */
    int hash_bits;  /* 0: a call's columns are its keys; else names are hashed to 2^hash_bits columns */
    uint64_t call;
    int busy;  /* a parse_json_events call is using the table */
    uint32_t row;  /* the stamp of the row being read: rows are numbered across calls */
} Names;

/* The first 8 bytes of s[0:len], zero-padded; ``end`` bounds what may be read past the name. */
static inline uint64_t name_head(const char *s, Py_ssize_t len, const char *end) {
    if (len >= 8) return load8(s);
    uint64_t head = 0;
    if (end - s < 8) memcpy(&head, s, len);
    else if (len) {
#if PY_BIG_ENDIAN
        head = load8(s) & (~(uint64_t)0 << (64 - 8 * len));
#else
        head = load8(s) & ((uint64_t)-1 >> (64 - 8 * len));
#endif
    }
    return head;
}

/* feature_hash of the str of the ASCII bytes s[0:len]: zlib.crc32 of them; ``end`` bounds what may be read. */
static inline uint32_t feature_crc(const char *s, Py_ssize_t len, const char *end) {
#if PY_LITTLE_ENDIAN
    if (len <= 8) return crc_of_word(name_head(s, len, end), (int)len);
#endif
    return ~crc_update(0xFFFFFFFFu, (const unsigned char *)s, len);
}

/* A hash of the name s[0:len] with this head (words of 8 bytes, mixed by MurmurHash3's finalizer). */
static inline uint64_t name_hash(const char *s, Py_ssize_t len, uint64_t head) {
    uint64_t h = head ^ ((uint64_t)len * 0x9e3779b97f4a7c15ULL);
    for (Py_ssize_t i = 8; i < len; i += 8) {
        h = (h ^ load8(s + (i + 8 <= len ? i : len - 8))) * 0x87c37b91114253d5ULL;
        h = (h << 31) | (h >> 33);
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

static int names_resize(Names *t, Py_ssize_t size) {
    Slot *slots = PyMem_Malloc(size * sizeof(Slot));
    if (!slots) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < size; i++) slots[i] = (Slot){.entry = -1, .name = NULL};
    for (Py_ssize_t i = 0; t->slots && i <= t->mask; i++) {
        if (t->slots[i].entry < 0) continue;
        Py_ssize_t j = t->slots[i].hash & (size - 1);
        while (slots[j].entry >= 0) j = (j + 1) & (size - 1);
        slots[j] = t->slots[i];
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->mask = size - 1;
    return 0;
}

/* A name of the row being read: where it is, and its key in the table (head, hash and check). */
typedef struct { Py_ssize_t start, len; uint64_t head, hash; uint32_t check; } Pending;

static inline void name_key(Pending *name, const char *s, const char *end) {
    Py_ssize_t len = name->len;
    name->head = name_head(s, len, end);
    name->hash = name_hash(s, len, name->head);
    name->check = ((uint32_t)(name->hash >> 32) & ~(uint32_t)0xff) | (uint32_t)(len < 255 ? len : 255);
}

/* The slot of this name (s[name->start:] its bytes), its column numbered in this call's ``keys`` (the names of
 * its columns) when first met in the call. NULL on error. */
static inline Slot *name_slot(Names *t, PyObject *keys, const char *s, const Pending *name) {
    Py_ssize_t len = name->len, i = name->hash & t->mask;
    s += name->start;
    Slot *slot = NULL;
    for (;; i = (i + 1) & t->mask) {
        Slot *candidate = &t->slots[i];
        if (candidate->entry < 0) break;
        if (candidate->head == name->head && candidate->check == name->check) {
            const Spelling *spelling = (const Spelling *)t->spellings.data + candidate->entry;
            if (len <= 8 || (spelling->len == len && !memcmp(t->arena.data + spelling->offset, s, len))) {
                slot = candidate;
                break;
            }
        }
    }
    if (!slot) {
        if (2 * (t->used + 1) > t->mask + 1) {
            if (names_resize(t, 2 * (t->mask + 1)) < 0) return NULL;
            for (i = name->hash & t->mask; t->slots[i].name; i = (i + 1) & t->mask) {}
        }
        if (t->used >= INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "parse_json_events: too many names");
            return NULL;
        }
        Spelling spelling = {t->arena.len, len};
        PyObject *str = ascii_str(s, len);
        if (!str) return NULL;
        if (grow(&t->spellings, &spelling, sizeof spelling) < 0 || (len && grow(&t->arena, s, len) < 0)) {
            Py_DECREF(str);
            return NULL;
        }
        slot = &t->slots[i];
        *slot = (Slot){name->head, name->check, 0, -1, (uint32_t)name->hash, (int32_t)t->used++, str, 0};
    }
    if (slot->call != t->call) {
        slot->column = t->columns++;
        if (PyList_Append(keys, slot->name) < 0) return NULL;
        slot->call = t->call;
    }
    return slot;
}

/* The stamp of the next row: never 0, the stamp of a slot not met in any row yet (a stamp that comes round
 * again after 2^32 rows can only send a row to the Python parser, as a repeated name would). */
static inline uint32_t next_row(Names *t) {
    if (++t->row == 0) t->row = 1;
    return t->row;
}

/* Whether two of the hashed columns row[0:n] of the row of this stamp are one (-1 on error): a set of the
 * columns met in the row, in ``seen``, whose cells of other rows' stamps count as free. */
static int row_collides(Names *t, const int64_t *row, Py_ssize_t n, uint32_t stamp) {
    if (n < 2) return 0;
    Py_ssize_t size = 64;
    while (size < 2 * n) size *= 2;
    Growing *seen = &t->seen;
    if (seen->len < size * (Py_ssize_t)sizeof(Seen)) {
        if (reserve(seen, size * (Py_ssize_t)sizeof(Seen) - seen->len) < 0) return -1;
        memset(seen->data + seen->len, 0, size * sizeof(Seen) - seen->len);  /* stamp 0: no row's */
        seen->len = size * (Py_ssize_t)sizeof(Seen);
    }
    Seen *cells = (Seen *)seen->data;
    for (Py_ssize_t j = 0; j < n; j++) {
        uint32_t column = (uint32_t)row[j];
        Py_ssize_t i = (Py_ssize_t)(((uint64_t)column * 0x9e3779b97f4a7c15ULL) >> 40) & (size - 1);
        for (; cells[i].stamp == stamp; i = (i + 1) & (size - 1))
            if (cells[i].column == column) return 1;
        cells[i] = (Seen){column, stamp};
    }
    return 0;
}

static void names_clear(Names *t) {
    for (Py_ssize_t i = 0; t->slots && i <= t->mask; i++) Py_XDECREF(t->slots[i].name);
    PyMem_Free(t->slots);
    PyMem_Free(t->spellings.data);
    PyMem_Free(t->arena.data);
    PyMem_Free(t->pending.data);
    PyMem_Free(t->seen.data);
    PyMem_Free(t);
}

static void names_free(PyObject *capsule) {
    Names *t = PyCapsule_GetPointer(capsule, "pegasos_stream.names");
    if (t) names_clear(t);
}

/* name_table(hash_bits) -> a capsule of an empty Names table, to pass to every parse_json_events call of a
 * run: 0, the calls' columns are their keys; 1 to 32, names are hashed to 2^hash_bits columns. */
static PyObject *name_table(PyObject *self, PyObject *args) {
    int hash_bits;
    if (!PyArg_ParseTuple(args, "i", &hash_bits)) return NULL;
    if (hash_bits < 0 || hash_bits > 32) {
        PyErr_Format(PyExc_ValueError, "name_table: hash_bits=%d: expected 0 to 32", hash_bits);
        return NULL;
    }
    Names *t = PyMem_Calloc(1, sizeof(Names));
    if (!t) return PyErr_NoMemory();
    t->hash_bits = hash_bits;
    if (!hash_bits && names_resize(t, 1024) < 0) { PyMem_Free(t); return NULL; }
    PyObject *capsule = PyCapsule_New(t, "pegasos_stream.names", names_free);
    if (!capsule) names_clear(t);
    return capsule;
}

/* name_count(names) -> the names a name_table() holds (none when it hashes). */
static PyObject *name_count(PyObject *self, PyObject *capsule) {
    Names *t = PyCapsule_GetPointer(capsule, "pegasos_stream.names");
    return t ? PyLong_FromSsize_t(t->used) : NULL;
}

/* The member name at s[k], a plain string (see json_string) and a colon: its start and length into *start and
 * *len; the index of the member's value, or -1. */
static inline Py_ssize_t member_name(const char *s, Py_ssize_t k, const char *end, Py_ssize_t *start,
                                     Py_ssize_t *len) {
    if (s[k] != '"') return -1;
    *start = k + 1;
    k = json_string(s, k, end);
    if (k < 0) return -1;
    *len = k - 1 - *start;
    k = skip_space(s, k);
    return s[k] == ':' ? skip_space(s, k + 1) : -1;
}

/* The number of a feature at s[k] (a finite float, or an int of at most 15 digits) into *number: the index past
 * it; -1 for anything else. */
static inline Py_ssize_t json_feature_value(const char *s, Py_ssize_t k, const char *end, double *number) {
    Scalar value;
    k = json_number(s, k, end, 15, &value, NULL);
    *number = value.kind == V_INT ? (double)value.integer : value.real;
    return k;
}

/* json_features with a table that hashes: each name's column is its feature_hash modulo 2^hash_bits,
 * computed from its bytes (no name is kept), and a row whose names share a column (a repeated name
 * included) is the Python parser's, whose hasher sums their values. */
static Py_ssize_t json_hashed_features(const char *s, Py_ssize_t k, const char *end, Names *names, Growing *indices,
                                       Growing *data, uint32_t stamp, int *error) {
    uint32_t mask = 0xFFFFFFFFu >> (32 - names->hash_bits);
    Py_ssize_t first = indices->len;
    k = skip_space(s, k + 1);
    if (s[k] == '}') return k + 1;
    for (;;) {
        Py_ssize_t start, len;
        double number;
        k = member_name(s, k, end, &start, &len);
        if (k < 0) return -1;
        int64_t column = feature_crc(s + start, len, end) & mask;
        k = json_feature_value(s, k, end, &number);
        if (k < 0) return -1;
        if (grow(indices, &column, 8) < 0 || grow(data, &number, 8) < 0) { *error = 1; return -1; }
        k = skip_space(s, k);
        if (s[k] == '}') break;
        if (s[k] != ',') return -1;
        k = skip_space(s, k + 1);
    }
    int collides = row_collides(names, (const int64_t *)(indices->data + first), (indices->len - first) / 8, stamp);
    if (collides) {
        *error = collides < 0;
        return -1;
    }
    return k + 1;
}

/* The feature object at s[k] == '{' into the CSR buffers: the index past it; -1 if it is not an
 * object of distinct names (whose hashed columns are distinct, when the table hashes) and finite numbers
 * in the plain grammar, or on error (with *error set).
 * ``end`` bounds what may be read. The row is read first, fetching the table slot of each name, then
 * its names are looked up, so that the memory reads overlap; a table that hashes takes
 * json_hashed_features. */
static Py_ssize_t json_features(const char *s, Py_ssize_t k, const char *end, Names *names, PyObject *keys,
                                Growing *indices, Growing *data, uint32_t stamp, int *error) {
    if (names->hash_bits) return json_hashed_features(s, k, end, names, indices, data, stamp, error);
    Growing *pending = &names->pending;
    pending->len = 0;
    k = skip_space(s, k + 1);
    if (s[k] == '}') return k + 1;
    for (;;) {
        Pending name;
        double number;
        k = member_name(s, k, end, &name.start, &name.len);
        if (k < 0) return -1;
        name_key(&name, s + name.start, end);
        PREFETCH(&names->slots[name.hash & names->mask]);
        k = json_feature_value(s, k, end, &number);
        if (k < 0) return -1;
        if (grow(pending, &name, sizeof name) < 0 || grow(data, &number, 8) < 0) { *error = 1; return -1; }
        k = skip_space(s, k);
        if (s[k] == '}') break;
        if (s[k] != ',') return -1;
        k = skip_space(s, k + 1);
    }
    Py_ssize_t n = pending->len / (Py_ssize_t)sizeof(Pending);
    if (reserve(indices, 8 * n) < 0) { *error = 1; return -1; }
    int64_t *row = (int64_t *)(indices->data + indices->len);
    for (Py_ssize_t j = 0; j < n; j++) {
        Slot *slot = name_slot(names, keys, s, (const Pending *)pending->data + j);
        if (!slot) { *error = 1; return -1; }
        if (slot->stamp == stamp) return -1;  /* a repeated name: the dict keeps the last value */
        slot->stamp = stamp;
        row[j] = slot->column;
    }
    indices->len += 8 * n;
    return k + 1;
}

typedef struct { const char *name; Py_ssize_t len; } Field;

static inline int is_field(const char *s, Py_ssize_t len, const Field *field) {
    return len == field->len && !memcmp(s, field->name, len);
}

/* The UTF-8 spelling of the four member names (id, x, label, text) into ``fields``; whether they are distinct. */
static int read_fields(PyObject *const *field_names, Field *fields) {
    int distinct = 1;
    for (int i = 0; i < 4; i++) {
        fields[i].name = PyUnicode_AsUTF8AndSize(field_names[i], &fields[i].len);
        if (!fields[i].name) {  /* a lone surrogate: no plain member can carry it */
            PyErr_Clear();
            fields[i].name = "";
            fields[i].len = -1;
        }
        for (int j = 0; j < i; j++) distinct &= PyUnicode_Compare(field_names[i], field_names[j]) != 0;
    }
    return distinct;
}

/* One JSON value into the CSR buffers, its id and its label; LINE_PYTHON leaves the buffers as they
 * were (but for new columns). */
static int json_line(const char *s, Py_ssize_t len, const Field *fields, Names *names, PyObject *keys,
                     Growing *indices, Growing *data, uint32_t stamp, Scalar *id, Scalar *label, int *error) {
    Py_ssize_t indices_before = indices->len, data_before = data->len, k = skip_space(s, 0);
    int has_x = 0;
    id->kind = label->kind = V_NONE;
    if (s[k] != '{') return LINE_PYTHON;
    k = skip_space(s, k + 1);
    for (;;) {
        Py_ssize_t start, name_len;
        k = member_name(s, k, s + len + 1, &start, &name_len);
        if (k < 0) goto python;
        if (is_field(s + start, name_len, &fields[1])) {
            if (has_x || s[k] != '{') goto python;
            has_x = 1;
            k = json_features(s, k, s + len + 1, names, keys, indices, data, stamp, error);
        } else if (is_field(s + start, name_len, &fields[0])) {
            if (id->kind != V_NONE) goto python;
            k = json_scalar(s, k, s + len + 1, id, NULL);
            if (id->kind == V_TRUE || id->kind == V_FALSE) goto python;
        } else if (is_field(s + start, name_len, &fields[2])) {
            if (label->kind != V_NONE) goto python;
            k = json_scalar(s, k, s + len + 1, label, NULL);
        } else goto python;  /* the text, or a member the event does not know */
        if (k < 0) goto python;
        k = skip_space(s, k);
        if (s[k] == '}') break;
        if (s[k] != ',') goto python;
        k = skip_space(s, k + 1);
    }
    if (skip_space(s, k + 1) != len || !has_x || label->kind == V_NONE) goto python;
    return LINE_ROW;
python:
    indices->len = indices_before;
    data->len = data_before;
    return LINE_PYTHON;
}

/* parse_json_events(values, id_field, x_field, label_field, text_field, max_bytes, names, keys, with_ids)
 * -> (status, indptr, indices, data, ids, labels): status per value as bytes (0 row, 2 for the Python
 * parser); one CSR row, id (None when absent; ``ids`` is None without ``with_ids``) and label per status-0
 * value. ``names`` is a name_table() kept from call to call: the columns of this call are named by ``keys``
 * (filled in first-seen order), or, when the table hashes (``keys`` None), are the names' hashed columns. */
static PyObject *parse_json_events(PyObject *self, PyObject *args) {
    PyObject *values, *field_names[4], *capsule, *keys;
    Py_ssize_t max_bytes;
    int with_ids;
    if (!PyArg_ParseTuple(args, "O!UUUUnOOp", &PyList_Type, &values, &field_names[0], &field_names[1],
                          &field_names[2], &field_names[3], &max_bytes, &capsule, &keys, &with_ids))
        return NULL;
    Names *names = PyCapsule_GetPointer(capsule, "pegasos_stream.names");
    if (!names) return NULL;
    if (names->hash_bits ? keys != Py_None : !PyList_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "parse_json_events: keys: expected a list, or None with a table that hashes");
        return NULL;
    }
    if (names->busy) {  /* a finalizer run inside a call of the table's would see it half updated */
        PyErr_SetString(PyExc_RuntimeError, "parse_json_events: the name table is in use");
        return NULL;
    }
    names->call++;
    names->columns = 0;
    Field fields[4];  /* id, x, label, text */
    int distinct = read_fields(field_names, fields);
    Growing status = {.in_bytes = 1}, indptr = {.in_bytes = 1}, indices = {.in_bytes = 1}, data = {.in_bytes = 1};
    PyObject *ids = with_ids ? PyList_New(0) : Py_NewRef(Py_None), *labels = PyList_New(0);
    int64_t nnz = 0;
    Py_ssize_t n = PyList_GET_SIZE(values), size = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *value = PyList_GET_ITEM(values, r);
        if (PyBytes_Check(value) && PyBytes_GET_SIZE(value) <= max_bytes) size += PyBytes_GET_SIZE(value);
    }
    /* A big batch reserves room for the most its values can hold (a feature takes 4 bytes at least):
     * pages are only faulted in as they fill, whereas a buffer that doubles would fault in fresh pages
     * for each copy. A small one grows by doubling, in memory the allocator reuses from call to call. */
    size = size / 4 * 8;
    size = size < ((Py_ssize_t)1 << 23) ? 0 : size < ((Py_ssize_t)1 << 30) ? size : ((Py_ssize_t)1 << 30);
    if (!ids || !labels || reserve(&status, n) < 0
        || reserve(&indptr, 8 * (n + 1)) < 0 || reserve(&indices, size) < 0 || reserve(&data, size) < 0
        || grow(&indptr, &nnz, 8) < 0)
        goto fail;
    names->busy = 1;
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(values); r++) {
        PyObject *value = PyList_GET_ITEM(values, r);
        if (!PyBytes_Check(value)) { PyErr_SetString(PyExc_TypeError, "parse_json_events: expected bytes"); goto fail; }
        Py_ssize_t len = PyBytes_GET_SIZE(value);
        const char *s = PyBytes_AS_STRING(value);
        Scalar id, label;
        int error = 0;
        Py_INCREF(value);  /* read while new objects are made, which may run a finalizer that drops it from the list */
        char kind = (len > max_bytes || !distinct) ? LINE_PYTHON
            : (char)json_line(s, len, fields, names, keys, &indices, &data, next_row(names), &id, &label, &error);
        int failed = error || grow(&status, &kind, 1) < 0;
        if (!failed && kind == LINE_ROW) {
            nnz = indices.len / 8;
            PyObject *id_object = NULL, *label_object = NULL;
            failed = grow(&indptr, &nnz, 8) < 0
                || (with_ids && (!(id_object = scalar_object(s, &id)) || PyList_Append(ids, id_object) < 0))
                || !(label_object = scalar_object(s, &label)) || PyList_Append(labels, label_object) < 0;
            Py_XDECREF(id_object);
            Py_XDECREF(label_object);
        }
        Py_DECREF(value);
        if (failed) goto fail;
    }
    names->busy = 0;
    return Py_BuildValue("NNNNNN", take_bytes(&status), take_bytes(&indptr), take_bytes(&indices),
                         take_bytes(&data), ids, labels);
fail:
    names->busy = 0;
    discard(&status);
    discard(&indptr);
    discard(&indices);
    discard(&data);
    Py_XDECREF(ids);
    Py_XDECREF(labels);
    return NULL;
}

/* -- JSON text events --------------------------------------------------------------------------- */

/* The length of the UTF-8 sequence at s (a first byte >= 0x80) if it is one Python's strict decoder takes
 * (no overlong form, no surrogate, nothing past U+10FFFF); 0 otherwise. s is read up to its NUL at most. */
static inline int utf8_sequence(const unsigned char *s) {
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    int n;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; if (c == 0xE0) lo = 0xA0; else if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; if (c == 0xF0) lo = 0x90; else if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < n; i++) if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return n;
}

static inline int hex_value(unsigned char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The value of the four hex digits at s; -1 if they are not four hex digits. */
static inline int hex4(const unsigned char *s) {
    int code = 0;
    for (int i = 0; i < 4; i++) {
        int digit = hex_value(s[i]);
        if (digit < 0) return -1;
        code = code * 16 + digit;
    }
    return code;
}

/* The JSON string at s[k] == '"' of an input of len bytes, as json.loads reads it (strict: no raw control
 * character), its value appended to ``out`` in UTF-8 when ``out`` is given: the index past its closing quote.
 * -1 for anything the Python parser must take: invalid UTF-8, a bad escape, or a \u escape of a surrogate that
 * is not the high half of a pair of escapes (json keeps those alone, and only surrogatepass encodes them). -2 on
 * a memory error. */
static Py_ssize_t json_text(const char *s, Py_ssize_t k, Py_ssize_t len, Growing *out, PyThreadState **released) {
    const unsigned char *u = (const unsigned char *)s;
    k++;
    for (;;) {
        Py_ssize_t run = k;
#if defined(__SSE2__)
        /* Sixteen bytes at a time while they lie within the input: a signed byte below 0x20 is a control
         * character or a byte of a multi-byte UTF-8 sequence; those, a quote and a backslash end the run. */
        const __m128i space = _mm_set1_epi8(0x20), quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
        while (k + 16 <= len) {
            __m128i bytes = _mm_loadu_si128((const __m128i *)(s + k));
            __m128i stop = _mm_or_si128(_mm_cmplt_epi8(bytes, space),
                                        _mm_or_si128(_mm_cmpeq_epi8(bytes, quote), _mm_cmpeq_epi8(bytes, backslash)));
            int mask = _mm_movemask_epi8(stop);
            if (mask) {
                k += __builtin_ctz((unsigned)mask);
                break;
            }
            k += 16;
        }
#else
        (void)len;
#endif
        while (u[k] >= 0x20 && u[k] < 0x80 && u[k] != '"' && u[k] != '\\') k++;
        if (out && k > run && grow_released(out, s + run, k - run, released) < 0) return -2;
        unsigned char c = u[k];
        if (c == '"') return k + 1;
        if (c >= 0x80) {
            int n = utf8_sequence(u + k);
            if (!n) return -1;
            if (out && grow_released(out, s + k, n, released) < 0) return -2;
            k += n;
            continue;
        }
        if (c != '\\') return -1;  /* a raw control character, or the end of the input */
        char one;
        switch (u[k + 1]) {
        case '"': one = '"'; break;
        case '\\': one = '\\'; break;
        case '/': one = '/'; break;
        case 'b': one = '\b'; break;
        case 'f': one = '\f'; break;
        case 'n': one = '\n'; break;
        case 'r': one = '\r'; break;
        case 't': one = '\t'; break;
        case 'u': {
            int code = hex4(u + k + 2), low = -1;
            if (code < 0) return -1;
            k += 6;
            if (code >= 0xD800 && code <= 0xDBFF && u[k] == '\\' && u[k + 1] == 'u') {
                low = hex4(u + k + 2);  /* a high surrogate escape and a low one make one code point, as in json */
                if (low < 0xDC00 || low > 0xDFFF) return -1;
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                k += 6;
            }
            if (code >= 0xD800 && code <= 0xDFFF) return -1;  /* a lone surrogate: encoded by surrogatepass */
            char utf8[4];
            int n;
            if (code < 0x80) { utf8[0] = (char)code; n = 1; }
            else if (code < 0x800) { utf8[0] = (char)(0xC0 | (code >> 6)); utf8[1] = (char)(0x80 | (code & 0x3F)); n = 2; }
            else if (code < 0x10000) {
                utf8[0] = (char)(0xE0 | (code >> 12));
                utf8[1] = (char)(0x80 | ((code >> 6) & 0x3F));
                utf8[2] = (char)(0x80 | (code & 0x3F));
                n = 3;
            } else {
                utf8[0] = (char)(0xF0 | (code >> 18));
                utf8[1] = (char)(0x80 | ((code >> 12) & 0x3F));
                utf8[2] = (char)(0x80 | ((code >> 6) & 0x3F));
                utf8[3] = (char)(0x80 | (code & 0x3F));
                n = 4;
            }
            if (out && grow_released(out, utf8, n, released) < 0) return -2;
            continue;
        }
        default: return -1;
        }
        if (out && grow_released(out, &one, 1, released) < 0) return -2;
        k += 2;
    }
}

/* One JSON value: a labelled text event in the grammar the Python parser agrees with, its id, label and
 * text (appended to ``text``; whatever the value, ``text`` may have grown: the caller keeps its length). The GIL
 * may be released (``released``, as scan_number takes it). Members other than the id, label and text are skipped
 * when they hold a string, a number of at most 18 digits, true, false or null; anything else (the features
 * member, nested values, a repeated member, no text or no label) is LINE_PYTHON. -2 on a memory error. */
static int json_text_line(const char *s, Py_ssize_t len, const Field *fields, Growing *text, Scalar *id,
                          Scalar *label, PyThreadState **released) {
    Py_ssize_t k = skip_space(s, 0);
    int has_text = 0;
    id->kind = label->kind = V_NONE;
    if (s[k] != '{') return LINE_PYTHON;
    k = skip_space(s, k + 1);
    for (;;) {
        Py_ssize_t start, name_len;
        k = member_name(s, k, s + len + 1, &start, &name_len);
        if (k < 0) return LINE_PYTHON;
        if (is_field(s + start, name_len, &fields[3])) {
            if (has_text || s[k] != '"') return LINE_PYTHON;
            has_text = 1;
            k = json_text(s, k, len, text, released);
            if (k == -2) return -2;
        } else if (is_field(s + start, name_len, &fields[0])) {
            if (id->kind != V_NONE) return LINE_PYTHON;
            k = json_scalar(s, k, s + len + 1, id, released);
            if (id->kind == V_TRUE || id->kind == V_FALSE) return LINE_PYTHON;
        } else if (is_field(s + start, name_len, &fields[2])) {
            if (label->kind != V_NONE) return LINE_PYTHON;
            k = json_scalar(s, k, s + len + 1, label, released);
        } else if (is_field(s + start, name_len, &fields[1])) {
            return LINE_PYTHON;  /* a feature event */
        } else {  /* a member the event does not use; a repeat of one goes unnoticed, as json keeps the last */
            Scalar skipped;
            if (s[k] == '"') k = json_text(s, k, len, NULL, released);
            else if (!strncmp(s + k, "null", 4)) k += 4;
            else k = json_scalar(s, k, s + len + 1, &skipped, released);
        }
        if (k < 0) return LINE_PYTHON;
        k = skip_space(s, k);
        if (s[k] == '}') break;
        if (s[k] != ',') return LINE_PYTHON;
        k = skip_space(s, k + 1);
    }
    if (skip_space(s, k + 1) != len || !has_text || label->kind == V_NONE) return LINE_PYTHON;
    return LINE_ROW;
}

/* A labelled text event that parse_json_texts read: its value's index, its text's place in the texts read, its id
 * and label. */
typedef struct { Py_ssize_t value, offset, len; Scalar id, label; } TextRow;

/* parse_json_texts(values, id_field, x_field, label_field, text_field, max_bytes) -> (status, texts, ids,
 * labels): status per value as bytes (0 a labelled text event, 2 for the Python parser); per status-0 value
 * its text in UTF-8 (bytes, as json.loads(value)[text_field].encode("utf-8") gives it), its id (None when
 * absent) and its label, as json.loads gives them. The values are read without the GIL (each held meanwhile), so
 * that another thread runs Python while this one parses; the objects are made after, with it. */
static PyObject *parse_json_texts(PyObject *self, PyObject *args) {
    PyObject *values, *field_names[4];
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "O!UUUUn", &PyList_Type, &values, &field_names[0], &field_names[1], &field_names[2],
                          &field_names[3], &max_bytes))
        return NULL;
    Field fields[4];  /* id, x, label, text */
    int distinct = read_fields(field_names, fields);
    Py_ssize_t n = PyList_GET_SIZE(values);
    for (Py_ssize_t r = 0; r < n; r++)
        if (!PyBytes_Check(PyList_GET_ITEM(values, r))) {
            PyErr_SetString(PyExc_TypeError, "parse_json_texts: expected bytes");
            return NULL;
        }
    PyObject **held = PyMem_Malloc((n ? n : 1) * sizeof(PyObject *));  /* the values, each held while read */
    if (!held) return PyErr_NoMemory();
    for (Py_ssize_t r = 0; r < n; r++) Py_INCREF(held[r] = PyList_GET_ITEM(values, r));
    Growing status = {.in_bytes = 1}, text = {0}, rows = {0};  /* rows: a TextRow per status-0 value */
    PyObject *result = NULL, *texts = NULL, *ids = NULL, *labels = NULL;
    int failed = 0;
    PyThreadState *released = PyEval_SaveThread();
    for (Py_ssize_t r = 0; r < n && !failed; r++) {
        const char *s = PyBytes_AS_STRING(held[r]);
        Py_ssize_t len = PyBytes_GET_SIZE(held[r]);
        TextRow row = {r, text.len, 0, {0}, {0}};
        int kind = len > max_bytes || !distinct
                       ? LINE_PYTHON
                       : json_text_line(s, len, fields, &text, &row.id, &row.label, &released);
        char code = (char)kind;
        failed = kind == -2 || grow_released(&status, &code, 1, &released) < 0;
        if (!failed && kind == LINE_ROW) {
            row.len = text.len - row.offset;
            failed = grow_released(&rows, &row, sizeof row, &released) < 0;
        } else
            text.len = row.offset;
    }
    PyEval_RestoreThread(released);
    if (failed) goto done;
    texts = PyList_New(0), ids = PyList_New(0), labels = PyList_New(0);
    if (!texts || !ids || !labels) goto done;
    const TextRow *row = (const TextRow *)rows.data;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)(rows.len / sizeof *row); i++, row++) {
        const char *s = PyBytes_AS_STRING(held[row->value]);
        PyObject *objects[3] = {PyBytes_FromStringAndSize(text.data ? text.data + row->offset : "", row->len),
                                scalar_object(s, &row->id), scalar_object(s, &row->label)};
        PyObject *lists[3] = {texts, ids, labels};
        for (int k = 0; k < 3; k++) {
            failed = failed || !objects[k] || PyList_Append(lists[k], objects[k]) < 0;
            Py_XDECREF(objects[k]);
        }
        if (failed) goto done;
    }
    result = Py_BuildValue("NNNN", take_bytes(&status), texts, ids, labels);
    texts = ids = labels = NULL;  /* (taken, or released by Py_BuildValue when it failed) */
done:
    discard(&status);
    discard(&text);
    discard(&rows);
    Py_XDECREF(texts);
    Py_XDECREF(ids);
    Py_XDECREF(labels);
    for (Py_ssize_t r = 0; r < n; r++) Py_DECREF(held[r]);
    PyMem_Free(held);
    return result;
}

static PyMethodDef methods[] = {
    {"parse_svmlight", parse_svmlight, METH_VARARGS, "svmlight lines to (status, indptr, indices, data, labels)."},
    {"parse_json_events", parse_json_events, METH_VARARGS,
     "JSON feature events to (status, indptr, indices, data, ids, labels)."},
    {"parse_json_texts", parse_json_texts, METH_VARARGS,
     "Labelled JSON text events to (status, texts as UTF-8 bytes, ids, labels)."},
    {"name_table", name_table, METH_VARARGS, "An empty table of feature names for parse_json_events."},
    {"name_count", name_count, METH_O, "The names a name_table() holds."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "pegasos_stream.parse._parse", "Compiled parsers of svmlight and JSON records.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__parse(void) {
    crc_init();
    return PyModule_Create(&module);
}
