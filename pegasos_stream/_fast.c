/* Compiled inner loops for replaying a stream in batches.
 *
 * learn_rows: PegasosClassifier.learn_one over the rows of a CSR batch, in order, with the very same
 *     floating-point operations in the same order (sums as Python's built-in sum computes them), so the
 *     model comes out bit-identical. A row that needs a rare branch (folding the scale, clearing the
 *     weights, a refused update, a non-finite margin) is not touched: the loop stops before it and the
 *     caller takes that row through learn_one. Every array is checked (format, shape, lengths, the CSR
 *     structure) before anything is learned, and the loop runs without the GIL.
 * PARAMS, STATE, ISTATE: the names of the entries of learn_rows' parameter, state and integer state arrays,
 *     in their order (the Python side builds and reads the arrays by these names).
 * learn_logistic_rows: AdaGradLogistic.learn_one over the rows of a CSR batch, bit-identical likewise;
 *     dense_dot, logistic_step: its margin and its step on one example over its weight arrays.
 * learn_pegasos_logistic_rows: PegasosLogistic.learn_one over the rows of a CSR batch, bit-identical likewise.
 * dense_axpy: the step of a PegasosClassifier with n_features on one example over its weight array;
 *     dense_dict_dot, dense_dict_axpy: its margin and step taking the example's dict as it is.
 * platt_rows: OnlinePlatt over a run of margins (a committee's sums), as learn_rows calibrates its own.
 * mix_rows: a PegasosMixture's exponential weights with a decreasing fixed share, as learners/hedge.py mixes.
 * check_rows: the CSR checks of learn_rows, naming the repeated column by its key.
 * sparse_dot, axpy_sq_norm: learn_one's passes over one example, as its Python expressions compute them.
 * gather, scatter: the weights a batch touches, out of the learner's dicts and back.
 * rows_from_dicts: feature dicts to CSR columns, naming columns through a dict key -> column.
 * parse_svmlight: svmlight lines to CSR rows at C speed; any line outside the plain ASCII grammar is
 *     marked for the Python parser, which gives the same event or the same error message.
 * read_block: a file's next block, read in (not copied) after the end of the last block's last line, carried;
 * split_lines: a block of a file to the spans of its lines, for parse_svmlight to read in place;
 *     span_list: the spans as bytes objects, for the parsers that take those.
 * parse_json_events: labelled JSON feature events ({id, x, label} in the plain grammar: ASCII, no escapes,
 *     distinct names, numbers as json gives them) to CSR rows, ids and labels; any other value is
 *     marked for the Python parser.
 * parse_json_texts: labelled JSON text events ({id, text, label} and members of plain values) to their texts
 *     in UTF-8, ids and labels; any other value is marked for the Python parser.
 * keep_freed_memory: glibc's malloc keeps freed blocks below a size in the heap, for reuse, instead of
 *     returning their pages to the system (which the next block of that size touches again, page by page).
 *
 * The one-example passes and rows_from_dicts only take dicts whose keys are exact str or int and whose
 * values are exact float, exact int or bool: hashing, comparing and converting those runs no Python code.
 * For anything else they return None and the caller's Python expression gives the result. Wherever Python
 * code may still run (a key of the weight dict with its own __eq__, a finalizer), the objects in use are
 * held by strong references and a dict being iterated that changes size raises the RuntimeError Python's
 * own iteration raises.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "crc32.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Inlined into each caller even at -O2: the loops over index arrays are written once, for int64 and int32
 * indices, and compiled for each (``wide`` a constant at every call). */
#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define ALWAYS_INLINE __forceinline
#else
#define ALWAYS_INLINE inline
#endif

/* Entry k of an index array: int64 when ``wide``, else int32 (scipy's CSR indices, taken as they are). */
#define AT(indices, wide, k) ((wide) ? ((const int64_t *)(indices))[k] : (int64_t)((const int32_t *)(indices))[k])

/* The entries of the state, integer state and parameter arrays of learn_rows: an enum of their indices and
 * a tuple of their names (the module's STATE, ISTATE and PARAMS), from one list each. */
#define STATE_FIELDS(X) X(S_SCALE, "scale") X(S_SQ_NORM, "sq_norm") X(S_B, "intercept") \
    X(S_AVERAGE_B, "average_intercept") X(S_AVERAGE_SCALE, "average_scale") X(S_LOG_SLOPE, "platt_log_slope") \
    X(S_SLOPE, "platt_slope") X(S_OFFSET, "platt_offset") X(S_SQ_GRAD_SLOPE, "platt_sq_grad_slope") \
    X(S_SQ_GRAD_OFFSET, "platt_sq_grad_offset")
#define ISTATE_FIELDS(X) X(I_T, "t") X(I_N_AVERAGED, "n_averaged") X(I_N_POS, "n_pos") X(I_N_NEG, "n_neg") \
    X(I_PLATT_POS, "platt_n_pos") X(I_PLATT_NEG, "platt_n_neg") X(I_NEW_V, "n_new_v") X(I_NEW_OFFSET, "n_new_offset")
#define PARAMS_FIELDS(X) X(P_LAMBDA, "lambda") X(P_HORIZON, "horizon") X(P_T0, "t0") X(P_AVERAGE_FROM, "average_from") \
    X(P_INTERCEPT, "fit_intercept") X(P_PROJECTION, "projection") X(P_RADIUS, "radius") X(P_COST_POS, "cost_pos") \
    X(P_COST_NEG, "cost_neg") X(P_BALANCED, "balanced") X(P_HAS_PRIOR, "has_prior") \
    X(P_COMPENSATED, "compensated_sum") X(P_PLATT_RATE, "platt_rate") X(P_TAIL_START, "tail_start") \
    X(P_TAIL_MASS, "tail_mass") X(P_MIN_TAIL, "min_tail") X(P_MAX_LOG_SLOPE, "max_log_slope") \
    X(P_MIN_SCALE, "min_scale") X(P_MAX_CANCELLATION, "max_average_cancellation") X(P_MAX_NORM, "max_norm") \
    X(P_CALIBRATE, "calibrate")
#define FIELD_INDEX(index, name) index,
#define FIELD_NAME(index, name) name,
enum { STATE_FIELDS(FIELD_INDEX) N_STATE };
enum { ISTATE_FIELDS(FIELD_INDEX) N_ISTATE };
enum { PARAMS_FIELDS(FIELD_INDEX) N_PARAMS };
static const char *const STATE_NAMES[N_STATE] = {STATE_FIELDS(FIELD_NAME)};
static const char *const ISTATE_NAMES[N_ISTATE] = {ISTATE_FIELDS(FIELD_NAME)};
static const char *const PARAMS_NAMES[N_PARAMS] = {PARAMS_FIELDS(FIELD_NAME)};

/* Python's sum() of floats: plain left-to-right before 3.12, Neumaier-compensated since. */
typedef struct { double f, c; int compensated; } Sum;

static ALWAYS_INLINE void sum_add(Sum *s, double x) {
    double t = s->f + x;
    if (s->compensated) {
        if (fabs(s->f) >= fabs(x)) s->c += (s->f - t) + x;
        else s->c += (x - t) + s->f;
    }
    s->f = t;
}

static inline double sum_result(const Sum *s) {
    return (s->c != 0.0 && isfinite(s->c)) ? s->f + s->c : s->f;
}

/* A hint to load the cache line of an address about to be read (nothing where the compiler has no such hint). */
#if defined(__GNUC__)
#define PREFETCH(address) __builtin_prefetch(address)
#else
#define PREFETCH(address) ((void)(address))
#endif

/* How many features ahead the loops over a row ask for the weights they are about to read and write. */
#define AHEAD 16

/* Weights beyond this many bytes are asked for ahead of use (below, they sit in the processor's caches). */
#define FAR_BYTES (1 << 20)

/* sum(w[idx[k]] * x[k]) over k = a..e - 1, summed as sum() sums; ``far``: w is large, its entries are asked
 * for early (a text row's weights lie scattered over it); ``squares``, when given, receives sum(x[k] * x[k]),
 * summed likewise, from the same pass. */
static ALWAYS_INLINE double dot(const double *w, const void *idx, int wide, const double *x, Py_ssize_t a,
                                 Py_ssize_t e, int comp, int far, double *squares) {
    Sum s = {0.0, 0.0, comp}, xx = {0.0, 0.0, comp};
    Py_ssize_t k = a;
    for (; far && k + AHEAD < e; k++) {
        PREFETCH(&w[AT(idx, wide, k + AHEAD)]);
        sum_add(&s, w[AT(idx, wide, k)] * x[k]);
        if (squares) sum_add(&xx, x[k] * x[k]);
    }
    for (; k < e; k++) {
        sum_add(&s, w[AT(idx, wide, k)] * x[k]);
        if (squares) sum_add(&xx, x[k] * x[k]);
    }
    if (squares) *squares = sum_result(&xx);
    return sum_result(&s);
}

/* Python's max(a, b) and min(a, b) for floats: the first argument unless the second is beyond it. */
static inline double py_max(double a, double b) { return b > a ? b : a; }
static inline double py_min(double a, double b) { return b < a ? b : a; }

static double squash(double z, const double *p) {
    double magnitude = fabs(z), tail;
    if (magnitude <= p[P_TAIL_START]) tail = 1.0 / (1.0 + exp(magnitude));
    else tail = py_max(p[P_TAIL_MASS] / magnitude, p[P_MIN_TAIL]);
    return z > 0 ? 1.0 - tail : tail;
}

static void platt_update(double margin, int positive, double *s, int64_t *is, const double *p) {
    double target;
    if (positive) { target = ((double)is[I_PLATT_POS] + 1.0) / ((double)is[I_PLATT_POS] + 2.0); is[I_PLATT_POS]++; }
    else { target = 1.0 / ((double)is[I_PLATT_NEG] + 2.0); is[I_PLATT_NEG]++; }
    double slope = s[S_SLOPE];
    double z = slope * margin + s[S_OFFSET];
    double residual = 1.0 / (1.0 + exp(-py_max(py_min(z, 700.0), -700.0))) - target;
    double grad_slope = residual * margin * slope;
    s[S_SQ_GRAD_SLOPE] += grad_slope * grad_slope;
    if (s[S_SQ_GRAD_SLOPE] > 0.0) {
        double step = p[P_PLATT_RATE] * grad_slope / sqrt(s[S_SQ_GRAD_SLOPE]);
        s[S_LOG_SLOPE] = py_max(py_min(s[S_LOG_SLOPE] - step, p[P_MAX_LOG_SLOPE]), -p[P_MAX_LOG_SLOPE]);
        s[S_SLOPE] = exp(s[S_LOG_SLOPE]);
    }
    s[S_SQ_GRAD_OFFSET] += residual * residual;
    if (s[S_SQ_GRAD_OFFSET] > 0.0) s[S_OFFSET] -= p[P_PLATT_RATE] * residual / sqrt(s[S_SQ_GRAD_OFFSET]);
}

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
static int format_is(const char *format, Kind kind) {
    if (!format) format = "B";
    if (*format == '@' || *format == '=' || *format == (PY_LITTLE_ENDIAN ? '<' : '>')) format++;
    return format[0] && !format[1] && strchr(KINDS[kind].formats, format[0]);
}

typedef struct { Py_buffer view; int held; } Buf;

/* The buffer of ``obj``, a 1-d C-contiguous array of this kind (writable if asked); a ValueError naming the
 * argument otherwise. */
