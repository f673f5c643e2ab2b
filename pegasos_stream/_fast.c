/* Compiled inner loops for replaying a stream in batches.
 *
 * learn_rows: PegasosClassifier.learn_one over the rows of a CSR batch, in order, with the very same
 *     floating-point operations in the same order (sums as Python's built-in sum computes them), so the
 *     model comes out bit-identical. A row that needs a rare branch (folding the scale, clearing the
 *     weights, a refused update, a non-finite margin) is not touched: the loop stops before it and the
 *     caller takes that row through learn_one.
 * rows_from_dicts: feature dicts to CSR columns, naming columns through a dict key -> column.
 * parse_svmlight: svmlight lines to CSR rows at C speed; any line outside the plain ASCII grammar is
 *     marked for the Python parser, which gives the same event or the same error message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Indices into the state, integer state and parameter arrays (mirrored in linear.py). */
enum { S_SCALE, S_SQ_NORM, S_B, S_AVERAGE_B, S_AVERAGE_SCALE,
       S_LOG_SLOPE, S_SLOPE, S_OFFSET, S_SQ_GRAD_SLOPE, S_SQ_GRAD_OFFSET, N_STATE };
enum { I_T, I_N_AVERAGED, I_N_POS, I_N_NEG, I_PLATT_POS, I_PLATT_NEG, I_NEW_V, I_NEW_OFFSET, N_ISTATE };
enum { P_LAMBDA, P_HORIZON, P_AVERAGE_FROM, P_INTERCEPT, P_PROJECTION, P_RADIUS, P_COST_POS, P_COST_NEG,
       P_BALANCED, P_HAS_PRIOR, P_COMPENSATED, P_PLATT_RATE, P_TAIL_START, P_TAIL_MASS, P_MIN_TAIL,
       P_MAX_LOG_SLOPE, P_MIN_SCALE, P_MAX_CANCELLATION, P_MAX_NORM, N_PARAMS };

/* Python's sum() of floats: plain left-to-right before 3.12, Neumaier-compensated since. */
typedef struct { double f, c; int compensated; } Sum;

