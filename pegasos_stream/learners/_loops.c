/* The compiled inner loops of the learners, for replaying a stream in batches (pegasos_stream.learners._loops).
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
 * learn_hinge_rows: NormalizedHinge.learn_one over the rows of a CSR batch, bit-identical likewise.
 * dense_axpy: the step of a PegasosClassifier with n_features on one example over its weight array;
 *     dense_dict_dot, dense_dict_axpy: its margin and step taking the example's dict as it is.
 * platt_rows: OnlinePlatt over a run of margins (a committee's sums), as learn_rows calibrates its own.
 * mix_rows: a PegasosMixture's exponential weights with a decreasing fixed share, as learners/hedge.py mixes.
 * check_rows: the CSR checks of learn_rows, naming the repeated column by its key.
 * sparse_dot, axpy_sq_norm: learn_one's passes over one example, as its Python expressions compute them.
 * gather, scatter: the weights a batch touches, out of the learner's dicts and back.
 * rows_from_dicts: feature dicts to CSR columns, naming columns through a dict key -> column.
 *
 * The one-example passes and rows_from_dicts only take dicts whose keys are exact str or int and whose
 * values are exact float, exact int or bool: hashing, comparing and converting those runs no Python code.
 * For anything else they return None and the caller's Python expression gives the result. Wherever Python
 * code may still run (a key of the weight dict with its own __eq__, a finalizer), the objects in use are
 * held by strong references and a dict being iterated that changes size raises the RuntimeError Python's
 * own iteration raises.
 *
 * Shared with the other compiled modules: _common.h (buffers, growing buffers, columns of a vocabulary).
 */
#include "../_common.h"
#if defined(__SSE2__)
#include <emmintrin.h>
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


/* How many features ahead the loops over a row ask for the weights they are about to read and write. */
#define AHEAD 48

/* Weights beyond this many bytes are asked for ahead of use (below, they sit in the processor's caches). */
#define FAR_BYTES (1 << 20)

/* The entry of the rows (``indptr`` of ``n`` rows) up to which a loop asks for the entries of a weight array of
 * ``columns`` AHEAD entries early: the rows' end, so that the next row's first weights are asked for too (a text
 * row's weights lie scattered over a large array); 0, none, for an array that sits in the caches. */
static inline Py_ssize_t ahead_end_of(const int64_t *indptr, Py_ssize_t n, Py_ssize_t columns) {
    return columns * (Py_ssize_t)sizeof(double) > FAR_BYTES ? indptr[n] : 0;
}

/* sum(w[idx[k]] * x[k]) over k = a..e - 1, summed as sum() sums, the entries of w up to entry ``ahead_end`` asked
 * for early (ahead_end_of); ``squares``, when given, receives sum(x[k] * x[k]), summed likewise, from the same
 * pass. */