static int get_buffer(PyObject *obj, Buf *b, int writable, Kind kind, const char *function, const char *name) {
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

static void release(Buf *bufs, int n) {
    for (int i = 0; i < n; i++) if (bufs[i].held) PyBuffer_Release(&bufs[i].view);
}

/* Check CSR rows start..n (``indptr`` holds n + 1 entries, ``indices`` nnz; ``prefix`` starts each message): indptr[start:] non-decreasing
 * within 0..nnz, every column within 0..n_columns - 1 and none repeated within a row. The repeats are found with
 * a small hash set of the row's columns (sized for the longest row, its slots stamped with the row that filled
 * them, so that it is never cleared): the cost follows the rows, not the number of columns, which may be every
 * hashed column of a dense learner; ``distinct`` rows (each known to hold a column at most once: rows this package's
 * readers built) skip that search. A ValueError naming the row otherwise; the repeated column is named by its key
 * when ``keys`` (a list of n_columns keys) is given. Runs no Python code unless it fails. */
/* Whether a column of indices[first:last] lies outside 0..n_columns - 1: one branch-free pass in the indices' own
 * width (a negative column is a large unsigned one; int32 columns are below 2^31), four int32 columns at a time
 * where SSE2 is at hand. */
static ALWAYS_INLINE int any_out_of_range(const void *indices, int wide, int64_t first, int64_t last,
                                          Py_ssize_t n_columns) {
    int out = 0;
    int64_t k = first;
    if (wide) {
        const uint64_t *columns = indices, limit = (uint64_t)n_columns;
        for (; k < last; k++) out |= columns[k] >= limit;
        return out;
    }
    const uint32_t *columns = indices, limit = n_columns < INT32_MAX ? (uint32_t)n_columns : (uint32_t)INT32_MAX + 1;
#if defined(__SSE2__)
    if (limit > 0) {  /* column >= limit, unsigned: (column ^ 2^31) > ((limit - 1) ^ 2^31), signed */
        const __m128i bias = _mm_set1_epi32(INT32_MIN), top = _mm_set1_epi32((int32_t)((limit - 1) ^ 0x80000000u));
        __m128i any = _mm_setzero_si128();
        for (; k + 4 <= last; k += 4)
            any = _mm_or_si128(any, _mm_cmpgt_epi32(_mm_xor_si128(_mm_loadu_si128((const __m128i *)(columns + k)),
                                                                  bias), top));
        out = _mm_movemask_epi8(any) != 0;
    }
#endif
    for (; k < last; k++) out |= columns[k] >= limit;
    return out;
}

/* Whether indices[a:e] increase strictly: one branch-free pass, four int32 columns at a time where SSE2 is at
 * hand. */
static ALWAYS_INLINE int increasing(const void *indices, int wide, int64_t a, int64_t e) {
    int up = 1;
    int64_t k = a + 1;
#if defined(__SSE2__)
    if (!wide) {
        const int32_t *columns = indices;
        const __m128i ones = _mm_set1_epi32(-1);
        __m128i down = _mm_setzero_si128();  /* the lanes where a column is not above the one before it */
        for (; k + 4 <= e; k += 4) {
            __m128i above = _mm_cmpgt_epi32(_mm_loadu_si128((const __m128i *)(columns + k)),
                                            _mm_loadu_si128((const __m128i *)(columns + k - 1)));
            down = _mm_or_si128(down, _mm_andnot_si128(above, ones));
        }
        up = _mm_movemask_epi8(down) == 0;
    }
#endif
    for (; k < e; k++) up &= AT(indices, wide, k) > AT(indices, wide, k - 1);
    return up;
}

static ALWAYS_INLINE int check_csr_of(const char *prefix, const int64_t *indptr, Py_ssize_t n, const void *indices,
                                      int wide, Py_ssize_t nnz, Py_ssize_t n_columns, Py_ssize_t start, PyObject *keys,
                                      int distinct, Py_ssize_t *longest_row) {
    if (start < 0 || start > n) {
        PyErr_Format(PyExc_ValueError, "%sstart = %zd is outside 0..%zd (the number of rows)", prefix, start, n);
        return -1;
    }
    if (indptr[start] < 0 || indptr[start] > nnz) {
        PyErr_Format(PyExc_ValueError, "%sindptr[%zd] = %lld is outside 0..%zd (the length of indices)", prefix,
                     start, (long long)indptr[start], nnz);
        return -1;
    }
    int64_t longest = 0;
    for (Py_ssize_t i = start; i < n; i++) {
        int64_t a = indptr[i], e = indptr[i + 1];
        if (e < a || e > nnz) {
            PyErr_Format(PyExc_ValueError, "%srow %zd: indptr[%zd] = %lld %s indptr[%zd] = %lld", prefix, i, i + 1,
                         (long long)e, e < a ? "decreases from" : "is past the end of indices, after",
                         i, (long long)a);
            return -1;
        }
        if (e - a > longest) longest = e - a;
    }
    if (longest_row) *longest_row = (Py_ssize_t)longest;
    if (distinct) {
        int64_t first = indptr[start], last = indptr[n];
        int out = any_out_of_range(indices, wide, first, last, n_columns);
        for (int64_t k = first; out && k < last; k++)
            if (AT(indices, wide, k) < 0 || AT(indices, wide, k) >= n_columns) {
                Py_ssize_t i = start;
                while (indptr[i + 1] <= k) i++;
                PyErr_Format(PyExc_ValueError, "%srow %zd: column %lld is out of range: expected 0 <= column < %zd",
                             prefix, i, (long long)AT(indices, wide, k), n_columns);
                return -1;
            }
        return 0;
    }
    /* rows sorted by column (svmlight files, scipy's canonical CSR) repeat none: one branch-free pass, their
     * first and last columns bounding the rest */
    int sorted = 1;
    int64_t low = 0, high = -1;
    for (Py_ssize_t i = start; i < n; i++) {
        int64_t a = indptr[i], e = indptr[i + 1];
        if (a == e) continue;
        sorted &= increasing(indices, wide, a, e);
        low = AT(indices, wide, a) < low ? AT(indices, wide, a) : low;
        high = AT(indices, wide, e - 1) > high ? AT(indices, wide, e - 1) : high;
    }
    if (sorted && low >= 0 && high < n_columns) return 0;
    size_t size = 16;
    while (size < 2 * (size_t)longest) size *= 2;
    int64_t *slot_column = PyMem_Malloc(size * sizeof(int64_t));
    Py_ssize_t *slot_row = PyMem_Calloc(size, sizeof(Py_ssize_t));  /* row + 1 of the column in the slot; 0: none */
    if (!slot_column || !slot_row) {
        PyMem_Free(slot_column);
        PyMem_Free(slot_row);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = start; i < n; i++) {  /* else row by row, naming the first row that is wrong */
        int64_t k = indptr[i], e = indptr[i + 1], previous = -1;
        /* previous < column < n_columns, in one unsigned comparison (wrapping, as unsigned arithmetic may) */
        uint64_t above = (uint64_t)previous + 1u;
        while (k < e && (uint64_t)AT(indices, wide, k) - above < (uint64_t)n_columns - above) {
            previous = AT(indices, wide, k++);
            above = (uint64_t)previous + 1u;
        }
        if (k == e) continue;
        for (k = indptr[i]; k < e; k++) {
            int64_t column = AT(indices, wide, k);
            if (column < 0 || column >= n_columns) {
                PyErr_Format(PyExc_ValueError, "%srow %zd: column %lld is out of range: expected 0 <= column < %zd",
                             prefix, i, (long long)column, n_columns);
                goto fail;
            }
            size_t s = (size_t)(((uint64_t)column * 0x9E3779B97F4A7C15ull) >> 20) & (size - 1);
            while (slot_row[s] == i + 1 && slot_column[s] != column) s = (s + 1) & (size - 1);
            if (slot_row[s] == i + 1) {
                if (keys) {
                    PyObject *key = PyList_GET_ITEM(keys, column);
                    Py_INCREF(key);
                    PyErr_Format(PyExc_ValueError, "%srow %zd: column %R appears more than once (a feature dict holds "
                                 "one value per key; scipy's sum_duplicates() adds them up)", prefix, i, key);
                    Py_DECREF(key);
                } else
                    PyErr_Format(PyExc_ValueError, "%srow %zd: column %lld appears more than once (a feature dict "
                                 "holds one value per key; scipy's sum_duplicates() adds them up)", prefix, i,
                                 (long long)column);
                goto fail;
            }
            slot_row[s] = i + 1;
            slot_column[s] = column;
        }
    }
    PyMem_Free(slot_column);
    PyMem_Free(slot_row);
    return 0;
fail:
    PyMem_Free(slot_column);
    PyMem_Free(slot_row);
    return -1;
}

/* check_csr_of over the index array ``indices`` (a checked IDX buffer); the most features of a row from ``start``
 * into *longest_row, unless it is NULL. */
static int check_csr(const char *prefix, const int64_t *indptr, Py_ssize_t n, const Buf *indices, Py_ssize_t n_columns,
                     Py_ssize_t start, PyObject *keys, int distinct, Py_ssize_t *longest_row) {
    const void *idx = indices->view.buf;
    Py_ssize_t nnz = length(indices);
    return wide(indices) ? check_csr_of(prefix, indptr, n, idx, 1, nnz, n_columns, start, keys, distinct, longest_row)
                         : check_csr_of(prefix, indptr, n, idx, 0, nnz, n_columns, start, keys, distinct, longest_row);
}

/* check_rows(indptr, indices, keys): check_csr over every row, the columns named by the list ``keys``, or
 * numbered 0..keys - 1 when ``keys`` is an int (the columns of weight arrays). */
static PyObject *check_rows(PyObject *self, PyObject *args) {
    PyObject *o[2], *keys;
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &keys)) return NULL;
    Py_ssize_t n_columns = PyList_Check(keys) ? PyList_GET_SIZE(keys) : PyLong_Check(keys) ? PyLong_AsSsize_t(keys) : -1;
    if (n_columns < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "check_rows: keys: expected a list of keys or a number of columns >= 0");
        return NULL;
    }
    Buf b[2];
    memset(b, 0, sizeof b);
    int failed = get_buffer(o[0], &b[0], 0, I64, "check_rows", "indptr") < 0
        || get_buffer(o[1], &b[1], 0, IDX, "check_rows", "indices") < 0;
    if (!failed && length(&b[0]) < 1) {
        PyErr_SetString(PyExc_ValueError, "check_rows: indptr: expected the n + 1 bounds of n rows, got none");
        failed = 1;
    }
    failed = failed || check_csr("", b[0].view.buf, length(&b[0]) - 1, &b[1], n_columns, 0,
                                 PyList_Check(keys) ? keys : NULL, 0, NULL) < 0;
    release(b, 2);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

enum { A_INDPTR, A_INDICES, A_DATA, A_SIGNS, A_WEIGHTS, A_V, A_OFFSET, A_PRIOR, A_PRESENT_V, A_PRESENT_OFFSET,
       A_NEW_V, A_NEW_OFFSET, A_STATE, A_ISTATE, A_PARAMS, A_DECISIONS, A_PROBAS, A_MARGINS, N_ARRAYS };
static const struct { const char *name; Kind kind; int writable; } ARRAYS[N_ARRAYS] = {
    {"indptr", I64, 0}, {"indices", IDX, 0}, {"data", F64, 0}, {"signs", F64, 0}, {"weights", F64, 0},
    {"v", F64, 1}, {"offset", F64, 1}, {"prior", F64, 0}, {"present_v", BOOL, 1}, {"present_offset", BOOL, 1},
    {"new_v", I64, 1}, {"new_offset", I64, 1}, {"state", F64, 1}, {"istate", I64, 1}, {"params", F64, 0},
    {"decisions", F64, 1}, {"probas", F64, 1}, {"margins", F64, 1},
};

/* Whether array ``a`` holds ``expected`` items; a ValueError naming it and ``what`` should count them if not. */
static int check_length(const Buf *b, int a, Py_ssize_t expected, const char *what) {
    if (length(&b[a]) == expected) return 0;
    PyErr_Format(PyExc_ValueError, "learn_rows: %s: %zd items, expected %zd (%s)", ARRAYS[a].name, length(&b[a]),
                 expected, what);
    return -1;
}

/* Whether an integer setting is a whole number of at most 2^53 (it is converted to int64). */
static inline int whole(double x) { return x >= 0.0 && x <= 9007199254740992.0 && x == floor(x); }

/* Everything learn_rows reads and writes checked: formats, lengths, the CSR rows from ``start``, the integer
 * settings and counters, and room for the columns first written (one per absent column at most); the most features
 * of a row from ``start`` into *longest_row. */