static inline void sum_add(Sum *s, double x) {
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

static double dot(const double *w, const int64_t *idx, const double *x, Py_ssize_t a, Py_ssize_t e, int comp) {
    Sum s = {0.0, 0.0, comp};
    for (Py_ssize_t k = a; k < e; k++) sum_add(&s, w[idx[k]] * x[k]);
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

typedef struct { Py_buffer view; int held; } Buf;

static int get_buffer(PyObject *obj, Buf *b, int writable, Py_ssize_t itemsize, const char *name) {
    if (PyObject_GetBuffer(obj, &b->view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    b->held = 1;
    if (b->view.itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes", name, itemsize);
        return -1;
    }
    return 0;
}

static void release(Buf *bufs, int n) {
    for (int i = 0; i < n; i++) if (bufs[i].held) PyBuffer_Release(&bufs[i].view);
}

/* learn_rows(indptr, indices, data, signs, weights, v, offset, prior, present_v, present_offset,
 *            new_v, new_offset, state, istate, params, decisions, probas, start) -> stop row */
static PyObject *learn_rows(PyObject *self, PyObject *args) {
    PyObject *o[17];
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOOn", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &o[15], &o[16], &start))
        return NULL;
    static const char *names[17] = {"indptr", "indices", "data", "signs", "weights", "v", "offset", "prior",
                                    "present_v", "present_offset", "new_v", "new_offset", "state", "istate",
                                    "params", "decisions", "probas"};
    static const Py_ssize_t sizes[17] = {8, 8, 8, 8, 8, 8, 8, 8, 1, 1, 8, 8, 8, 8, 8, 8, 8};
    static const int writable[17] = {0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1};
    Buf b[17];
    memset(b, 0, sizeof b);
    for (int i = 0; i < 17; i++)
        if (get_buffer(o[i], &b[i], writable[i], sizes[i], names[i]) < 0) { release(b, 17); return NULL; }

    const int64_t *indptr = b[0].view.buf, *idx = b[1].view.buf;
    const double *x = b[2].view.buf, *signs = b[3].view.buf, *weights = b[4].view.buf, *prior = b[7].view.buf;
    double *v = b[5].view.buf, *offset = b[6].view.buf;
    char *present_v = b[8].view.buf, *present_offset = b[9].view.buf;
    int64_t *new_v = b[10].view.buf, *new_offset = b[11].view.buf;
    double *s = b[12].view.buf;
    int64_t *is = b[13].view.buf;
    const double *p = b[14].view.buf;
    double *decisions = b[15].view.buf, *probas = b[16].view.buf;
    Py_ssize_t n = b[3].view.len / 8;
    int comp = p[P_COMPENSATED] != 0.0, has_prior = p[P_HAS_PRIOR] != 0.0, averaged = p[P_AVERAGE_FROM] != 0.0;
    int64_t horizon = (int64_t)p[P_HORIZON], average_from = (int64_t)p[P_AVERAGE_FROM];
    double lambda = p[P_LAMBDA], min_scale = p[P_MIN_SCALE];
    Py_ssize_t i;

    for (i = start; i < n; i++) {
        Py_ssize_t a = indptr[i], e = indptr[i + 1];
        double sign = signs[i], weight = weights[i];
        int64_t t = is[I_T] + 1;
        int64_t t_eff = (horizon > 0 && t > horizon) ? horizon : t;
        if (t_eff == 1) break;  /* the shrink clears the weights: learn_one's business */

        /* margins, as _margins computes them */
        int averaging = is[I_N_AVERAGED] > 0;
        double vx = dot(v, idx, x, a, e, comp), current, predicting;
        if (averaging) {
            current = vx * s[S_SCALE];
            predicting = (s[S_AVERAGE_SCALE] * vx + dot(offset, idx, x, a, e, comp)) / (double)is[I_N_AVERAGED];
        } else {
            current = predicting = vx * s[S_SCALE];
        }
        if (has_prior) {
            double pr = dot(prior, idx, x, a, e, comp);
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
            double cost = p[P_BALANCED] != 0.0
                ? (double)(n_pos + n_neg) / (2.0 * (double)(sign > 0 ? n_pos : n_neg))
                : (sign > 0 ? p[P_COST_POS] : p[P_COST_NEG]);
            coef = weight * cost * sign;
        }
        double rate = 1.0 / (lambda * (double)t_eff);
        double shrink = 1.0 - 1.0 / (double)t_eff;
        double scale = s[S_SCALE] * shrink;
        if (scale < min_scale) break;
        double sq_norm = s[S_SQ_NORM], d = 0.0;
        if (coef != 0.0) {
            Sum xx = {0.0, 0.0, comp};
            for (Py_ssize_t k = a; k < e; k++) sum_add(&xx, x[k] * x[k]);
            double bound = shrink * (s[S_SCALE] * sqrt(py_max(sq_norm, 0.0)));
            bound += rate * fabs(coef) * sqrt(sum_result(&xx));
            if (!(bound < p[P_MAX_NORM])) break;
            d = rate * coef / scale;
            Sum fresh = {0.0, 0.0, comp}, old = {0.0, 0.0, comp};
            for (Py_ssize_t k = a; k < e; k++) {
                double before = v[idx[k]], after = before + d * x[k];
                sum_add(&fresh, after * after);
                sum_add(&old, before * before);
            }
            sq_norm += sum_result(&fresh) - sum_result(&old);
            if (p[P_PROJECTION] != 0.0) {
                double norm = scale * sqrt(py_max(sq_norm, 0.0));
                if (norm > p[P_RADIUS]) {
                    scale *= p[P_RADIUS] / norm;
                    if (scale < min_scale) break;
                }
            }
        }
        int accumulate = averaged && t >= average_from;
        if (accumulate && s[S_AVERAGE_SCALE] + scale > p[P_MAX_CANCELLATION] * (double)(is[I_N_AVERAGED] + 1) * scale)
            break;

        /* commit */
        decisions[i] = decision;
        probas[i] = squash(s[S_SLOPE] * decision + s[S_OFFSET], p);
        is[I_T] = t;
        s[S_SCALE] = s[S_SCALE] * shrink;
        if (p[P_INTERCEPT] != 0.0) s[S_B] += rate * coef;
        if (coef != 0.0) {
            double minus_a_d = -s[S_AVERAGE_SCALE] * d;
            int shift_offset = averaged && s[S_AVERAGE_SCALE] != 0.0;
            for (Py_ssize_t k = a; k < e; k++) {
                int64_t j = idx[k];
                v[j] = v[j] + d * x[k];
                if (!present_v[j]) { present_v[j] = 1; new_v[is[I_NEW_V]++] = j; }
                if (shift_offset) {
                    offset[j] = offset[j] + minus_a_d * x[k];
                    if (!present_offset[j]) { present_offset[j] = 1; new_offset[is[I_NEW_OFFSET]++] = j; }
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
        platt_update(decision, sign > 0, s, is, p);
    }
    release(b, 17);
    return PyLong_FromSsize_t(i);
}

/* -- CSR building ------------------------------------------------------------------------------ */

typedef struct { char *data; Py_ssize_t len, cap; } Growing;

static int reserve(Growing *g, Py_ssize_t size) {
    if (g->len + size > g->cap) {
        Py_ssize_t cap = g->cap ? g->cap * 2 : 4096;
        while (cap < g->len + size) cap *= 2;
        char *data = PyMem_Realloc(g->data, cap);
        if (!data) { PyErr_NoMemory(); return -1; }
        g->data = data;
        g->cap = cap;
    }
    return 0;
}

static int grow(Growing *g, const void *item, Py_ssize_t size) {
    if (reserve(g, size) < 0) return -1;
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
    PyObject *bytes = PyBytes_FromStringAndSize(g->data ? g->data : "", g->len);
    PyMem_Free(g->data);
    g->data = NULL;
    return bytes;
}

/* The column of ``key``: vocabulary[key], or a new column appended to ``keys``. -1 on error. */
static int64_t column_of(PyObject *key, PyObject *vocabulary, PyObject *keys) {
    PyObject *found = PyDict_GetItemWithError(vocabulary, key);
    if (found) return PyLong_AsLongLong(found);
    if (PyErr_Occurred()) return -1;
    Py_ssize_t column = PyList_GET_SIZE(keys);
    PyObject *number = PyLong_FromSsize_t(column);
    if (!number || PyDict_SetItem(vocabulary, key, number) < 0 || PyList_Append(keys, key) < 0) {
        Py_XDECREF(number);
        return -1;
    }
    Py_DECREF(number);
    return column;
}

/* rows_from_dicts(dicts, vocabulary, keys) -> (indptr, indices, data) as bytes of int64/int64/float64 */
static PyObject *rows_from_dicts(PyObject *self, PyObject *args) {
    PyObject *dicts, *vocabulary, *keys;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &dicts, &PyDict_Type, &vocabulary, &PyList_Type, &keys))
        return NULL;
    Growing indptr = {0}, indices = {0}, data = {0};
    int64_t nnz = 0;
    if (grow(&indptr, &nnz, 8) < 0) goto fail;
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(dicts); r++) {
        PyObject *x = PyList_GET_ITEM(dicts, r), *key, *value;
        if (!PyDict_Check(x)) { PyErr_SetString(PyExc_TypeError, "rows_from_dicts: expected dicts"); goto fail; }
        Py_ssize_t pos = 0;
        while (PyDict_Next(x, &pos, &key, &value)) {
            int64_t column = column_of(key, vocabulary, keys);
            double number = PyFloat_AsDouble(value);
            if (column < 0 || (number == -1.0 && PyErr_Occurred())) goto fail;
            if (grow(&indices, &column, 8) < 0 || grow(&data, &number, 8) < 0) goto fail;
            nnz++;
        }
        if (grow(&indptr, &nnz, 8) < 0) goto fail;
    }
    return Py_BuildValue("NNN", take_bytes(&indptr), take_bytes(&indices), take_bytes(&data));
fail:
    PyMem_Free(indptr.data);
    PyMem_Free(indices.data);
    PyMem_Free(data.data);
    return NULL;
}

/* Python's str.split() whitespace, restricted to ASCII. */
static inline int is_space(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 28 && c <= 31); }

/* A number in the plain grammar [+-]?(d+(.d*)?|.d+)([eE][+-]?d+)?, parsed as float() would. */
static int plain_number(const char *s, Py_ssize_t len, double *out) {
    Py_ssize_t k = 0, digits = 0;
    if (k < len && (s[k] == '+' || s[k] == '-')) k++;
    while (k < len && s[k] >= '0' && s[k] <= '9') { k++; digits++; }
    if (k < len && s[k] == '.') { k++; while (k < len && s[k] >= '0' && s[k] <= '9') { k++; digits++; } }
    if (!digits) return 0;
    if (k < len && (s[k] == 'e' || s[k] == 'E')) {
        Py_ssize_t exponent = 0;
        k++;
        if (k < len && (s[k] == '+' || s[k] == '-')) k++;
        while (k < len && s[k] >= '0' && s[k] <= '9') { k++; exponent++; }
        if (!exponent) return 0;
    }
    if (k != len || len > 64) return 0;
    char text[65];
    memcpy(text, s, len);
    text[len] = '\0';
    *out = PyOS_string_to_double(text, NULL, NULL);
    if (*out == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return isfinite(*out);
}

enum { LINE_ROW = 0, LINE_EMPTY = 1, LINE_PYTHON = 2 };

/* Names that are plain decimal numbers below this are looked up in an array instead of the dict. */
#define MAX_NUMBERED 4194304

/* The column of the name s[0:len]: through ``numbered`` (column + 1 by number) for a plain decimal
 * number, else through the vocabulary. -1 on error. */
static int64_t name_column(const char *s, Py_ssize_t len, PyObject *vocabulary, PyObject *keys, Growing *numbered) {
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
    PyObject *name = PyUnicode_DecodeASCII(s, len, NULL);
    if (!name) return -1;
    int64_t column = column_of(name, vocabulary, keys);
    Py_DECREF(name);
    if (column >= 0 && slot) *slot = column + 1;
    return column;
}

/* Parse one line into the CSR buffers; LINE_PYTHON leaves them as they were (but for new columns). */
static int svmlight_line(const char *s, Py_ssize_t len, PyObject *vocabulary, PyObject *keys, Growing *indices,
                         Growing *data, Growing *stamps, Growing *numbered, int64_t stamp, double *label,
                         int *error) {
    Py_ssize_t end = 0, rows_before = indices->len;
    while (end < len && s[end] != '#') {
        unsigned char c = (unsigned char)s[end];
        if (c >= 0x7f || (c < 32 && !is_space(c))) return LINE_PYTHON;
        end++;
    }
    for (Py_ssize_t k = end; k < len; k++) if ((unsigned char)s[k] >= 0x80) return LINE_PYTHON;  /* UTF-8 checks */
    Py_ssize_t k = 0;
    while (k < end && is_space((unsigned char)s[k])) k++;
    if (k == end) return LINE_EMPTY;
    Py_ssize_t token = k;
    while (k < end && !is_space((unsigned char)s[k])) k++;
    if (!plain_number(s + token, k - token, label)) return LINE_PYTHON;
    if (*label == 1.0) *label = 1.0;
    else if (*label == 0.0 || *label == -1.0) *label = -1.0;
    else return LINE_PYTHON;
    for (;;) {
        while (k < end && is_space((unsigned char)s[k])) k++;
        if (k == end) return LINE_ROW;
        token = k;
        while (k < end && !is_space((unsigned char)s[k])) k++;
        const char *colon = memchr(s + token, ':', k - token);
        if (!colon || colon == s + token || (colon - (s + token) == 3 && !memcmp(s + token, "qid", 3))) goto python;
        double number;
        if (!plain_number(colon + 1, s + k - colon - 1, &number)) goto python;
        int64_t column = name_column(s + token, colon - (s + token), vocabulary, keys, numbered);
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

/* parse_svmlight(lines, vocabulary, keys, max_bytes) -> (status, indptr, indices, data, labels) as bytes:
 * status per line (0 row, 1 nothing, 2 for the Python parser); one CSR row and label per status-0 line. */
static PyObject *parse_svmlight(PyObject *self, PyObject *args) {
    PyObject *lines, *vocabulary, *keys;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "O!O!O!n", &PyList_Type, &lines, &PyDict_Type, &vocabulary, &PyList_Type, &keys,
                          &max_bytes))
        return NULL;
    Growing status = {0}, indptr = {0}, indices = {0}, data = {0}, labels = {0}, stamps = {0}, numbered = {0};
    int64_t nnz = 0;
    if (grow(&indptr, &nnz, 8) < 0) goto fail;
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(lines); r++) {
        PyObject *line = PyList_GET_ITEM(lines, r);
        if (!PyBytes_Check(line)) { PyErr_SetString(PyExc_TypeError, "parse_svmlight: expected bytes"); goto fail; }
        Py_ssize_t len = PyBytes_GET_SIZE(line);
        double label = 0.0;
        int error = 0;
        char kind = len > max_bytes ? LINE_PYTHON
            : (char)svmlight_line(PyBytes_AS_STRING(line), len, vocabulary, keys, &indices, &data, &stamps, &numbered,
                                  r + 1, &label, &error);
        if (error) goto fail;
        if (grow(&status, &kind, 1) < 0) goto fail;
        if (kind == LINE_ROW) {
            nnz = indices.len / 8;
            if (grow(&indptr, &nnz, 8) < 0 || grow(&labels, &label, 8) < 0) goto fail;
        }
    }
    PyMem_Free(stamps.data);
    PyMem_Free(numbered.data);
    return Py_BuildValue("NNNNN", take_bytes(&status), take_bytes(&indptr), take_bytes(&indices), take_bytes(&data),
                         take_bytes(&labels));
fail:
    PyMem_Free(status.data);
    PyMem_Free(indptr.data);
    PyMem_Free(indices.data);
    PyMem_Free(data.data);
    PyMem_Free(labels.data);
    PyMem_Free(stamps.data);
    PyMem_Free(numbered.data);
    return NULL;
}

static PyMethodDef methods[] = {
    {"learn_rows", learn_rows, METH_VARARGS, "PegasosClassifier.learn_one over CSR rows; returns the stop row."},
    {"rows_from_dicts", rows_from_dicts, METH_VARARGS, "Feature dicts to CSR bytes (indptr, indices, data)."},
    {"parse_svmlight", parse_svmlight, METH_VARARGS, "svmlight lines to (status, indptr, indices, data, labels)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fast", "Compiled inner loops for batch replay.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__fast(void) { return PyModule_Create(&module); }