static ALWAYS_INLINE double dot(const double *w, const void *idx, int wide, const double *x, Py_ssize_t a,
                                 Py_ssize_t e, int comp, Py_ssize_t ahead_end, double *squares) {
    Sum s = {0.0, 0.0, comp}, xx = {0.0, 0.0, comp};
    Py_ssize_t k = a;
    for (; k < e && k + AHEAD < ahead_end; k++) {
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



/* The bitwise or of columns[first:last], two at a time where SSE2 is at hand: each of them is at most it. */
static ALWAYS_INLINE uint64_t any_bits(const uint64_t *columns, int64_t first, int64_t last) {
    uint64_t bits = 0;
    int64_t k = first;
#if defined(__SSE2__)
    __m128i lanes = _mm_setzero_si128();
    for (; k + 2 <= last; k += 2) lanes = _mm_or_si128(lanes, _mm_loadu_si128((const __m128i *)(columns + k)));
    uint64_t halves[2];
    _mm_storeu_si128((__m128i *)halves, lanes);
    bits = halves[0] | halves[1];
#endif
    for (; k < last; k++) bits |= columns[k];
    return bits;
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
 * where SSE2 is at hand; int64 columns are looked at one by one only when the bitwise or of them all (any_bits) is
 * not below n_columns. */
static ALWAYS_INLINE int any_out_of_range(const void *indices, int wide, int64_t first, int64_t last,
                                          Py_ssize_t n_columns) {
    int out = 0;
    int64_t k = first;
    if (wide) {
        const uint64_t *columns = indices, limit = (uint64_t)n_columns;
        if (any_bits(columns, first, last) < limit) return 0;
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
    Py_ssize_t ahead_end = ahead_end_of(indptr, n, length(&b[A_V]));
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
        double squares, vx = dot(v, idx, wide, x, a, e, comp, ahead_end, &squares), current, predicting;
        if (averaging) {
            current = vx * s[S_SCALE];
            predicting = (s[S_AVERAGE_SCALE] * vx + dot(offset, idx, wide, x, a, e, comp, ahead_end, NULL))
                         / (double)is[I_N_AVERAGED];
        } else {
            current = predicting = vx * s[S_SCALE];
        }
        if (has_prior) {
            double pr = dot(prior, idx, wide, x, a, e, comp, ahead_end, NULL);
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



/* -- the arrays of a loop over CSR rows and weight columns (the logistic, logistic Pegasos and hinge loops) ---- */

/* How many items an array of such a loop holds: one more than the rows (indptr), one per stored entry (indices,
 * data), one per row, one per column of the rows (the column map, the columns first written), one per weight column. */
typedef enum { ROWS_PLUS_ONE, ENTRIES, ROWS, KEYS, WEIGHT_COLUMNS } Size;
/* An array such a loop takes: its name in messages, its kind, whether the loop writes it and how many items it holds. */
typedef struct { const char *name; Kind kind; int writable; Size size; } RowArray;
/* The arrays every such loop takes first, in this order; its weight arrays follow, the first at R_WEIGHT_ARRAY. */
enum { R_INDPTR, R_INDICES, R_DATA, R_SIGNS, R_WEIGHTS, R_COLUMNS, R_WEIGHT_ARRAY };
#define ROW_ARRAYS_HEAD                                                                                           \
    {"indptr", I64, 0, ROWS_PLUS_ONE}, {"indices", IDX, 0, ENTRIES}, {"data", F64, 0, ENTRIES},                   \
        {"signs", F64, 0, ROWS}, {"weights", F64, 0, ROWS}, {"columns", I64, 0, KEYS}

/* The buffers of ``o`` as ``spec`` says (the column map only when it is not None: the rows' columns are then the
 * weights'), each holding as many items as its size asks, except that the presence flags (index ``present``) and the
 * columns first written (``new``) may be empty: every column present. 0, or -1 with a ValueError naming ``function``
 * and no buffer held. */
static int get_row_arrays(PyObject **o, Buf *b, const RowArray *spec, int count, int present, int new,
                          const char *function) {
    memset(b, 0, count * sizeof *b);
    int mapped = o[R_COLUMNS] != Py_None;
    for (int a = 0; a < count; a++)
        if ((a != R_COLUMNS || mapped)
            && get_buffer(o[a], &b[a], spec[a].writable, spec[a].kind, function, spec[a].name) < 0) {
            release(b, count);
            return -1;
        }
    Py_ssize_t n = length(&b[R_SIGNS]), M = length(&b[R_WEIGHT_ARRAY]);
    const Py_ssize_t sizes[] = {n + 1, length(&b[R_INDICES]), n, mapped ? length(&b[R_COLUMNS]) : M, M};
    int tracked = length(&b[present]) != 0;  /* no presence flags: every column is present */
    for (int a = 0; a < count; a++) {
        Py_ssize_t want = sizes[spec[a].size];
        if ((a != R_COLUMNS || mapped) && length(&b[a]) != want && !((a == present || a == new) && !tracked)) {
            PyErr_Format(PyExc_ValueError, "%s: %s: %zd items, expected %zd", function, spec[a].name, length(&b[a]),
                         want);
            release(b, count);
            return -1;
        }
    }
    return 0;
}

/* The CSR rows of the buffers ``b`` (got by get_row_arrays) from ``start`` (check_csr; ``longest``, unless NULL, gets
 * the most features of a row) and the column map, each column within the weights. 0, or -1 with a ValueError naming
 * ``function`` and every buffer released. */
static int check_row_arrays(Buf *b, int count, Py_ssize_t start, int distinct, const char *function,
                            Py_ssize_t *longest) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s: ", function);
    int mapped = b[R_COLUMNS].held;
    Py_ssize_t n = length(&b[R_SIGNS]), M = length(&b[R_WEIGHT_ARRAY]), m = mapped ? length(&b[R_COLUMNS]) : M;
    if (check_csr(prefix, b[R_INDPTR].view.buf, n, &b[R_INDICES], m, start, NULL, distinct, longest) < 0) {
        release(b, count);
        return -1;
    }
    const int64_t *columns = mapped ? b[R_COLUMNS].view.buf : NULL;
    for (Py_ssize_t j = 0; mapped && j < m; j++)
        if (columns[j] < 0 || columns[j] >= M) {
            PyErr_Format(PyExc_ValueError, "%s: columns[%zd] = %lld is outside 0..%zd (the weights)", function, j,
                         (long long)columns[j], M - 1);
            release(b, count);
            return -1;
        }
    return 0;
}

/* -- AdaGrad logistic regression ------------------------------------------------------------------- */

enum { L_W = R_WEIGHT_ARRAY, L_G2, L_PRESENT, L_NEW, L_DECISIONS, N_LOGISTIC };
static const RowArray LOGISTIC_ARRAYS[N_LOGISTIC] = {
    ROW_ARRAYS_HEAD, {"w", F64, 1, WEIGHT_COLUMNS}, {"g2", F64, 1, WEIGHT_COLUMNS},
    {"present", BOOL, 1, WEIGHT_COLUMNS}, {"new", I64, 1, KEYS}, {"decisions", F64, 1, ROWS},
};

/* AdaGrad's steps on the features a..e - 1 of a row whose columns are the weights' own, each present: for each
 * feature in order g = coef*x[k], g2[c] += g*g, w[c] -= rate*g/sqrt(g2[c]). With SSE2, two features at a time: each
 * lane takes the same IEEE operations as one feature alone and a row holds a column once (check_csr checks it, or
 * the reader that built the rows vouches for it), so the weights come out bit for bit the same, and the square roots
 * and divisions, the slow part of a step, run two at once. */
static ALWAYS_INLINE void adagrad_steps(double *w, double *g2, const void *idx, int wide, const double *x,
                                        Py_ssize_t a, Py_ssize_t e, double coef, double rate) {
    Py_ssize_t k = a;
#if defined(__SSE2__)
    const __m128d coefs = _mm_set1_pd(coef), rates = _mm_set1_pd(rate);
    for (; k + 2 <= e; k += 2) {
        int64_t c0 = AT(idx, wide, k), c1 = AT(idx, wide, k + 1);
        __m128d g = _mm_mul_pd(coefs, _mm_loadu_pd(&x[k]));
        __m128d acc = _mm_add_pd(_mm_set_pd(g2[c1], g2[c0]), _mm_mul_pd(g, g));
        _mm_storel_pd(&g2[c0], acc);
        _mm_storeh_pd(&g2[c1], acc);
        __m128d stepped = _mm_sub_pd(_mm_set_pd(w[c1], w[c0]), _mm_div_pd(_mm_mul_pd(rates, g), _mm_sqrt_pd(acc)));
        _mm_storel_pd(&w[c0], stepped);
        _mm_storeh_pd(&w[c1], stepped);
    }
#endif
    for (; k < e; k++) {
        int64_t c = AT(idx, wide, k);
        double g = coef * x[k];
        double acc = g2[c] + g * g;
        g2[c] = acc;
        w[c] = w[c] - rate * g / sqrt(acc);
    }
}

/* learn_logistic_rows' loop over the checked buffers ``b`` from row ``start``, for int64 (``wide``) or int32
 * indices, summing as Python 3.12's sum() (``comp``) or as 3.11's; counts the columns first written in ``n_new`` and returns the row it stopped before. Runs without the
 * GIL. */
static ALWAYS_INLINE Py_ssize_t logistic_loop(const Buf *b, Py_ssize_t start, double rate, double initial, int comp,
                                              Py_ssize_t *n_new, int wide) {
    const int64_t *indptr = b[R_INDPTR].view.buf, *columns = b[R_COLUMNS].view.buf;
    const void *idx = b[R_INDICES].view.buf;
    const double *x = b[R_DATA].view.buf, *signs = b[R_SIGNS].view.buf, *weights = b[R_WEIGHTS].view.buf;
    double *w = b[L_W].view.buf, *g2 = b[L_G2].view.buf, *decisions = b[L_DECISIONS].view.buf;
    char *present = b[L_PRESENT].view.buf;
    int64_t *new = b[L_NEW].view.buf;
    Py_ssize_t i, n = length(&b[R_SIGNS]), ahead_end = ahead_end_of(indptr, n, length(&b[L_W]));
    int mapped = b[R_COLUMNS].held, tracked = length(&b[L_PRESENT]) != 0;
    for (i = start; i < n; i++) {
        Py_ssize_t a = indptr[i], e = indptr[i + 1];
        Sum sum = {0.0, 0.0, comp};
        for (Py_ssize_t k = a; k < e; k++) {
            if (k + AHEAD < ahead_end) {
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
        if (!mapped && !tracked) {
            adagrad_steps(w, g2, idx, wide, x, a, e, coef, rate);
            continue;
        }
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
    if (get_row_arrays(o, b, LOGISTIC_ARRAYS, N_LOGISTIC, L_PRESENT, L_NEW, "learn_logistic_rows") < 0) return NULL;
    if (!(rate > 0.0 && isfinite(rate) && initial > 0.0 && isfinite(initial))) {
        PyErr_Format(PyExc_ValueError, "learn_logistic_rows: learning_rate = %R, initial_accumulator = %R: expected "
                     "finite numbers > 0", PyTuple_GET_ITEM(args, 11), PyTuple_GET_ITEM(args, 12));
        release(b, N_LOGISTIC);
        return NULL;
    }
    if (check_row_arrays(b, N_LOGISTIC, start, distinct, "learn_logistic_rows", NULL) < 0) return NULL;
    Py_ssize_t stop, n_new = 0;
    Py_BEGIN_ALLOW_THREADS
        if (wide(&b[R_INDICES]))
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

enum { G_V = R_WEIGHT_ARRAY, G_PRESENT, G_NEW, G_DECISIONS, N_PEGASOS_LOGISTIC };
static const RowArray PEGASOS_LOGISTIC_ARRAYS[N_PEGASOS_LOGISTIC] = {
    ROW_ARRAYS_HEAD, {"v", F64, 1, WEIGHT_COLUMNS}, {"present", BOOL, 1, WEIGHT_COLUMNS}, {"new", I64, 1, KEYS},
    {"decisions", F64, 1, ROWS},
};

/* The settings of pegasos_logistic_loop, and the model's state it reads and writes: w = scale*v, sq_norm = |v|^2,
 * t the steps taken. */
typedef struct { double lambda, min_scale, max_norm, scale, sq_norm; int64_t t0, t; } LogisticPegasos;

/* learn_pegasos_logistic_rows' loop over the checked buffers ``b`` from row ``start``, for int64 (``wide``) or int32
 * indices, summing as Python 3.12's sum() (``comp``) or as 3.11's; counts the columns first written in ``n_new``,
 * updates ``m`` and returns the row it stopped before. Runs without the GIL. */
static ALWAYS_INLINE Py_ssize_t pegasos_logistic_loop(const Buf *b, Py_ssize_t start, LogisticPegasos *m, int comp,
                                                      Py_ssize_t *n_new, int wide) {
    const int64_t *indptr = b[R_INDPTR].view.buf, *columns = b[R_COLUMNS].view.buf;
    const void *idx = b[R_INDICES].view.buf;
    const double *x = b[R_DATA].view.buf, *signs = b[R_SIGNS].view.buf, *weights = b[R_WEIGHTS].view.buf;
    double *v = b[G_V].view.buf, *decisions = b[G_DECISIONS].view.buf;
    char *present = b[G_PRESENT].view.buf;
    int64_t *new = b[G_NEW].view.buf;
    Py_ssize_t i, n = length(&b[R_SIGNS]);
    int mapped = b[R_COLUMNS].held, tracked = length(&b[G_PRESENT]) != 0;
    Py_ssize_t ahead_end = ahead_end_of(indptr, n, length(&b[G_V]));
    double scale = m->scale, sq_norm = m->sq_norm;
    int64_t t = m->t;
#define COLUMN(k) (mapped ? columns[AT(idx, wide, k)] : AT(idx, wide, k))
    for (i = start; i < n; i++) {
        Py_ssize_t a = indptr[i], e = indptr[i + 1];
        int64_t t_eff = t + 1 + m->t0;
        if (t_eff == 1) break;  /* the shrink clears the weights: learn_one's business */
        Sum vx = {0.0, 0.0, comp}, xx = {0.0, 0.0, comp};
        for (Py_ssize_t k = a; k < e; k++) {
            if (k + AHEAD < ahead_end) PREFETCH(&v[COLUMN(k + AHEAD)]);
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
    if (get_row_arrays(o, b, PEGASOS_LOGISTIC_ARRAYS, N_PEGASOS_LOGISTIC, G_PRESENT, G_NEW, function) < 0) return NULL;
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
    if (check_row_arrays(b, N_PEGASOS_LOGISTIC, start, distinct, function, NULL) < 0) return NULL;
    Py_ssize_t stop, n_new = 0;
    Py_BEGIN_ALLOW_THREADS
        if (wide(&b[R_INDICES]))
            stop = comp ? pegasos_logistic_loop(b, start, &model, 1, &n_new, 1)
                        : pegasos_logistic_loop(b, start, &model, 0, &n_new, 1);
        else
            stop = comp ? pegasos_logistic_loop(b, start, &model, 1, &n_new, 0)
                        : pegasos_logistic_loop(b, start, &model, 0, &n_new, 0);
    Py_END_ALLOW_THREADS
    release(b, N_PEGASOS_LOGISTIC);
    return Py_BuildValue("nndd", stop, n_new, model.scale, model.sq_norm);
}

/* -- the hinge loss by normalized adaptive steps (NormalizedHinge) ------------------------------------- */

enum { H_W = R_WEIGHT_ARRAY, H_G2, H_SCALES, H_PRESENT, H_NEW, H_DECISIONS, N_HINGE };
static const RowArray HINGE_ARRAYS[N_HINGE] = {
    ROW_ARRAYS_HEAD, {"w", F64, 1, WEIGHT_COLUMNS}, {"g2", F64, 1, WEIGHT_COLUMNS}, {"scales", F64, 1, WEIGHT_COLUMNS},
    {"present", BOOL, 1, WEIGHT_COLUMNS}, {"new", I64, 1, KEYS}, {"decisions", F64, 1, ROWS},
};

/* NormalizedHinge's least |x_j| (2^-63) and its square. */
#define HINGE_X_MIN 1.0842021724855044e-19
#define HINGE_X2_MIN (HINGE_X_MIN * HINGE_X_MIN)
/* How far below 1 a margin must be to take a step (NormalizedHinge's MARGIN_SLACK). */
#define HINGE_MARGIN_SLACK 1e-9

/* x[k] as a step takes it: a value below HINGE_X_MIN in size as +-HINGE_X_MIN (0 stays 0: skipped). */
static inline double hinge_value(double v) { return v != 0.0 && fabs(v) < HINGE_X_MIN ? copysign(HINGE_X_MIN, v) : v; }

/* learn_hinge_rows' loop over the checked buffers ``b`` from row ``start`` (as logistic_loop); ``rates``: room for
 * the rates r_j of the longest row. */
static ALWAYS_INLINE Py_ssize_t hinge_loop(const Buf *b, Py_ssize_t start, double rate, double *rates, int comp,
                                           Py_ssize_t *n_new, int wide) {
    const int64_t *indptr = b[R_INDPTR].view.buf, *columns = b[R_COLUMNS].view.buf;
    const void *idx = b[R_INDICES].view.buf;
    const double *x = b[R_DATA].view.buf, *signs = b[R_SIGNS].view.buf, *weights = b[R_WEIGHTS].view.buf;
    double *w = b[H_W].view.buf, *g2 = b[H_G2].view.buf, *scales = b[H_SCALES].view.buf;
    double *decisions = b[H_DECISIONS].view.buf;
    char *present = b[H_PRESENT].view.buf;
    int64_t *new = b[H_NEW].view.buf;
    Py_ssize_t i, n = length(&b[R_SIGNS]);
    int mapped = b[R_COLUMNS].held, tracked = length(&b[H_PRESENT]) != 0;
    Py_ssize_t ahead_end = ahead_end_of(indptr, n, length(&b[H_W]));
#define HINGE_COLUMN(k) (mapped ? columns[AT(idx, wide, (k))] : AT(idx, wide, (k)))
    for (i = start; i < n; i++) {
        Py_ssize_t a = indptr[i], e = indptr[i + 1];
        Sum sum = {0.0, 0.0, comp};
        for (Py_ssize_t k = a; k < e; k++) {
            if (k + AHEAD < ahead_end) {
                PREFETCH(&w[HINGE_COLUMN(k + AHEAD)]);
            }
            sum_add(&sum, w[HINGE_COLUMN(k)] * x[k]);
        }
        double margin = sum_result(&sum);
        if (!isfinite(margin)) break;
        double sign = signs[i], c = weights[i];
        int steps = sign * margin < 1.0 - HINGE_MARGIN_SLACK && c * HINGE_X2_MIN > 0.0;
        double largest = 0.0;
        for (Py_ssize_t k = a; steps && k < e; k++) largest = py_max(largest, fabs(hinge_value(x[k])));
        if (!isfinite(c * largest * largest)) break;  /* a square that overflows: refused */
        decisions[i] = margin;
        if (!steps) continue;
        double reach = 0.0;
        for (Py_ssize_t k = a; k < e; k++) {
            if (ahead_end && k + AHEAD < e) {  /* this row's alone (the margin's pass brought w in, not G and N) */
                int64_t ahead = HINGE_COLUMN(k + AHEAD);
                PREFETCH(&g2[ahead]);
                PREFETCH(&scales[ahead]);
            }
            double v = hinge_value(x[k]), size = fabs(v);
            if (v == 0.0) continue;
            int64_t col = HINGE_COLUMN(k);
            double scale = scales[col];
            if (size > scale) {
                if (scale > 0.0) w[col] = w[col] * (scale / size);
                scales[col] = scale = size;
            }
            double acc = g2[col] + c * (v * v);
            g2[col] = acc;
            if (tracked && !present[col]) {
                present[col] = 1;
                new[(*n_new)++] = col;
            }
            double r = 1.0 / (sqrt(acc) * scale);
            rates[k - a] = r;
            reach += v * v * r;
        }
        double move = sign * py_min(c * rate, reach > 0.0 ? (1.0 - sign * margin) / reach : INFINITY);
        for (Py_ssize_t k = a; k < e; k++) {
            if (x[k] == 0.0) continue;
            int64_t col = HINGE_COLUMN(k);
            w[col] = w[col] + move * hinge_value(x[k]) * rates[k - a];
        }
    }
#undef HINGE_COLUMN
    return i;
}

/* learn_hinge_rows(indptr, indices, data, signs, weights, columns, w, g2, scales, present, new, decisions,
 *                  learning_rate, compensated, start[, distinct]) -> (stop row, columns first written)
 * NormalizedHinge.learn_one over CSR rows from ``start``, with the same floating-point operations in the same
 * order; the arrays as learn_logistic_rows takes them, with ``scales`` (N_j) beside ``g2`` (G_j), both 0 for a
 * column never stepped on. Each row's margin goes into decisions[i]; a row whose margin is below 1 - 1e-9 (sign*m < 1 - 1e-9) and
 * whose sample weight c has c*2^-126 > 0 then steps (NormalizedHinge). The loop stops before a row whose margin or
 * c*x_j^2 is not finite (learn_one refuses it). Every array is checked first; the loop runs without the GIL. */
static PyObject *learn_hinge_rows(PyObject *self, PyObject *args) {
    PyObject *o[N_HINGE];
    double rate;
    int comp, distinct = 0;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOdpn|p", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8],
                          &o[9], &o[10], &o[11], &rate, &comp, &start, &distinct))
        return NULL;
    Buf b[N_HINGE];
    if (get_row_arrays(o, b, HINGE_ARRAYS, N_HINGE, H_PRESENT, H_NEW, "learn_hinge_rows") < 0) return NULL;
    if (!(rate > 0.0 && isfinite(rate))) {
        PyErr_Format(PyExc_ValueError, "learn_hinge_rows: learning_rate = %R: expected a finite number > 0",
                     PyTuple_GET_ITEM(args, 12));
        release(b, N_HINGE);
        return NULL;
    }
    Py_ssize_t longest = 0;
    if (check_row_arrays(b, N_HINGE, start, distinct, "learn_hinge_rows", &longest) < 0) return NULL;
    double *rates = PyMem_Malloc((longest > 0 ? longest : 1) * sizeof(double));
    if (!rates) {
        release(b, N_HINGE);
        return PyErr_NoMemory();
    }
    Py_ssize_t stop, n_new = 0;
    Py_BEGIN_ALLOW_THREADS
        if (wide(&b[R_INDICES]))
            stop = comp ? hinge_loop(b, start, rate, rates, 1, &n_new, 1) : hinge_loop(b, start, rate, rates, 0, &n_new, 1);
        else
            stop = comp ? hinge_loop(b, start, rate, rates, 1, &n_new, 0) : hinge_loop(b, start, rate, rates, 0, &n_new, 0);
    Py_END_ALLOW_THREADS
    PyMem_Free(rates);
    release(b, N_HINGE);
    return Py_BuildValue("nn", stop, n_new);
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

static PyMethodDef methods[] = {
    {"learn_rows", learn_rows, METH_VARARGS, "PegasosClassifier.learn_one over CSR rows; returns the stop row."},
    {"learn_logistic_rows", learn_logistic_rows, METH_VARARGS,
     "AdaGradLogistic.learn_one over CSR rows; returns (stop row, columns first written)."},
    {"learn_pegasos_logistic_rows", learn_pegasos_logistic_rows, METH_VARARGS,
     "PegasosLogistic.learn_one over CSR rows; returns (stop row, columns first written, scale, sq_norm)."},
    {"learn_hinge_rows", learn_hinge_rows, METH_VARARGS,
     "NormalizedHinge.learn_one over CSR rows; returns (stop row, columns first written)."},
    {"platt_rows", platt_rows, METH_VARARGS, "OnlinePlatt over a run of margins: probabilities, then updates."},
    {"mix_rows", mix_rows, METH_VARARGS, "Exponential weights with a fixed share over members' log-probabilities."},
    {"dense_dot", dense_dot, METH_VARARGS, "<w, x> of one example over a weight array, summed as sum() sums."},
    {"logistic_step", logistic_step, METH_VARARGS, "AdaGradLogistic's step on one example over its weight arrays."},
    {"dense_axpy", dense_axpy, METH_VARARGS, "w += c*x over a weight array; the change of the squared norm."},
    {"dense_dict_dot", dense_dict_dot, METH_VARARGS, "<w, x> of a dict x over a weight array; None if not plain."},
    {"dense_dict_axpy", dense_dict_axpy, METH_VARARGS, "w += c*x of a dict x; the change of the squared norm, or None."},
    {"check_rows", check_rows, METH_VARARGS, "Check CSR rows (bounds, columns, no repeat), naming columns by keys."},
    {"rows_from_dicts", rows_from_dicts, METH_VARARGS, "Feature dicts to CSR bytes (indptr, indices, data)."},
    {"sparse_dot", sparse_dot, METH_VARARGS, "<v, x> of two dicts, summed as sum() sums; None if not floats."},
    {"axpy_sq_norm", axpy_sq_norm, METH_VARARGS, "v += c*x in place; the change of the squared norm."},
    {"gather", gather, METH_VARARGS, "Values of keys from a weight dict into a buffer, with presence flags."},
    {"scatter", scatter, METH_VARARGS, "Values of the given columns back into a weight dict (new floats), in order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "pegasos_stream.learners._loops", "Compiled inner loops of the learners for batch replay.", -1,
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

PyMODINIT_FUNC PyInit__loops(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (add_names(m, "PARAMS", PARAMS_NAMES, N_PARAMS) < 0 || add_names(m, "STATE", STATE_NAMES, N_STATE) < 0
              || add_names(m, "ISTATE", ISTATE_NAMES, N_ISTATE) < 0))
        Py_CLEAR(m);
    return m;
}