static int check_learn_rows(const Buf *b, Py_ssize_t start, int distinct, Py_ssize_t *longest_row) {
    Py_ssize_t n = length(&b[A_SIGNS]), nnz = length(&b[A_INDICES]), m = length(&b[A_V]);
    static const int per_row[] = {A_WEIGHTS, A_DECISIONS};
    /* one entry per column, or none: the average's offset without averaging, the prior without one, the
     * presence flags and the list of columns first written of weights whose every column is present (arrays) */
    static const int per_column[] = {A_OFFSET, A_PRIOR, A_PRESENT_V, A_PRESENT_OFFSET, A_NEW_V, A_NEW_OFFSET};
    if (check_length(b, A_INDPTR, n + 1, "one more than the rows of signs")
        || check_length(b, A_DATA, nnz, "as many as indices")
        || check_length(b, A_STATE, N_STATE, "the names of STATE")
        || check_length(b, A_ISTATE, N_ISTATE, "the names of ISTATE")
        || check_length(b, A_PARAMS, N_PARAMS, "the names of PARAMS"))
        return -1;
    for (size_t k = 0; k < sizeof per_row / sizeof *per_row; k++)
        if (check_length(b, per_row[k], n, "one per row of signs")) return -1;
    if (length(&b[A_PROBAS]) && check_length(b, A_PROBAS, n, "one per row of signs, or none")) return -1;
    if (length(&b[A_MARGINS]) && check_length(b, A_MARGINS, n, "one per row of signs, or none")) return -1;
    const double *p = b[A_PARAMS].view.buf;
    const int optional[] = {p[P_AVERAGE_FROM] == 0.0, p[P_HAS_PRIOR] == 0.0, 1, 1, 1, 1};
    for (size_t k = 0; k < sizeof per_column / sizeof *per_column; k++)
        if (!(optional[k] && length(&b[per_column[k]]) == 0) && check_length(b, per_column[k], m, "one per column, as v"))
            return -1;
    if ((length(&b[A_PRESENT_V]) == 0) != (length(&b[A_NEW_V]) == 0)
        || (length(&b[A_PRESENT_OFFSET]) == 0) != (length(&b[A_NEW_OFFSET]) == 0)) {
        PyErr_SetString(PyExc_ValueError, "learn_rows: present_v and new_v, present_offset and new_offset: "
                        "expected both empty (every column present) or both one per column");
        return -1;
    }
    if (!whole(p[P_HORIZON]) || !whole(p[P_T0]) || !whole(p[P_AVERAGE_FROM])) {
        PyErr_SetString(PyExc_ValueError, "learn_rows: params: horizon, t0 and average_from must be whole numbers >= 0");
        return -1;
    }
    const int64_t *is = b[A_ISTATE].view.buf;
    for (int k = 0; k < N_ISTATE; k++)
        if (is[k] < 0 || is[k] > ((int64_t)1 << 62)) {
            PyErr_Format(PyExc_ValueError, "learn_rows: istate: %s = %lld is outside 0..2**62", ISTATE_NAMES[k],
                         (long long)is[k]);
            return -1;
        }
    static const int presence[2][2] = {{A_PRESENT_V, I_NEW_V}, {A_PRESENT_OFFSET, I_NEW_OFFSET}};
    for (int k = 0; k < 2; k++) {
        const char *present = b[presence[k][0]].view.buf;
        Py_ssize_t absent = 0;
        for (Py_ssize_t j = 0; j < length(&b[presence[k][0]]); j++) absent += !present[j];
        if (is[presence[k][1]] > m - absent) {
            PyErr_Format(PyExc_ValueError, "learn_rows: istate: %s = %lld leaves no room for the %zd absent columns",
                         ISTATE_NAMES[presence[k][1]], (long long)is[presence[k][1]], absent);
            return -1;
        }
    }
    return check_csr("learn_rows: ", b[A_INDPTR].view.buf, n, &b[A_INDICES], m, start, NULL, distinct, longest_row);
}

/* v[idx[k]] = saved[k - a] for the row's features, last first: the weights as they were before a step. */
static ALWAYS_INLINE void put_back(double *v, const void *idx, int wide, const double *saved, Py_ssize_t a,
                                   Py_ssize_t e) {
    for (Py_ssize_t k = e - 1; k >= a; k--) v[AT(idx, wide, k)] = saved[k - a];
}

/* learn_rows' loop over the checked buffers ``b`` from row ``start`` (``saved``: room for the longest row's
 * weights), for int64 (``wide``) or int32 indices, summing as Python 3.12's sum() (``comp``) or as 3.11's; returns
 * the row it stopped before. Runs without the GIL: the
 * arrays must not change under it (another thread writing into them while it runs is a race the caller must not
 * start). */
static ALWAYS_INLINE Py_ssize_t pegasos_loop(const Buf *b, Py_ssize_t start, double *saved, int wide, int comp) {
    const int64_t *indptr = b[A_INDPTR].view.buf;
    const void *idx = b[A_INDICES].view.buf;
    const double *x = b[A_DATA].view.buf, *signs = b[A_SIGNS].view.buf, *weights = b[A_WEIGHTS].view.buf;
    const double *prior = b[A_PRIOR].view.buf, *p = b[A_PARAMS].view.buf;
    double *v = b[A_V].view.buf, *offset = b[A_OFFSET].view.buf, *s = b[A_STATE].view.buf;
    char *present_v = b[A_PRESENT_V].view.buf, *present_offset = b[A_PRESENT_OFFSET].view.buf;
    int64_t *new_v = b[A_NEW_V].view.buf, *new_offset = b[A_NEW_OFFSET].view.buf, *is = b[A_ISTATE].view.buf;
    double *decisions = b[A_DECISIONS].view.buf, *probas = b[A_PROBAS].view.buf, *margins = b[A_MARGINS].view.buf;
    Py_ssize_t n = length(&b[A_SIGNS]);
    int has_prior = p[P_HAS_PRIOR] != 0.0, averaged = p[P_AVERAGE_FROM] != 0.0;
    int track_v = length(&b[A_PRESENT_V]) != 0, track_offset = length(&b[A_PRESENT_OFFSET]) != 0;
    int calibrated = length(&b[A_PROBAS]) != 0;  /* probas wanted */
    int margins_wanted = length(&b[A_MARGINS]) != 0;
    /* fit_intercept: 0 no bias, 1 the unregularised one, -cap (< 0) the regularised one, its steps at most cap */
    double bias_cap = -p[P_INTERCEPT];
    int far = length(&b[A_V]) * (Py_ssize_t)sizeof(double) > FAR_BYTES;
    int64_t horizon = (int64_t)p[P_HORIZON], t0 = (int64_t)p[P_T0], average_from = (int64_t)p[P_AVERAGE_FROM];
    double lambda = p[P_LAMBDA], min_scale = p[P_MIN_SCALE];
    Py_ssize_t i;
    for (i = start; i < n; i++) {
        Py_ssize_t a = indptr[i], e = indptr[i + 1];
        double sign = signs[i], weight = weights[i];
        int64_t t = is[I_T] + 1;
        int64_t t_eff = ((horizon > 0 && t > horizon) ? horizon : t) + t0;
        if (t_eff == 1) break;  /* the shrink clears the weights: learn_one's business */

        /* margins, as _margins computes them */
        int averaging = is[I_N_AVERAGED] > 0;
        double squares, vx = dot(v, idx, wide, x, a, e, comp, far, &squares), current, predicting;
        if (averaging) {
            current = vx * s[S_SCALE];
            predicting = (s[S_AVERAGE_SCALE] * vx + dot(offset, idx, wide, x, a, e, comp, far, NULL))
                         / (double)is[I_N_AVERAGED];
        } else {
            current = predicting = vx * s[S_SCALE];
        }
        if (has_prior) {
            double pr = dot(prior, idx, wide, x, a, e, comp, far, NULL);
            current += pr;
            predicting += pr;
        }
        if (!isfinite(current) || !isfinite(predicting)) break;
        double margin = current + s[S_B];
        double decision = predicting + (averaging ? s[S_AVERAGE_B] : s[S_B]);

        /* the step, checked before anything changes */
        int64_t n_pos = is[I_N_POS] + (sign > 0), n_neg = is[I_N_NEG] + (sign < 0);
        double coef = 0.0;
        if (sign * margin < 1.0) {
            /* the class cost; "balanced" (its pseudo-count, when not 0) takes the cost from the
             * counts, at most the class's cost_pos or cost_neg */
            double cost = sign > 0 ? p[P_COST_POS] : p[P_COST_NEG], alpha = p[P_BALANCED];
            if (alpha != 0.0)
                cost = py_min(((double)(n_pos + n_neg) + 2.0 * alpha)
                              / (2.0 * ((double)(sign > 0 ? n_pos : n_neg) + alpha)), cost);
            coef = weight * cost * sign;
        }
        double rate = 1.0 / (lambda * (double)t_eff);
        double shrink = 1.0 - 1.0 / (double)t_eff;
        double scale = s[S_SCALE] * shrink;
        if (scale < min_scale) break;
        double sq_norm = s[S_SQ_NORM], d = 0.0;
        if (coef != 0.0) {
            double bound = shrink * (s[S_SCALE] * sqrt(py_max(sq_norm, 0.0)));
            bound += rate * fabs(coef) * sqrt(squares);
            if (!(bound < p[P_MAX_NORM])) break;
            d = rate * coef / scale;
            Sum fresh = {0.0, 0.0, comp}, old = {0.0, 0.0, comp};
            for (Py_ssize_t k = a; k < e; k++) {  /* written now; put back below if the row is left to learn_one */
                int64_t j = AT(idx, wide, k);
                double before = v[j], after = before + d * x[k];
                saved[k - a] = before;
                v[j] = after;
                sum_add(&fresh, after * after);
                sum_add(&old, before * before);
            }
            sq_norm += sum_result(&fresh) - sum_result(&old);
            if (p[P_PROJECTION] != 0.0) {
                double norm = scale * sqrt(py_max(sq_norm, 0.0));
                if (norm > p[P_RADIUS]) {
                    scale *= p[P_RADIUS] / norm;
                    if (scale < min_scale) {
                        put_back(v, idx, wide, saved, a, e);
                        break;
                    }
                }
            }
        }
        int accumulate = averaged && t >= average_from;
        if (accumulate && s[S_AVERAGE_SCALE] + scale > p[P_MAX_CANCELLATION] * (double)(is[I_N_AVERAGED] + 1) * scale) {
            if (coef != 0.0) put_back(v, idx, wide, saved, a, e);
            break;
        }

        /* commit */
        decisions[i] = decision;
        if (margins_wanted) margins[i] = margin;
        if (calibrated) probas[i] = squash(s[S_SLOPE] * decision + s[S_OFFSET], p);
        is[I_T] = t;
        s[S_SCALE] = s[S_SCALE] * shrink;
        if (bias_cap > 0.0) s[S_B] = shrink * s[S_B] + py_min(rate, bias_cap) * coef;
        else if (p[P_INTERCEPT] != 0.0) s[S_B] += rate * coef;
        if (coef != 0.0) {
            double minus_a_d = -s[S_AVERAGE_SCALE] * d;
            int shift_offset = averaged && s[S_AVERAGE_SCALE] != 0.0;
            for (Py_ssize_t k = a; (track_v || shift_offset) && k < e; k++) {  /* v is written already */
                int64_t j = AT(idx, wide, k);
                if (track_v && !present_v[j]) { present_v[j] = 1; new_v[is[I_NEW_V]++] = j; }
                if (shift_offset) {
                    offset[j] = offset[j] + minus_a_d * x[k];
                    if (track_offset && !present_offset[j]) {
                        present_offset[j] = 1;
                        new_offset[is[I_NEW_OFFSET]++] = j;
                    }
                }
            }
            s[S_SQ_NORM] = sq_norm;
            s[S_SCALE] = scale;
        }
        if (accumulate) {
            s[S_AVERAGE_SCALE] += s[S_SCALE];
            is[I_N_AVERAGED]++;
            s[S_AVERAGE_B] += (s[S_B] - s[S_AVERAGE_B]) / (double)is[I_N_AVERAGED];
        }
        is[I_N_POS] = n_pos;
        is[I_N_NEG] = n_neg;
        if (p[P_CALIBRATE] != 0.0) platt_update(decision, sign > 0, s, is, p);
    }
    return i;
}

/* learn_rows(indptr, indices, data, signs, weights, v, offset, prior, present_v, present_offset,
 *            new_v, new_offset, state, istate, params, decisions, probas, start[, distinct[, margins]]) -> stop row
 * v (and offset, prior, present_*, new_*) have one entry per column: the gathered weights of a dict learner, or a
 * dense learner's arrays, indexed by the rows' columns. The presence flags and lists of columns first written
 * are empty for weights whose every column is present; offset is empty without averaging, prior without one;
 * probas is empty when the probabilities are not wanted; margins (each row's margin with the current iterate, the
 * one its step tests: the decision itself unless averaging) is not given or empty when they are not wanted.
 * ``distinct``: the rows are known to hold each column at most once (see check_csr). */
static PyObject *learn_rows(PyObject *self, PyObject *args) {
    static Py_ssize_t no_items = 0;  /* the shape of the margins array when none is given: empty */
    PyObject *o[N_ARRAYS];
    Py_ssize_t start;
    int distinct = 0;
    o[A_MARGINS] = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOOn|pO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &o[15], &o[16], &start, &distinct,
                          &o[A_MARGINS]))
        return NULL;
    Buf b[N_ARRAYS];
    memset(b, 0, sizeof b);
    b[A_MARGINS].view.shape = &no_items;
    for (int a = 0; a < N_ARRAYS; a++)
        if (o[a] != NULL
            && get_buffer(o[a], &b[a], ARRAYS[a].writable, ARRAYS[a].kind, "learn_rows", ARRAYS[a].name) < 0) {
            release(b, N_ARRAYS);
            return NULL;
        }
    Py_ssize_t longest;  /* the most features of a row: room for the weights a step writes, to put them back */
    if (check_learn_rows(b, start, distinct, &longest) < 0) {
        release(b, N_ARRAYS);
        return NULL;
    }
    double *saved = PyMem_Malloc((size_t)(longest + 1) * sizeof(double));
    if (!saved) {
        release(b, N_ARRAYS);
        return PyErr_NoMemory();
    }
    Py_ssize_t stop;
    int comp = ((const double *)b[A_PARAMS].view.buf)[P_COMPENSATED] != 0.0;
    Py_BEGIN_ALLOW_THREADS
        if (wide(&b[A_INDICES])) stop = comp ? pegasos_loop(b, start, saved, 1, 1) : pegasos_loop(b, start, saved, 1, 0);
        else stop = comp ? pegasos_loop(b, start, saved, 0, 1) : pegasos_loop(b, start, saved, 0, 0);
    Py_END_ALLOW_THREADS
    PyMem_Free(saved);
    release(b, N_ARRAYS);
    return PyLong_FromSsize_t(stop);
}

/* platt_rows(margins, signs, probas, state, istate, params): OnlinePlatt over a run of margins, as learn_rows
 * calibrates its own: each margin's probability into probas, then the update with its label (sign > 0). The
 * state, integer state and parameter arrays are learn_rows' (only their Platt entries are read and written). */
static PyObject *platt_rows(PyObject *self, PyObject *args) {
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5])) return NULL;
    static const char *names[6] = {"margins", "signs", "probas", "state", "istate", "params"};
    static const Kind kinds[6] = {F64, F64, F64, F64, I64, F64};
    static const int writable[6] = {0, 0, 1, 1, 1, 0};
    Buf b[6];
    memset(b, 0, sizeof b);
    for (int a = 0; a < 6; a++)
        if (get_buffer(o[a], &b[a], writable[a], kinds[a], "platt_rows", names[a]) < 0) {
            release(b, 6);
            return NULL;
        }
    Py_ssize_t n = length(&b[0]);
    const Py_ssize_t want[6] = {n, n, n, N_STATE, N_ISTATE, N_PARAMS};
    for (int a = 1; a < 6; a++)
        if (length(&b[a]) != want[a]) {
            PyErr_Format(PyExc_ValueError, "platt_rows: %s: %zd items, expected %zd", names[a], length(&b[a]), want[a]);
            release(b, 6);
            return NULL;
        }
    const double *margins = b[0].view.buf, *signs = b[1].view.buf, *p = b[5].view.buf;
    double *probas = b[2].view.buf, *s = b[3].view.buf;
    int64_t *is = b[4].view.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        probas[i] = squash(s[S_SLOPE] * margins[i] + s[S_OFFSET], p);
        platt_update(margins[i], signs[i] > 0, s, is, p);
    }
    release(b, 6);
    Py_RETURN_NONE;
}

/* -- the mixture's exponential weights with a decreasing fixed share ---------------------------------------- */

/* log Σ_k exp(offsets[k] + values[k·stride]) over ``m`` members, the terms added in order, as
 * hedge._log_sum_exp sums the list of those sums. */
static double log_sum_exp(const double *values, Py_ssize_t m, Py_ssize_t stride, const double *offsets) {
    double top = offsets[0] + values[0];
    for (Py_ssize_t k = 1; k < m; k++)
        if (offsets[k] + values[k * stride] > top) top = offsets[k] + values[k * stride];
    double total = 0.0;
    for (Py_ssize_t k = 0; k < m; k++) total += exp(offsets[k] + values[k * stride] - top);
    return top + log(total);
}

/* mix_rows(log_p, log_q, decisions, log_weights, signs, weights, losses, learned, share, update): the loop of
 * hedge.mix_rows_python, with the same floating-point operations in the same order. log_p and log_q hold m rows
 * (members, m = len(log_weights) >= 1) of n columns (examples), C-contiguous, flat; decisions n. With ``update``: signs and
 * weights n, losses m, each example then updates losses and log_weights. */
static PyObject *mix_rows(PyObject *self, PyObject *args) {
    PyObject *o[7];
    Py_ssize_t learned;
    double share;
    int update;
    if (!PyArg_ParseTuple(args, "OOOOOOOndp", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &learned, &share,
                          &update))
        return NULL;
    static const char *names[7] = {"log_p", "log_q", "decisions", "log_weights", "signs", "weights", "losses"};
    static const int writable[7] = {0, 0, 1, 1, 0, 0, 1};
    Buf b[7];
    memset(b, 0, sizeof b);
    for (int a = 0; a < 7; a++)
        if (get_buffer(o[a], &b[a], writable[a], F64, "mix_rows", names[a]) < 0) {
            release(b, 7);
            return NULL;
        }
    Py_ssize_t m = length(&b[3]), n = m ? length(&b[0]) / m : 0;
    const Py_ssize_t want[7] = {m * n, m * n, n, m, update ? n : 0, update ? n : 0, update ? m : 0};
    if (m == 0) {
        PyErr_SetString(PyExc_ValueError, "mix_rows: log_weights: 0 items, expected one per member (at least 1)");
        release(b, 7);
        return NULL;
    }
    for (int a = 0; a < 7; a++)
        if (length(&b[a]) != want[a]) {
            PyErr_Format(PyExc_ValueError, "mix_rows: %s: %zd items, expected %zd", names[a], length(&b[a]), want[a]);
            release(b, 7);
            return NULL;
        }
    if (!(share >= 0.0 && isfinite(share)) || learned < 0) {
        PyErr_Format(PyExc_ValueError, "mix_rows: share = %R, learned = %zd: expected share >= 0 and learned >= 0",
                     PyTuple_GET_ITEM(args, 8), learned);
        release(b, 7);
        return NULL;
    }
    const double *lp = b[0].view.buf, *lq = b[1].view.buf, *signs = b[4].view.buf, *weights = b[5].view.buf;
    double *decisions = b[2].view.buf, *lw = b[3].view.buf, *losses = b[6].view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        decisions[i] = log_sum_exp(lp + i, m, n, lw) - log_sum_exp(lq + i, m, n, lw);
        if (!update) continue;
        const double *likelihoods = signs[i] > 0 ? lp + i : lq + i;
        for (Py_ssize_t k = 0; k < m; k++) {
            double loss = -weights[i] * likelihoods[k * n];
            losses[k] += loss;
            lw[k] -= loss;
        }
        double top = lw[0], sum = 0.0;
        for (Py_ssize_t k = 1; k < m; k++)
            if (lw[k] > top) top = lw[k];
        for (Py_ssize_t k = 0; k < m; k++) sum += exp(lw[k] - top);
        double total = top + log(sum);
        double alpha = share > 0.0 ? share / ((double)(learned + i + 1) + 2.0 * share) : 0.0;
        double keep = alpha > 0.0 ? log1p(-alpha) : 0.0, spread = alpha > 0.0 ? log(alpha / (double)m) : 0.0;
        for (Py_ssize_t k = 0; k < m; k++) {
            double weight = lw[k] - total;
            if (alpha > 0.0) {
                weight += keep;
                double high = weight >= spread ? weight : spread;
                weight = high + log1p(exp(-fabs(weight - spread)));
            }
            lw[k] = weight;
        }
    }
    Py_END_ALLOW_THREADS
    release(b, 7);
    Py_RETURN_NONE;
}



/* -- AdaGrad logistic regression ------------------------------------------------------------------- */

enum { L_INDPTR, L_INDICES, L_DATA, L_SIGNS, L_WEIGHTS, L_COLUMNS, L_W, L_G2, L_PRESENT, L_NEW, L_DECISIONS,
       N_LOGISTIC };
static const struct { const char *name; Kind kind; int writable; } LOGISTIC_ARRAYS[N_LOGISTIC] = {
    {"indptr", I64, 0}, {"indices", IDX, 0}, {"data", F64, 0}, {"signs", F64, 0}, {"weights", F64, 0},
    {"columns", I64, 0}, {"w", F64, 1}, {"g2", F64, 1}, {"present", BOOL, 1}, {"new", I64, 1}, {"decisions", F64, 1},
};

/* learn_logistic_rows' loop over the checked buffers ``b`` from row ``start``, for int64 (``wide``) or int32
 * indices, summing as Python 3.12's sum() (``comp``) or as 3.11's; counts the columns first written in ``n_new`` and returns the row it stopped before. Runs without the
 * GIL. */
static ALWAYS_INLINE Py_ssize_t logistic_loop(const Buf *b, Py_ssize_t start, double rate, double initial, int comp,
                                              Py_ssize_t *n_new, int wide) {
    const int64_t *indptr = b[L_INDPTR].view.buf, *columns = b[L_COLUMNS].view.buf;
    const void *idx = b[L_INDICES].view.buf;
    const double *x = b[L_DATA].view.buf, *signs = b[L_SIGNS].view.buf, *weights = b[L_WEIGHTS].view.buf;
    double *w = b[L_W].view.buf, *g2 = b[L_G2].view.buf, *decisions = b[L_DECISIONS].view.buf;
    char *present = b[L_PRESENT].view.buf;
    int64_t *new = b[L_NEW].view.buf;
    Py_ssize_t i, n = length(&b[L_SIGNS]), M = length(&b[L_W]);
    int mapped = b[L_COLUMNS].held, tracked = length(&b[L_PRESENT]) != 0;
    int far = M * (Py_ssize_t)sizeof(double) > FAR_BYTES;
    for (i = start; i < n; i++) {
        Py_ssize_t a = indptr[i], e = indptr[i + 1];
        Sum sum = {0.0, 0.0, comp};
        for (Py_ssize_t k = a; k < e; k++) {
            if (far && k + AHEAD < e) {  /* a text row's weights lie scattered over the arrays: ask early */
                int64_t ahead = mapped ? columns[AT(idx, wide, k + AHEAD)] : AT(idx, wide, k + AHEAD);
                PREFETCH(&w[ahead]);
                PREFETCH(&g2[ahead]);
            }
            sum_add(&sum, w[mapped ? columns[AT(idx, wide, k)] : AT(idx, wide, k)] * x[k]);
        }
        double margin = sum_result(&sum);
        if (!isfinite(margin)) break;
        decisions[i] = margin;
        double sign = signs[i];
        double coef = -weights[i] * sign / (1.0 + exp(py_max(py_min(sign * margin, 700.0), -700.0)));
        double largest = 0.0;
        for (Py_ssize_t k = a; k < e; k++) largest = py_max(largest, fabs(x[k]));
        double steepest = coef * largest;
        if (e > a && !isfinite(steepest * steepest)) break;  /* a gradient whose square overflows: refused */
        for (Py_ssize_t k = a; k < e; k++) {
            int64_t c = mapped ? columns[AT(idx, wide, k)] : AT(idx, wide, k);
            double g = coef * x[k];
            int known = !tracked || present[c];
            double acc = (known ? g2[c] : initial) + g * g;
            g2[c] = acc;
            w[c] = w[c] - rate * g / sqrt(acc);
            if (!known) {
                present[c] = 1;
                new[(*n_new)++] = c;
            }
        }
    }
    return i;
}

/* learn_logistic_rows(indptr, indices, data, signs, weights, columns, w, g2, present, new, decisions,
 *                     learning_rate, initial_accumulator, compensated, start[, distinct])
 *     -> (stop row, columns first written)
 * AdaGradLogistic.learn_one over CSR rows from ``start``, with the same floating-point operations in the same
 * order. The rows' column j is the weights' column columns[j] (None: column j itself, the rows' columns being the
 * weights' columns): w, g2 and present have one entry per weight column
 * (the gathered weights of a dict learner, or a dense learner's arrays, whose columns are all present: ``present``
 * may then be empty). Each row's margin m = <w, x> (summed as sum() sums) goes into decisions[i]; then, with
 * c = -weight*sign/(1 + exp(clamp(sign*m, ±700))), for each feature in row order g = c*x, g2 += g*g (from
 * initial_accumulator for a column not present), w -= rate*g/sqrt(g2). A column first written is marked present
 * and appended to ``new``. The loop stops before a row whose margin or squared gradient is not finite (learn_one
 * refuses it). Every array is checked first (``distinct``: as in learn_rows); the loop runs without the GIL. */
static PyObject *learn_logistic_rows(PyObject *self, PyObject *args) {
    PyObject *o[N_LOGISTIC];
    double rate, initial;
    int comp, distinct = 0;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOddpn|p", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8],
                          &o[9], &o[10], &rate, &initial, &comp, &start, &distinct))
        return NULL;
    Buf b[N_LOGISTIC];
    memset(b, 0, sizeof b);
    int mapped = o[L_COLUMNS] != Py_None;  /* None: the rows' columns are the weights' columns */
    for (int a = 0; a < N_LOGISTIC; a++)
        if ((a != L_COLUMNS || mapped) && get_buffer(o[a], &b[a], LOGISTIC_ARRAYS[a].writable, LOGISTIC_ARRAYS[a].kind,
                                                     "learn_logistic_rows", LOGISTIC_ARRAYS[a].name) < 0) {
            release(b, N_LOGISTIC);
            return NULL;
        }
    Py_ssize_t n = length(&b[L_SIGNS]), nnz = length(&b[L_INDICES]), M = length(&b[L_W]);
    Py_ssize_t m = mapped ? length(&b[L_COLUMNS]) : M;
    const Py_ssize_t want[N_LOGISTIC] = {n + 1, nnz, nnz, n, n, m, M, M, M, m, n};
    int tracked = length(&b[L_PRESENT]) != 0;  /* no presence flags: every column is present */
    for (int a = 0; a < N_LOGISTIC; a++) {
        if ((a != L_COLUMNS || mapped) && length(&b[a]) != want[a] && !((a == L_PRESENT || a == L_NEW) && !tracked)) {
            PyErr_Format(PyExc_ValueError, "learn_logistic_rows: %s: %zd items, expected %zd", LOGISTIC_ARRAYS[a].name,
                         length(&b[a]), want[a]);
            release(b, N_LOGISTIC);
            return NULL;
        }
    }
    if (!(rate > 0.0 && isfinite(rate) && initial > 0.0 && isfinite(initial))) {
        PyErr_Format(PyExc_ValueError, "learn_logistic_rows: learning_rate = %R, initial_accumulator = %R: expected "
                     "finite numbers > 0", PyTuple_GET_ITEM(args, 11), PyTuple_GET_ITEM(args, 12));
        release(b, N_LOGISTIC);
        return NULL;
    }
    if (check_csr("learn_logistic_rows: ", b[L_INDPTR].view.buf, n, &b[L_INDICES], m, start, NULL, distinct, NULL)
        < 0) {
        release(b, N_LOGISTIC);
        return NULL;
    }
    const int64_t *columns = mapped ? b[L_COLUMNS].view.buf : NULL;
    for (Py_ssize_t j = 0; mapped && j < m; j++)
        if (columns[j] < 0 || columns[j] >= M) {
            PyErr_Format(PyExc_ValueError, "learn_logistic_rows: columns[%zd] = %lld is outside 0..%zd (the weights)",
                         j, (long long)columns[j], M - 1);
            release(b, N_LOGISTIC);
            return NULL;
        }
    Py_ssize_t stop, n_new = 0;
    Py_BEGIN_ALLOW_THREADS
        if (wide(&b[L_INDICES]))
            stop = comp ? logistic_loop(b, start, rate, initial, 1, &n_new, 1)
                        : logistic_loop(b, start, rate, initial, 0, &n_new, 1);
        else
            stop = comp ? logistic_loop(b, start, rate, initial, 1, &n_new, 0)
                        : logistic_loop(b, start, rate, initial, 0, &n_new, 0);
    Py_END_ALLOW_THREADS
    release(b, N_LOGISTIC);
    return Py_BuildValue("nn", stop, n_new);
}

/* The arrays of one example over dense weights: ``w`` (and ``g2``, when given) of the weight columns, the
 * example's ``columns`` (int64, each within w) and ``values`` (float64, as many); a ValueError naming
 * ``function`` otherwise. */
static int dense_example(const char *function, PyObject **o, Buf *b, int n, int writable) {
    static const char *names[4] = {"w", "columns", "values", "g2"};
    static const Kind kinds[4] = {F64, I64, F64, F64};
    for (int a = 0; a < n; a++)
        if (get_buffer(o[a], &b[a], writable && (a == 0 || a == 3), kinds[a], function, names[a]) < 0) return -1;
    Py_ssize_t m = length(&b[0]), k = length(&b[1]);
    if (length(&b[2]) != k) {
        PyErr_Format(PyExc_ValueError, "%s: values: %zd items, expected %zd (one per column)", function, length(&b[2]), k);
        return -1;
    }
    if (n > 3 && length(&b[3]) != m) {
        PyErr_Format(PyExc_ValueError, "%s: g2: %zd items, expected %zd (as w)", function, length(&b[3]), m);
        return -1;
    }
    const int64_t *columns = b[1].view.buf;
    for (Py_ssize_t j = 0; j < k; j++)
        if (columns[j] < 0 || columns[j] >= m) {
            PyErr_Format(PyExc_ValueError, "%s: columns[%zd] = %lld is outside 0..%zd (the weights)", function, j,
                         (long long)columns[j], m - 1);
            return -1;
        }
    return 0;
}

/* dense_dot(w, columns, values, compensated) -> sum(w[c] * v for c, v in zip(columns, values)), summed as sum()
 * sums: AdaGradLogistic's margin over its weight array, as learn_logistic_rows computes it. */
static PyObject *dense_dot(PyObject *self, PyObject *args) {
    PyObject *o[3];
    int comp;
    if (!PyArg_ParseTuple(args, "OOOp", &o[0], &o[1], &o[2], &comp)) return NULL;
    Buf b[3];
    memset(b, 0, sizeof b);
    if (dense_example("dense_dot", o, b, 3, 0) < 0) {
        release(b, 3);
        return NULL;
    }
    const double *w = b[0].view.buf, *x = b[2].view.buf;
    const int64_t *columns = b[1].view.buf;
    Sum sum = {0.0, 0.0, comp};
    for (Py_ssize_t j = 0; j < length(&b[1]); j++) sum_add(&sum, w[columns[j]] * x[j]);
    release(b, 3);
    return PyFloat_FromDouble(sum_result(&sum));
}

/* logistic_step(w, columns, values, g2, coef, learning_rate): AdaGradLogistic's step on one example over its
 * weight arrays, as learn_logistic_rows takes it: for each feature in order, g = coef*x, g2 += g*g,
 * w -= rate*g/sqrt(g2). */
static PyObject *logistic_step(PyObject *self, PyObject *args) {
    PyObject *o[4];
    double coef, rate;
    if (!PyArg_ParseTuple(args, "OOOOdd", &o[0], &o[1], &o[2], &o[3], &coef, &rate)) return NULL;
    Buf b[4];
    memset(b, 0, sizeof b);
    if (dense_example("logistic_step", o, b, 4, 1) < 0) {
        release(b, 4);
        return NULL;
    }
    double *w = b[0].view.buf, *g2 = b[3].view.buf;
    const double *x = b[2].view.buf;
    const int64_t *columns = b[1].view.buf;
    for (Py_ssize_t j = 0; j < length(&b[1]); j++) {
        int64_t c = columns[j];
        double g = coef * x[j];
        double acc = g2[c] + g * g;
        g2[c] = acc;
        w[c] = w[c] - rate * g / sqrt(acc);
    }
    release(b, 4);
    Py_RETURN_NONE;
}

/* dense_axpy(w, columns, values, c, compensated) -> the change of the squared norm: w[k] += c*x for each feature
 * in order, and sum(after*after) - sum(before*before) over them, summed as sum() sums: a dense
 * PegasosClassifier's step on one example, as _axpy_sq_norm takes it over a dict and learn_rows over rows. */
static PyObject *dense_axpy(PyObject *self, PyObject *args) {
    PyObject *o[3];
    double c;
    int comp;
    if (!PyArg_ParseTuple(args, "OOOdp", &o[0], &o[1], &o[2], &c, &comp)) return NULL;
    Buf b[3];
    memset(b, 0, sizeof b);
    if (dense_example("dense_axpy", o, b, 3, 1) < 0) {
        release(b, 3);
        return NULL;
    }
    double *w = b[0].view.buf;
    const double *x = b[2].view.buf;
    const int64_t *columns = b[1].view.buf;
    Sum fresh = {0.0, 0.0, comp}, old = {0.0, 0.0, comp};
    for (Py_ssize_t j = 0; j < length(&b[1]); j++) {
        double before = w[columns[j]], after = before + c * x[j];
        w[columns[j]] = after;
        sum_add(&fresh, after * after);
        sum_add(&old, before * before);
    }
    release(b, 3);
    return PyFloat_FromDouble(sum_result(&fresh) - sum_result(&old));
}

/* -- Pegasos on the logistic loss ------------------------------------------------------------------- */

enum { G_INDPTR, G_INDICES, G_DATA, G_SIGNS, G_WEIGHTS, G_COLUMNS, G_V, G_PRESENT, G_NEW, G_DECISIONS,
       N_PEGASOS_LOGISTIC };
static const struct { const char *name; Kind kind; int writable; } PEGASOS_LOGISTIC_ARRAYS[N_PEGASOS_LOGISTIC] = {
    {"indptr", I64, 0}, {"indices", IDX, 0}, {"data", F64, 0}, {"signs", F64, 0}, {"weights", F64, 0},
    {"columns", I64, 0}, {"v", F64, 1}, {"present", BOOL, 1}, {"new", I64, 1}, {"decisions", F64, 1},
};

/* The settings of pegasos_logistic_loop, and the model's state it reads and writes: w = scale*v, sq_norm = |v|^2,
 * t the steps taken. */
typedef struct { double lambda, min_scale, max_norm, scale, sq_norm; int64_t t0, t; } LogisticPegasos;

/* learn_pegasos_logistic_rows' loop over the checked buffers ``b`` from row ``start``, for int64 (``wide``) or int32
 * indices, summing as Python 3.12's sum() (``comp``) or as 3.11's; counts the columns first written in ``n_new``,
 * updates ``m`` and returns the row it stopped before. Runs without the GIL. */
static ALWAYS_INLINE Py_ssize_t pegasos_logistic_loop(const Buf *b, Py_ssize_t start, LogisticPegasos *m, int comp,
                                                      Py_ssize_t *n_new, int wide) {
    const int64_t *indptr = b[G_INDPTR].view.buf, *columns = b[G_COLUMNS].view.buf;
    const void *idx = b[G_INDICES].view.buf;
    const double *x = b[G_DATA].view.buf, *signs = b[G_SIGNS].view.buf, *weights = b[G_WEIGHTS].view.buf;
    double *v = b[G_V].view.buf, *decisions = b[G_DECISIONS].view.buf;
    char *present = b[G_PRESENT].view.buf;
    int64_t *new = b[G_NEW].view.buf;
    Py_ssize_t i, n = length(&b[G_SIGNS]);
    int mapped = b[G_COLUMNS].held, tracked = length(&b[G_PRESENT]) != 0;
    int far = length(&b[G_V]) * (Py_ssize_t)sizeof(double) > FAR_BYTES;
    double scale = m->scale, sq_norm = m->sq_norm;
    int64_t t = m->t;
#define COLUMN(k) (mapped ? columns[AT(idx, wide, k)] : AT(idx, wide, k))
    for (i = start; i < n; i++) {
        Py_ssize_t a = indptr[i], e = indptr[i + 1];
        int64_t t_eff = t + 1 + m->t0;
        if (t_eff == 1) break;  /* the shrink clears the weights: learn_one's business */
        Sum vx = {0.0, 0.0, comp}, xx = {0.0, 0.0, comp};
        for (Py_ssize_t k = a; k < e; k++) {
            if (far && k + AHEAD < e) PREFETCH(&v[COLUMN(k + AHEAD)]);  /* a text row's weights lie scattered */
            sum_add(&vx, v[COLUMN(k)] * x[k]);
            sum_add(&xx, x[k] * x[k]);
        }
        double margin = sum_result(&vx) * scale;
        if (!isfinite(margin)) break;  /* a value that is not finite, or too large: refused by learn_one */
        double sign = signs[i];
        double coef = weights[i] * sign / (1.0 + exp(py_max(py_min(sign * margin, 700.0), -700.0)));
        double rate = 1.0 / (m->lambda * (double)t_eff), shrink = 1.0 - 1.0 / (double)t_eff;
        double shrunk = scale * shrink;
        if (shrunk < m->min_scale) break;  /* the scale is folded into v: learn_one's business */
        if (coef != 0.0) {
            double bound = shrink * (scale * sqrt(py_max(sq_norm, 0.0)));
            bound += rate * fabs(coef) * sqrt(sum_result(&xx));
            if (!(bound < m->max_norm)) break;  /* refused by learn_one */
        }
        decisions[i] = margin;
        t++;
        scale = shrunk;
        if (coef != 0.0) {
            double d = rate * coef / scale;
            Sum fresh = {0.0, 0.0, comp}, old = {0.0, 0.0, comp};
            for (Py_ssize_t k = a; k < e; k++) {
                int64_t j = COLUMN(k);
                double before = v[j], after = before + d * x[k];
                v[j] = after;
                sum_add(&fresh, after * after);
                sum_add(&old, before * before);
                if (tracked && !present[j]) {
                    present[j] = 1;
                    new[(*n_new)++] = j;
                }
            }
            sq_norm += sum_result(&fresh) - sum_result(&old);
        }
    }
#undef COLUMN
    m->scale = scale;
    m->sq_norm = sq_norm;
    m->t = t;
    return i;
}

/* learn_pegasos_logistic_rows(indptr, indices, data, signs, weights, columns, v, present, new, decisions, scale,
 *                             sq_norm, t, lambda, t0, min_scale, max_norm, compensated, start[, distinct])
 *     -> (stop row, columns first written, scale, sq_norm)
 * PegasosLogistic.learn_one over CSR rows from ``start``, with the same floating-point operations in the same order,
 * on the weights w = scale*v (sq_norm = |v|^2, t steps taken). The rows' column j is the weights' column columns[j]
 * (None: column j itself): v and present have one entry per weight column (the gathered weights of a dict learner,
 * or a dense learner's array, whose columns are all present: ``present`` and ``new`` may then be empty). Each row's
 * margin m = <v, x>*scale (summed as sum() sums) goes into decisions[i]; then, with T = t + 1 + t0,
 * c = weight*sign/(1 + exp(clamp(sign*m, ±700))), rate = 1/(lambda*T) and shrink = 1 - 1/T: scale *= shrink and,
 * unless c == 0, v += (rate*c/scale)*x for each feature in row order, sq_norm following. A column first written
 * is marked present and appended to ``new``. The loop stops before a row learn_one takes itself: a margin that is
 * not finite, a step past the norm bound (refused), the first step of t0 = 0 (which clears the weights) or a scale
 * falling below min_scale (folded into v). Every array is checked first (``distinct``: as in learn_rows); the loop
 * runs without the GIL. */
static PyObject *learn_pegasos_logistic_rows(PyObject *self, PyObject *args) {
    static const char *function = "learn_pegasos_logistic_rows";
    PyObject *o[N_PEGASOS_LOGISTIC];
    LogisticPegasos model;
    long long t, t0;
    int comp, distinct = 0;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOddLdLddpn|p", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &model.scale, &model.sq_norm, &t, &model.lambda, &t0, &model.min_scale,
                          &model.max_norm, &comp, &start, &distinct))
        return NULL;
    Buf b[N_PEGASOS_LOGISTIC];
    memset(b, 0, sizeof b);
    int mapped = o[G_COLUMNS] != Py_None;  /* None: the rows' columns are the weights' columns */
    for (int a = 0; a < N_PEGASOS_LOGISTIC; a++)
        if ((a != G_COLUMNS || mapped) && get_buffer(o[a], &b[a], PEGASOS_LOGISTIC_ARRAYS[a].writable,
                                                     PEGASOS_LOGISTIC_ARRAYS[a].kind, function,
                                                     PEGASOS_LOGISTIC_ARRAYS[a].name) < 0) {
            release(b, N_PEGASOS_LOGISTIC);
            return NULL;
        }
    Py_ssize_t n = length(&b[G_SIGNS]), nnz = length(&b[G_INDICES]), M = length(&b[G_V]);
    Py_ssize_t m = mapped ? length(&b[G_COLUMNS]) : M;
    const Py_ssize_t want[N_PEGASOS_LOGISTIC] = {n + 1, nnz, nnz, n, n, m, M, M, m, n};
    int tracked = length(&b[G_PRESENT]) != 0;  /* no presence flags: every column is present */
    for (int a = 0; a < N_PEGASOS_LOGISTIC; a++) {
        if ((a != G_COLUMNS || mapped) && length(&b[a]) != want[a] && !((a == G_PRESENT || a == G_NEW) && !tracked)) {
            PyErr_Format(PyExc_ValueError, "%s: %s: %zd items, expected %zd", function, PEGASOS_LOGISTIC_ARRAYS[a].name,
                         length(&b[a]), want[a]);
            release(b, N_PEGASOS_LOGISTIC);
            return NULL;
        }
    }
    if (!(model.lambda > 0.0 && isfinite(model.lambda) && model.min_scale >= 0.0 && isfinite(model.min_scale)
          && model.max_norm > 0.0 && isfinite(model.max_norm))) {
        PyErr_Format(PyExc_ValueError, "%s: lambda = %R, min_scale = %R, max_norm = %R: expected finite numbers, "
                     "lambda and max_norm > 0, min_scale >= 0", function, PyTuple_GET_ITEM(args, 13),
                     PyTuple_GET_ITEM(args, 15), PyTuple_GET_ITEM(args, 16));
        release(b, N_PEGASOS_LOGISTIC);
        return NULL;
    }
    if (!(model.scale > 0.0 && isfinite(model.scale) && model.sq_norm >= 0.0 && isfinite(model.sq_norm))) {
        PyErr_Format(PyExc_ValueError, "%s: scale = %R, sq_norm = %R: expected a finite scale > 0 and a finite "
                     "sq_norm >= 0", function, PyTuple_GET_ITEM(args, 10), PyTuple_GET_ITEM(args, 11));
        release(b, N_PEGASOS_LOGISTIC);
        return NULL;
    }
    if (t < 0 || t > (1LL << 53) || t0 < 0 || t0 > (1LL << 53)) {
        PyErr_Format(PyExc_ValueError, "%s: t = %lld, t0 = %lld: expected whole numbers from 0 to 2**53", function, t,
                     t0);
        release(b, N_PEGASOS_LOGISTIC);
        return NULL;
    }
    model.t = t;
    model.t0 = t0;
    if (check_csr("learn_pegasos_logistic_rows: ", b[G_INDPTR].view.buf, n, &b[G_INDICES], m, start, NULL, distinct,
                  NULL) < 0) {
        release(b, N_PEGASOS_LOGISTIC);
        return NULL;
    }
    const int64_t *columns = mapped ? b[G_COLUMNS].view.buf : NULL;
    for (Py_ssize_t j = 0; mapped && j < m; j++)
        if (columns[j] < 0 || columns[j] >= M) {
            PyErr_Format(PyExc_ValueError, "%s: columns[%zd] = %lld is outside 0..%zd (the weights)", function, j,
                         (long long)columns[j], M - 1);
            release(b, N_PEGASOS_LOGISTIC);
            return NULL;
        }
    Py_ssize_t stop, n_new = 0;
    Py_BEGIN_ALLOW_THREADS
        if (wide(&b[G_INDICES]))
            stop = comp ? pegasos_logistic_loop(b, start, &model, 1, &n_new, 1)
                        : pegasos_logistic_loop(b, start, &model, 0, &n_new, 1);
        else
            stop = comp ? pegasos_logistic_loop(b, start, &model, 1, &n_new, 0)
                        : pegasos_logistic_loop(b, start, &model, 0, &n_new, 0);
    Py_END_ALLOW_THREADS
    release(b, N_PEGASOS_LOGISTIC);
    return Py_BuildValue("nndd", stop, n_new, model.scale, model.sq_norm);
}

/* -- one example at a time ------------------------------------------------------------------------ */

/* A key whose hash and comparisons run no Python code (a dict of such keys is looked up in C alone, as long
 * as the dict holds no key with a Python __eq__ of the same hash). */
static inline int plain_key(PyObject *key) { return PyUnicode_CheckExact(key) || PyLong_CheckExact(key); }

/* A value whose conversion to float runs no Python code. */
static inline int plain_value(PyObject *value) {
    return PyFloat_CheckExact(value) || PyLong_CheckExact(value) || PyBool_Check(value);
}

/* A plain value as mul() takes it for a float product: an exact float, or an int converted as float * int
 * converts it. 0 when it is not plain (the caller then computes in Python); -1 on error. */
static inline int feature_value(PyObject *value, double *out) {
    if (PyFloat_CheckExact(value)) { *out = PyFloat_AS_DOUBLE(value); return 1; }
    if (!plain_value(value)) return 0;
    *out = PyLong_AsDouble(value);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 1;
}

/* Whether every key of the dict ``x`` is plain and every value plain (no Python code runs to tell). */
static int plain_features(PyObject *x) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(x, &pos, &key, &value))
        if (!plain_key(key) || !plain_value(value)) return 0;
    return 1;
}

/* Iterating ``x`` went on while it changed size: the error Python's dict iteration raises. */
static int changed_size(PyObject *x, Py_ssize_t size) {
    if (PyDict_GET_SIZE(x) == size) return 0;
    PyErr_SetString(PyExc_RuntimeError, "dictionary changed size during iteration");
    return 1;
}

enum { NOT_HANDLED = 2 };

/* The float of ``key`` in ``v`` into *weight (0.0 when absent), the key held while the lookup may run Python
 * code (a key of v with its own __eq__, which may also change ``x``, of ``size`` items, being iterated):
 * 1, NOT_HANDLED for a weight that is not an exact float, or -1 on error. */
static inline int weight_of(PyObject *v, PyObject *key, PyObject *x, Py_ssize_t size, double *weight) {
    Py_INCREF(key);
    PyObject *found = PyDict_GetItemWithError(v, key);
    Py_DECREF(key);
    if (found && !PyFloat_CheckExact(found)) return NOT_HANDLED;
    if (!found && PyErr_Occurred()) return -1;
    *weight = found ? PyFloat_AS_DOUBLE(found) : 0.0;
    return changed_size(x, size) ? -1 : 1;
}

/* The value at the next position of ``x`` (a position its own, as a values iterator keeps it) as a float into
 * *number: 1; 0 at the end; NOT_HANDLED for a value that is not plain (left to Python), -1 on error. */
static inline int next_number(PyObject *x, Py_ssize_t *pos, double *number) {
    PyObject *value;
    if (!PyDict_Next(x, pos, NULL, &value)) return 0;
    int kind = feature_value(value, number);
    return kind == 0 ? NOT_HANDLED : kind;
}

/* Whether (key, value) is a feature of an array of ``m`` weights as the one-example passes over arrays take it: an
 * exact int key from 0 to m - 1 (its column) and a plain value that converts (its number). No Python code runs;
 * 0 (and no error set) for anything else, which the caller's Python then names. */
static int dense_feature(PyObject *key, PyObject *value, Py_ssize_t m, Py_ssize_t *column, double *number) {
    if (!PyLong_CheckExact(key)) return 0;
    int overflow;
    long long k = PyLong_AsLongLongAndOverflow(key, &overflow);
    if (overflow || k < 0 || k >= m) return 0;
    int kind = feature_value(value, number);
    if (kind < 0) PyErr_Clear();  /* an int beyond the float range: Python names it */
    *column = (Py_ssize_t)k;
    return kind == 1;
}

/* dense_dict_dot(w, x, compensated) -> sum(w[k] * v for k, v in x.items()), summed as sum() sums: a model's margin
 * over its weight array for a non-empty exact dict x of features dense_feature takes, as the arrays of x's columns
 * and values give it (dense_dot); None for any other x. */
static PyObject *dense_dict_dot(PyObject *self, PyObject *args) {
    PyObject *o, *x, *key, *value;
    int comp;
    if (!PyArg_ParseTuple(args, "OOp", &o, &x, &comp)) return NULL;
    if (!PyDict_CheckExact(x) || !PyDict_GET_SIZE(x)) Py_RETURN_NONE;
    Buf b;
    memset(&b, 0, sizeof b);
    if (get_buffer(o, &b, 0, F64, "dense_dict_dot", "w") < 0) {
        release(&b, 1);
        return NULL;
    }
    const double *w = b.view.buf;
    Py_ssize_t m = length(&b), pos = 0, column;
    Sum sum = {0.0, 0.0, comp};
    int taken = 1;
    double number;
    while (taken && PyDict_Next(x, &pos, &key, &value))
        if ((taken = dense_feature(key, value, m, &column, &number))) sum_add(&sum, w[column] * number);
    release(&b, 1);
    if (!taken) Py_RETURN_NONE;
    return PyFloat_FromDouble(sum_result(&sum));
}

/* dense_dict_axpy(w, x, c, compensated) -> the change of the squared norm, as dense_axpy over x's columns and
 * values: w[k] += c*v for each feature in order, and sum(after*after) - sum(before*before); nothing is written
 * unless every feature is one dense_feature takes. None for any other x (nothing written). */
static PyObject *dense_dict_axpy(PyObject *self, PyObject *args) {
    PyObject *o, *x, *key, *value;
    double c;
    int comp;
    if (!PyArg_ParseTuple(args, "OOdp", &o, &x, &c, &comp)) return NULL;
    if (!PyDict_CheckExact(x) || !PyDict_GET_SIZE(x)) Py_RETURN_NONE;
    Buf b;
    memset(&b, 0, sizeof b);
    if (get_buffer(o, &b, 1, F64, "dense_dict_axpy", "w") < 0) {
        release(&b, 1);
        return NULL;
    }
    Py_ssize_t n = PyDict_GET_SIZE(x), m = length(&b), pos = 0, i = 0;
    Py_ssize_t *columns = PyMem_Malloc((size_t)n * sizeof(Py_ssize_t));
    double *numbers = PyMem_Malloc((size_t)n * sizeof(double));
    if (!columns || !numbers) {
        PyMem_Free(columns);
        PyMem_Free(numbers);
        release(&b, 1);
        return PyErr_NoMemory();
    }
    int taken = 1;
    while (taken && i < n && PyDict_Next(x, &pos, &key, &value)) {
        taken = dense_feature(key, value, m, &columns[i], &numbers[i]);
        i++;
    }
    PyObject *result = NULL;
    if (taken && i == n) {
        double *w = b.view.buf;
        Sum fresh = {0.0, 0.0, comp}, old = {0.0, 0.0, comp};
        for (i = 0; i < n; i++) {
            double before = w[columns[i]], after = before + c * numbers[i];
            w[columns[i]] = after;
            sum_add(&fresh, after * after);
            sum_add(&old, before * before);
        }
        result = PyFloat_FromDouble(sum_result(&fresh) - sum_result(&old));
    } else {
        result = Py_NewRef(Py_None);
    }
    PyMem_Free(columns);
    PyMem_Free(numbers);
    release(&b, 1);
    return result;
}

/* sparse_dot(v, x, compensated) -> sum(map(mul, map(v.get, x, repeat(0.0)), x.values())) for a non-empty
 * exact dict x of plain keys and values and an exact dict v of floats, summed as sum() sums; None for any
 * other x or v. The keys and the values of x are read in step, each value after its key's lookup. */
static PyObject *sparse_dot(PyObject *self, PyObject *args) {
    PyObject *v, *x, *key;
    int compensated;
    if (!PyArg_ParseTuple(args, "OOp", &v, &x, &compensated)) return NULL;
    /* sum() of nothing is the int 0 */
    if (!PyDict_CheckExact(v) || !PyDict_CheckExact(x) || !PyDict_GET_SIZE(x) || !plain_features(x)) Py_RETURN_NONE;
    Sum sum = {0.0, 0.0, compensated};
    Py_ssize_t key_pos = 0, value_pos = 0, size = PyDict_GET_SIZE(x);
    while (PyDict_Next(x, &key_pos, &key, NULL)) {
        double weight, number;
        int kind = weight_of(v, key, x, size, &weight);
        if (kind == 1) kind = next_number(x, &value_pos, &number);
        if (kind != 1) {
            if (kind < 0) return NULL;
            Py_RETURN_NONE;  /* 0, no value left (x emptied and refilled by a lookup): Python's business too */
        }
        sum_add(&sum, weight * number);
    }
    return PyFloat_FromDouble(sum_result(&sum));
}

/* axpy_sq_norm(v, x, c, compensated) -> the change of sum(w*w), as _axpy_sq_norm: v[k] = v.get(k, 0.0) + c*x[k]
 * for each k of x in order (nothing changes unless every value converts); None for any x or v sparse_dot
 * does not take. As there, every lookup comes before the values are read, and those before v changes. */
static PyObject *axpy_sq_norm(PyObject *self, PyObject *args) {
    PyObject *v, *x, *key;
    double c;
    int compensated;
    if (!PyArg_ParseTuple(args, "OOdp", &v, &x, &c, &compensated)) return NULL;
    if (!PyDict_CheckExact(v) || !PyDict_CheckExact(x) || !PyDict_GET_SIZE(x) || !plain_features(x)) Py_RETURN_NONE;
    Py_ssize_t n = PyDict_GET_SIZE(x), pos = 0, i = 0;
    double *olds = PyMem_Malloc(2 * n * sizeof(double)), *news = olds + n;
    if (!olds) return PyErr_NoMemory();
    int kind = 1;
    for (; kind == 1 && PyDict_Next(x, &pos, &key, NULL); i++) kind = weight_of(v, key, x, n, &olds[i]);
    for (pos = 0, i = 0; kind == 1 && i < n; i++) {
        double number;
        kind = next_number(x, &pos, &number);
        if (kind == 1) news[i] = olds[i] + c * number;
    }
    if (kind != 1) {  /* 0: fewer values than keys (x emptied and refilled by a lookup): Python's business */
        PyMem_Free(olds);
        if (kind < 0) return NULL;
        Py_RETURN_NONE;
    }
    Sum new_sq = {0.0, 0.0, compensated}, old_sq = {0.0, 0.0, compensated};
    for (pos = 0, i = 0; i < n && PyDict_Next(x, &pos, &key, NULL); i++) {
        PyObject *number = PyFloat_FromDouble(news[i]);
        Py_INCREF(key);
        int failed = !number || PyDict_SetItem(v, key, number) < 0;
        Py_DECREF(key);
        Py_XDECREF(number);
        if (failed || changed_size(x, n)) { PyMem_Free(olds); return NULL; }
        sum_add(&new_sq, news[i] * news[i]);
        sum_add(&old_sq, olds[i] * olds[i]);
    }
    PyMem_Free(olds);
    return PyFloat_FromDouble(sum_result(&new_sq) - sum_result(&old_sq));
}

/* -- weights in and out of the dicts ------------------------------------------------------------ */

/* keys[i] with a reference of its own, or NULL with a RuntimeError once ``keys`` is no longer ``size`` long
 * (Python code run by a lookup changed it). */
static PyObject *held_key(PyObject *keys, Py_ssize_t i, Py_ssize_t size, const char *function) {
    if (PyList_GET_SIZE(keys) != size) {
        PyErr_Format(PyExc_RuntimeError, "%s: the list of keys changed size", function);
        return NULL;
    }
    PyObject *key = PyList_GET_ITEM(keys, i);
    Py_INCREF(key);
    return key;
}

/* gather(weights, keys, values, present): values[i] = weights[keys[i]] (present[i] = 1), or 0.0 (present[i] = 0)
 * for a key the dict does not hold. */
static PyObject *gather(PyObject *self, PyObject *args) {
    PyObject *weights, *keys, *o[2];
    if (!PyArg_ParseTuple(args, "O!O!OO", &PyDict_Type, &weights, &PyList_Type, &keys, &o[0], &o[1])) return NULL;
    Buf b[2];
    memset(b, 0, sizeof b);
    if (get_buffer(o[0], &b[0], 1, F64, "gather", "values") < 0 || get_buffer(o[1], &b[1], 1, BOOL, "gather", "present") < 0)
        goto fail;
    double *values = b[0].view.buf;
    char *present = b[1].view.buf;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (length(&b[0]) != n || length(&b[1]) != n) {
        PyErr_Format(PyExc_ValueError, "gather: values and present: %zd and %zd items, expected %zd (one per key)",
                     length(&b[0]), length(&b[1]), n);
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = held_key(keys, i, n, "gather");
        if (!key) goto fail;
        PyObject *value = PyDict_GetItemWithError(weights, key);
        Py_DECREF(key);
        if (!value) {
            if (PyErr_Occurred()) goto fail;
            values[i] = 0.0;
            present[i] = 0;
            continue;
        }
        Py_INCREF(value);  /* its __float__ may drop it from the dict */
        values[i] = PyFloat_AsDouble(value);
        Py_DECREF(value);
        if (values[i] == -1.0 && PyErr_Occurred()) goto fail;
        present[i] = 1;
    }
    release(b, 2);
    Py_RETURN_NONE;
fail:
    release(b, 2);
    return NULL;
}

/* scatter(weights, keys, values, columns): weights[keys[c]] = values[c] (a new float) for each c of
 * ``columns``, in order. */
static PyObject *scatter(PyObject *self, PyObject *args) {
    PyObject *weights, *keys, *o[2];
    if (!PyArg_ParseTuple(args, "O!O!OO", &PyDict_Type, &weights, &PyList_Type, &keys, &o[0], &o[1])) return NULL;
    Buf b[2];
    memset(b, 0, sizeof b);
    if (get_buffer(o[0], &b[0], 0, F64, "scatter", "values") < 0 || get_buffer(o[1], &b[1], 0, I64, "scatter", "columns") < 0)
        goto fail;
    const double *values = b[0].view.buf;
    const int64_t *columns = b[1].view.buf;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (length(&b[0]) != n) {
        PyErr_Format(PyExc_ValueError, "scatter: values: %zd items, expected %zd (one per key)", length(&b[0]), n);
        goto fail;
    }
    for (Py_ssize_t k = 0; k < length(&b[1]); k++) {
        int64_t c = columns[k];
        if (c < 0 || c >= n) {
            PyErr_Format(PyExc_ValueError, "scatter: column %lld is out of range: expected 0 <= column < %zd",
                         (long long)c, n);
            goto fail;
        }
        PyObject *key = held_key(keys, c, n, "scatter");
        if (!key) goto fail;
        PyObject *value = PyFloat_FromDouble(values[c]);
        int failed = !value || PyDict_SetItem(weights, key, value) < 0;
        Py_DECREF(key);
        Py_XDECREF(value);
        if (failed) goto fail;
    }
    release(b, 2);
    Py_RETURN_NONE;
fail:
    release(b, 2);
    return NULL;
}

/* -- CSR building ------------------------------------------------------------------------------ */

/* A buffer that doubles as it fills: PyMem memory, or, when ``in_bytes``, the inside of a bytes object
 * that take_bytes hands over without a copy (nor the page faults of a second big buffer). */
typedef struct { char *data; Py_ssize_t len, cap; PyObject *bytes; int in_bytes; } Growing;

static int reserve(Growing *g, Py_ssize_t size) {
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
static void discard(Growing *g) {
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
static int64_t *table_slot(Growing *g, int64_t index) {
    Py_ssize_t size = (Py_ssize_t)(index + 1) * 8;
    if (g->len < size) {
        if (reserve(g, size - g->len) < 0) return NULL;
        memset(g->data + g->len, 0, size - g->len);
        g->len = size;
    }
    return (int64_t *)g->data + index;
}

static PyObject *take_bytes(Growing *g) {
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
static int64_t column_of(PyObject *key, PyObject *vocabulary, PyObject *keys) {
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

/* rows_from_dicts(dicts, vocabulary, keys) -> (indptr, indices, data) as bytes of int64/int64/float64, or None
 * unless every dict is an exact dict of plain keys and values (the caller then builds the rows in Python). */
static PyObject *rows_from_dicts(PyObject *self, PyObject *args) {
    PyObject *dicts, *vocabulary, *keys, *x = NULL;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &dicts, &PyDict_Type, &vocabulary, &PyList_Type, &keys))
        return NULL;
    Growing indptr = {0}, indices = {0}, data = {0};
    int64_t nnz = 0;
    if (grow(&indptr, &nnz, 8) < 0) goto fail;
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(dicts); r++) {
        if (!PyDict_CheckExact(PyList_GET_ITEM(dicts, r))) goto python;
        x = PyList_GET_ITEM(dicts, r);
        Py_INCREF(x);  /* a lookup may run Python code that drops it from the list */
        PyObject *key, *value;
        Py_ssize_t pos = 0, size = PyDict_GET_SIZE(x);
        while (PyDict_Next(x, &pos, &key, &value)) {
            double number = 0.0;
            if (!plain_key(key) || !plain_value(value)) goto python;
            Py_INCREF(value);
            int64_t column = column_of(key, vocabulary, keys);
            int kind = column < 0 ? -1 : feature_value(value, &number);
            Py_DECREF(value);
            if (kind < 0 || changed_size(x, size)) goto fail;
            if (grow(&indices, &column, 8) < 0 || grow(&data, &number, 8) < 0) goto fail;
            nnz++;
        }
        Py_CLEAR(x);
        if (grow(&indptr, &nnz, 8) < 0) goto fail;
    }
    return Py_BuildValue("NNN", take_bytes(&indptr), take_bytes(&indices), take_bytes(&data));
python:
    Py_XDECREF(x);
    PyMem_Free(indptr.data);
    PyMem_Free(indices.data);
    PyMem_Free(data.data);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(x);
    PyMem_Free(indptr.data);
    PyMem_Free(indices.data);
    PyMem_Free(data.data);
    return NULL;
}

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

/* The lines a parser reads: the bytes objects of a list (held by a tuple of them while they are read), or
 * the spans [starts[i], ends[i]) of one bytes object (lines read from a file a block at a time, none copied). */
typedef struct { PyObject *tuple, *buffer; Buf starts, ends; Py_ssize_t n; } LineSet;

static void close_lines(LineSet *set) {
    Py_CLEAR(set->tuple);
    Py_CLEAR(set->buffer);
    release(&set->starts, 1);
    release(&set->ends, 1);
}

/* Take ``lines``: a list of bytes, or a tuple (bytes, starts, ends) of int64 spans within the bytes; an error
 * naming ``function`` otherwise (close_lines releases what was taken either way). */
static int open_lines(PyObject *lines, LineSet *set, const char *function) {
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
static inline Py_ssize_t json_number(const char *s, Py_ssize_t k, const char *end, int max_digits, Scalar *value) {
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
    return scan_number(s + start, 0, k - start, &value->real, NULL) >= 0 ? k : -1;  /* -1 for 1e999 and the like */
}

/* The id or label at s[k]: a string, a number or true/false (null, objects and arrays are the Python
 * parser's). The index past it; -1 for anything else. */
static Py_ssize_t json_scalar(const char *s, Py_ssize_t k, const char *end, Scalar *value) {
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
        return json_number(s, k, end, 18, value);
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
    k = json_number(s, k, end, 15, &value);
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
            k = json_scalar(s, k, s + len + 1, id);
            if (id->kind == V_TRUE || id->kind == V_FALSE) goto python;
        } else if (is_field(s + start, name_len, &fields[2])) {
            if (label->kind != V_NONE) goto python;
            k = json_scalar(s, k, s + len + 1, label);
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
static Py_ssize_t json_text(const char *s, Py_ssize_t k, Py_ssize_t len, Growing *out) {
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
        if (out && k > run && grow(out, s + run, k - run) < 0) return -2;
        unsigned char c = u[k];
        if (c == '"') return k + 1;
        if (c >= 0x80) {
            int n = utf8_sequence(u + k);
            if (!n) return -1;
            if (out && grow(out, s + k, n) < 0) return -2;
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
            if (out && grow(out, utf8, n) < 0) return -2;
            continue;
        }
        default: return -1;
        }
        if (out && grow(out, &one, 1) < 0) return -2;
        k += 2;
    }
}

/* One JSON value: a labelled text event in the grammar the Python parser agrees with, its id, label and
 * text (into ``text``, emptied first). Members other than the id, label and text are skipped when they hold
 * a string, a number of at most 18 digits, true, false or null; anything else (the features member, nested
 * values, a repeated member, no text or no label) is LINE_PYTHON. -2 on a memory error. */
static int json_text_line(const char *s, Py_ssize_t len, const Field *fields, Growing *text, Scalar *id,
                          Scalar *label) {
    Py_ssize_t k = skip_space(s, 0);
    int has_text = 0;
    id->kind = label->kind = V_NONE;
    text->len = 0;
    if (s[k] != '{') return LINE_PYTHON;
    k = skip_space(s, k + 1);
    for (;;) {
        Py_ssize_t start, name_len;
        k = member_name(s, k, s + len + 1, &start, &name_len);
        if (k < 0) return LINE_PYTHON;
        if (is_field(s + start, name_len, &fields[3])) {
            if (has_text || s[k] != '"') return LINE_PYTHON;
            has_text = 1;
            k = json_text(s, k, len, text);
            if (k == -2) return -2;
        } else if (is_field(s + start, name_len, &fields[0])) {
            if (id->kind != V_NONE) return LINE_PYTHON;
            k = json_scalar(s, k, s + len + 1, id);
            if (id->kind == V_TRUE || id->kind == V_FALSE) return LINE_PYTHON;
        } else if (is_field(s + start, name_len, &fields[2])) {
            if (label->kind != V_NONE) return LINE_PYTHON;
            k = json_scalar(s, k, s + len + 1, label);
        } else if (is_field(s + start, name_len, &fields[1])) {
            return LINE_PYTHON;  /* a feature event */
        } else {  /* a member the event does not use; a repeat of one goes unnoticed, as json keeps the last */
            Scalar skipped;
            if (s[k] == '"') k = json_text(s, k, len, NULL);
            else if (!strncmp(s + k, "null", 4)) k += 4;
            else k = json_scalar(s, k, s + len + 1, &skipped);
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

/* parse_json_texts(values, id_field, x_field, label_field, text_field, max_bytes) -> (status, texts, ids,
 * labels): status per value as bytes (0 a labelled text event, 2 for the Python parser); per status-0 value
 * its text in UTF-8 (bytes, as json.loads(value)[text_field].encode("utf-8") gives it), its id (None when
 * absent) and its label, as json.loads gives them. */
static PyObject *parse_json_texts(PyObject *self, PyObject *args) {
    PyObject *values, *field_names[4];
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "O!UUUUn", &PyList_Type, &values, &field_names[0], &field_names[1], &field_names[2],
                          &field_names[3], &max_bytes))
        return NULL;
    Field fields[4];  /* id, x, label, text */
    int distinct = read_fields(field_names, fields);
    Growing status = {.in_bytes = 1}, text = {0};
    PyObject *texts = PyList_New(0), *ids = PyList_New(0), *labels = PyList_New(0);
    if (!texts || !ids || !labels) goto fail;
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(values); r++) {
        PyObject *value = PyList_GET_ITEM(values, r);
        if (!PyBytes_Check(value)) { PyErr_SetString(PyExc_TypeError, "parse_json_texts: expected bytes"); goto fail; }
        Py_ssize_t len = PyBytes_GET_SIZE(value);
        const char *s = PyBytes_AS_STRING(value);
        Scalar id, label;
        Py_INCREF(value);  /* read while new objects are made, which may run a finalizer that drops it from the list */
        int kind = (len > max_bytes || !distinct) ? LINE_PYTHON : json_text_line(s, len, fields, &text, &id, &label);
        char code = (char)kind;
        int failed = kind == -2 || grow(&status, &code, 1) < 0;
        if (!failed && kind == LINE_ROW) {
            PyObject *objects[3] = {PyBytes_FromStringAndSize(text.data ? text.data : "", text.len),
                                    scalar_object(s, &id), scalar_object(s, &label)};
            PyObject *lists[3] = {texts, ids, labels};
            for (int i = 0; i < 3; i++) {
                failed = failed || !objects[i] || PyList_Append(lists[i], objects[i]) < 0;
                Py_XDECREF(objects[i]);
            }
        }
        Py_DECREF(value);
        if (failed) goto fail;
    }
    discard(&text);
    return Py_BuildValue("NNNN", take_bytes(&status), texts, ids, labels);
fail:
    discard(&status);
    discard(&text);
    Py_XDECREF(texts);
    Py_XDECREF(ids);
    Py_XDECREF(labels);
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
    {"learn_rows", learn_rows, METH_VARARGS, "PegasosClassifier.learn_one over CSR rows; returns the stop row."},
    {"keep_freed_memory", keep_freed_memory, METH_VARARGS,
     "Keep freed blocks under a size in malloc's heap, for reuse (glibc); whether it was set."},
    {"learn_logistic_rows", learn_logistic_rows, METH_VARARGS,
     "AdaGradLogistic.learn_one over CSR rows; returns (stop row, columns first written)."},
    {"learn_pegasos_logistic_rows", learn_pegasos_logistic_rows, METH_VARARGS,
     "PegasosLogistic.learn_one over CSR rows; returns (stop row, columns first written, scale, sq_norm)."},
    {"platt_rows", platt_rows, METH_VARARGS, "OnlinePlatt over a run of margins: probabilities, then updates."},
    {"mix_rows", mix_rows, METH_VARARGS, "Exponential weights with a fixed share over members' log-probabilities."},
    {"dense_dot", dense_dot, METH_VARARGS, "<w, x> of one example over a weight array, summed as sum() sums."},
    {"logistic_step", logistic_step, METH_VARARGS, "AdaGradLogistic's step on one example over its weight arrays."},
    {"dense_axpy", dense_axpy, METH_VARARGS, "w += c*x over a weight array; the change of the squared norm."},
    {"dense_dict_dot", dense_dict_dot, METH_VARARGS, "<w, x> of a dict x over a weight array; None if not plain."},
    {"dense_dict_axpy", dense_dict_axpy, METH_VARARGS, "w += c*x of a dict x; the change of the squared norm, or None."},
    {"check_rows", check_rows, METH_VARARGS, "Check CSR rows (bounds, columns, no repeat), naming columns by keys."},
    {"rows_from_dicts", rows_from_dicts, METH_VARARGS, "Feature dicts to CSR bytes (indptr, indices, data)."},
    {"parse_svmlight", parse_svmlight, METH_VARARGS, "svmlight lines to (status, indptr, indices, data, labels)."},
    {"read_block", read_block, METH_VARARGS, "A file's next block after the bytes carried: (block, carry)."},
    {"split_lines", split_lines, METH_VARARGS, "A block's lines as spans: (starts, ends, sizes, blank, used)."},
    {"span_list", span_list, METH_VARARGS, "The spans of a block as a list of bytes."},
    {"parse_json_events", parse_json_events, METH_VARARGS,
     "JSON feature events to (status, indptr, indices, data, ids, labels)."},
    {"parse_json_texts", parse_json_texts, METH_VARARGS,
     "Labelled JSON text events to (status, texts as UTF-8 bytes, ids, labels)."},
    {"name_table", name_table, METH_VARARGS, "An empty table of feature names for parse_json_events."},
    {"name_count", name_count, METH_O, "The names a name_table() holds."},
    {"sparse_dot", sparse_dot, METH_VARARGS, "<v, x> of two dicts, summed as sum() sums; None if not floats."},
    {"axpy_sq_norm", axpy_sq_norm, METH_VARARGS, "v += c*x in place; the change of the squared norm."},
    {"gather", gather, METH_VARARGS, "Values of keys from a weight dict into a buffer, with presence flags."},
    {"scatter", scatter, METH_VARARGS, "Values of the given columns back into a weight dict (new floats), in order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fast", "Compiled inner loops for batch replay.", -1,
                                    methods};

/* The module attribute ``attribute``: a tuple of the str names[0:n]. */
static int add_names(PyObject *module, const char *attribute, const char *const *names, int n) {
    PyObject *tuple = PyTuple_New(n);
    for (int i = 0; tuple && i < n; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (!name) Py_CLEAR(tuple);
        else PyTuple_SET_ITEM(tuple, i, name);
    }
    int result = tuple ? PyModule_AddObjectRef(module, attribute, tuple) : -1;
    Py_XDECREF(tuple);
    return result;
}

PyMODINIT_FUNC PyInit__fast(void) {
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (m && (add_names(m, "PARAMS", PARAMS_NAMES, N_PARAMS) < 0 || add_names(m, "STATE", STATE_NAMES, N_STATE) < 0
              || add_names(m, "ISTATE", ISTATE_NAMES, N_ISTATE) < 0))
        Py_CLEAR(m);
    return m;
}
