/* Compiled inner loops for replaying a stream in batches.
 *
 * learn_rows: PegasosClassifier.learn_one over the rows of a CSR batch, in order, with the very same
 *     floating-point operations in the same order (sums as Python's built-in sum computes them), so the
 *     model comes out bit-identical. A row that needs a rare branch (folding the scale, clearing the
 *     weights, a refused update, a non-finite margin) is not touched: the loop stops before it and the
 *     caller takes that row through learn_one.
 * sparse_dot, axpy_sq_norm: learn_one's passes over one example, as its Python expressions compute them.
 * gather, scatter: the weights a batch touches, out of the learner's dicts and back.
 * rows_from_dicts: feature dicts to CSR columns, naming columns through a dict key -> column.
 * parse_svmlight: svmlight lines to CSR rows at C speed; any line outside the plain ASCII grammar is
 *     marked for the Python parser, which gives the same event or the same error message.
 * parse_json_events: labelled JSON feature events ({id, x, label} in the plain grammar: ASCII, no escapes,
 *     distinct names, numbers as json gives them) to CSR rows, ids and labels; any other value is
 *     marked for the Python parser.
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

/* -- one example at a time ------------------------------------------------------------------------ */

/* x's value as mul() takes it for a float product: an exact float, or an int converted as float * int
 * converts it. 0 when x holds anything else (the caller then computes in Python); -1 on error. */
static inline int feature_value(PyObject *value, double *out) {
    if (PyFloat_CheckExact(value)) { *out = PyFloat_AS_DOUBLE(value); return 1; }
    if (!PyLong_Check(value)) return 0;
    *out = PyLong_AsDouble(value);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 1;
}

/* sparse_dot(v, x, compensated) -> sum(map(mul, map(v.get, x, repeat(0.0)), x.values())) for a non-empty
 * dict x of floats and ints and a dict v of floats, summed as sum() sums; None for any other x or v. */
static PyObject *sparse_dot(PyObject *self, PyObject *args) {
    PyObject *v, *x, *key, *value;
    int compensated;
    if (!PyArg_ParseTuple(args, "O!Op", &PyDict_Type, &v, &x, &compensated)) return NULL;
    if (!PyDict_CheckExact(x) || !PyDict_GET_SIZE(x)) Py_RETURN_NONE;  /* sum() of nothing is the int 0 */
    Sum sum = {0.0, 0.0, compensated};
    Py_ssize_t pos = 0;
    while (PyDict_Next(x, &pos, &key, &value)) {
        PyObject *weight = PyDict_GetItemWithError(v, key);
        if (!weight && PyErr_Occurred()) return NULL;
        if (weight && !PyFloat_CheckExact(weight)) Py_RETURN_NONE;
        double number;
        int kind = feature_value(value, &number);
        if (kind <= 0) { if (kind < 0) return NULL; Py_RETURN_NONE; }
        sum_add(&sum, (weight ? PyFloat_AS_DOUBLE(weight) : 0.0) * number);
    }
    return PyFloat_FromDouble(sum_result(&sum));
}

/* axpy_sq_norm(v, x, c, compensated) -> the change of sum(w*w), as _axpy_sq_norm: v[k] = v.get(k, 0.0) + c*x[k]
 * for each k of x in order (nothing changes unless every value converts); None for any other x or v. */
static PyObject *axpy_sq_norm(PyObject *self, PyObject *args) {
    PyObject *v, *x, *key, *value;
    double c;
    int compensated;
    if (!PyArg_ParseTuple(args, "O!Odp", &PyDict_Type, &v, &x, &c, &compensated)) return NULL;
    if (!PyDict_CheckExact(x) || !PyDict_GET_SIZE(x)) Py_RETURN_NONE;  /* sum() of nothing is the int 0 */
    Py_ssize_t n = PyDict_GET_SIZE(x), pos = 0, i = 0;
    double *olds = PyMem_Malloc(2 * n * sizeof(double)), *news = olds + n;
    if (!olds) return PyErr_NoMemory();
    while (PyDict_Next(x, &pos, &key, &value)) {
        PyObject *weight = PyDict_GetItemWithError(v, key);
        double number;
        int kind = (!weight && PyErr_Occurred()) ? -1 : (weight && !PyFloat_CheckExact(weight)) ? 0
            : feature_value(value, &number);
        if (kind <= 0) {
            PyMem_Free(olds);
            if (kind < 0) return NULL;
            Py_RETURN_NONE;
        }
        olds[i] = weight ? PyFloat_AS_DOUBLE(weight) : 0.0;
        news[i] = olds[i] + c * number;
        i++;
    }
    Sum new_sq = {0.0, 0.0, compensated}, old_sq = {0.0, 0.0, compensated};
    for (pos = 0, i = 0; PyDict_Next(x, &pos, &key, &value); i++) {
        PyObject *number = PyFloat_FromDouble(news[i]);
        if (!number || PyDict_SetItem(v, key, number) < 0) { Py_XDECREF(number); PyMem_Free(olds); return NULL; }
        Py_DECREF(number);
        sum_add(&new_sq, news[i] * news[i]);
        sum_add(&old_sq, olds[i] * olds[i]);
    }
    PyMem_Free(olds);
    return PyFloat_FromDouble(sum_result(&new_sq) - sum_result(&old_sq));
}

/* -- weights in and out of the dicts ------------------------------------------------------------ */

/* gather(weights, keys, values, present, hold) -> held: values[i] = weights[keys[i]] (present[i] = 1), or 0.0
 * (present[i] = 0) for a key the dict does not hold. With ``hold`` true, ``held`` is a list of the value
 * objects (None for an absent key), for scatter to write back into; else None. */
static PyObject *gather(PyObject *self, PyObject *args) {
    PyObject *weights, *keys, *o[2], *held = NULL;
    int hold;
    if (!PyArg_ParseTuple(args, "O!O!OOp", &PyDict_Type, &weights, &PyList_Type, &keys, &o[0], &o[1], &hold)) return NULL;
    Buf b[2];
    memset(b, 0, sizeof b);
    if (get_buffer(o[0], &b[0], 1, 8, "values") < 0 || get_buffer(o[1], &b[1], 1, 1, "present") < 0) goto fail;
    double *values = b[0].view.buf;
    char *present = b[1].view.buf;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (b[0].view.len / 8 < n || b[1].view.len < n) { PyErr_SetString(PyExc_ValueError, "gather: short buffers"); goto fail; }
    if (hold && !(held = PyList_New(n))) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyDict_GetItemWithError(weights, PyList_GET_ITEM(keys, i));
        if (!value && PyErr_Occurred()) goto fail;
        if (held) {
            PyObject *kept = value ? value : Py_None;
            Py_INCREF(kept);
            PyList_SET_ITEM(held, i, kept);
        }
        if (!value) {
            values[i] = 0.0;
            present[i] = 0;
            continue;
        }
        values[i] = PyFloat_CheckExact(value) ? PyFloat_AS_DOUBLE(value) : PyFloat_AsDouble(value);
        if (values[i] == -1.0 && PyErr_Occurred()) goto fail;
        present[i] = 1;
    }
    release(b, 2);
    if (held) return held;
    Py_RETURN_NONE;
fail:
    release(b, 2);
    Py_XDECREF(held);  /* its unset items are NULL, which list_dealloc skips */
    return NULL;
}

/* Whether ``value``, held by gather, is a float only the weight dict and ``held`` refer to: then writing
 * into it is the same as storing a new float under its key, without the allocation and the second lookup.
 * Never in the free-threaded build, where a reference count does not tell that. */
static inline int writable_float(PyObject *value) {
#ifdef Py_GIL_DISABLED
    (void)value;
    return 0;
#else
    return PyFloat_CheckExact(value) && Py_REFCNT(value) == 2;
#endif
}

/* scatter(weights, keys, values, columns, held): weights[keys[c]] = values[c] for each c of ``columns``, in
 * order; ``held`` is gather's list of the value objects (or None), whose floats are written into where
 * nothing else refers to them. */
static PyObject *scatter(PyObject *self, PyObject *args) {
    PyObject *weights, *keys, *o[2], *held;
    if (!PyArg_ParseTuple(args, "O!O!OOO", &PyDict_Type, &weights, &PyList_Type, &keys, &o[0], &o[1], &held)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (held != Py_None && !(PyList_Check(held) && PyList_GET_SIZE(held) == n)) {
        PyErr_SetString(PyExc_TypeError, "scatter: held must be None or a list as long as keys");
        return NULL;
    }
    Buf b[2];
    memset(b, 0, sizeof b);
    if (get_buffer(o[0], &b[0], 0, 8, "values") < 0 || get_buffer(o[1], &b[1], 0, 8, "columns") < 0) goto fail;
    const double *values = b[0].view.buf;
    const int64_t *columns = b[1].view.buf;
    for (Py_ssize_t k = 0; k < b[1].view.len / 8; k++) {
        int64_t c = columns[k];
        if (c < 0 || c >= n || c >= b[0].view.len / 8) { PyErr_SetString(PyExc_IndexError, "scatter: column"); goto fail; }
        PyObject *old = held == Py_None ? NULL : PyList_GET_ITEM(held, c);
        if (old && writable_float(old)) {
            ((PyFloatObject *)old)->ob_fval = values[c];
            continue;
        }
        PyObject *value = PyFloat_FromDouble(values[c]);
        if (!value || PyDict_SetItem(weights, PyList_GET_ITEM(keys, c), value) < 0) { Py_XDECREF(value); goto fail; }
        Py_DECREF(value);
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

/* The number in the plain grammar [+-]?(d+(.d*)?|.d+)([eE][+-]?d+)? at s[k:], parsed as float() would:
 * through exact_decimal when it applies, else through Python's own correctly rounded conversion. The
 * index past it when it is finite, at most 64 characters and followed by the end or whitespace; -1
 * otherwise. */
static Py_ssize_t scan_number(const char *s, Py_ssize_t k, Py_ssize_t end, double *out) {
    Py_ssize_t start = k, digits = 0, fraction = 0, significant = 0;
    uint64_t mantissa = 0;
    int negative = 0;
    if (k < end && (s[k] == '+' || s[k] == '-')) negative = s[k++] == '-';
    for (; k < end && s[k] >= '0' && s[k] <= '9'; k++, digits++) {
        if (mantissa || s[k] != '0') significant++;
        if (significant <= 19) mantissa = mantissa * 10 + (uint64_t)(s[k] - '0');
    }
    if (k < end && s[k] == '.')
        for (k++; k < end && s[k] >= '0' && s[k] <= '9'; k++, digits++, fraction++) {
            if (mantissa || s[k] != '0') significant++;
            if (significant <= 19) mantissa = mantissa * 10 + (uint64_t)(s[k] - '0');
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
    *out = PyOS_string_to_double(text, NULL, NULL);
    if (*out == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return -1; }
    return isfinite(*out) ? k : -1;
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
                         double *label, int *error) {
    Py_ssize_t rows_before = indices->len;
    const char *comment = memchr(s, '#', len);
    Py_ssize_t end = comment ? comment - s : len;
    for (Py_ssize_t k = end; k < len; k++) if ((unsigned char)s[k] >= 0x80) return LINE_PYTHON;
    Py_ssize_t k = 0;
    while (k < end && is_space((unsigned char)s[k])) k++;
    if (k == end) return LINE_EMPTY;
    k = scan_number(s, k, end, label);
    if (k < 0) return LINE_PYTHON;
    if (*label == 1.0) *label = 1.0;
    else if (*label == 0.0 || *label == -1.0) *label = -1.0;
    else return LINE_PYTHON;
    for (;;) {
        while (k < end && is_space((unsigned char)s[k])) k++;
        if (k == end) return LINE_ROW;
        Py_ssize_t token = k;
        for (; k < end && s[k] != ':'; k++) {
            unsigned char c = (unsigned char)s[k];
            if (c < 0x21 || c >= 0x7f) goto python;  /* the token ends without a colon, or a byte for Python */
        }
        if (k == end || k == token || (k - token == 3 && !memcmp(s + token, "qid", 3))) goto python;
        double number;
        Py_ssize_t colon = k;
        k = scan_number(s, colon + 1, end, &number);
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

/* parse_svmlight(lines, vocabulary, keys, max_bytes, names) -> (status, indptr, indices, data, labels) as
 * bytes: status per line (0 row, 1 nothing, 2 for the Python parser); one CSR row and label per status-0
 * line. ``names`` keeps the str of each numbered name from call to call (see numbered_name). */
static PyObject *parse_svmlight(PyObject *self, PyObject *args) {
    PyObject *lines, *vocabulary, *keys, *names;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "O!O!O!nO!", &PyList_Type, &lines, &PyDict_Type, &vocabulary, &PyList_Type, &keys,
                          &max_bytes, &PyList_Type, &names))
        return NULL;
    Growing status = {.in_bytes = 1}, indptr = {.in_bytes = 1}, indices = {0}, data = {0}, labels = {.in_bytes = 1},
            stamps = {0}, numbered = {0};
    int64_t nnz = 0;
    Py_ssize_t n = PyList_GET_SIZE(lines);
    if (reserve(&status, n) < 0 || reserve(&indptr, 8 * (n + 1)) < 0 || reserve(&labels, 8 * n) < 0
        || grow(&indptr, &nnz, 8) < 0)
        goto fail;
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *line = PyList_GET_ITEM(lines, r);
        if (!PyBytes_Check(line)) { PyErr_SetString(PyExc_TypeError, "parse_svmlight: expected bytes"); goto fail; }
        Py_ssize_t len = PyBytes_GET_SIZE(line);
        double label = 0.0;
        int error = 0;
        char kind = len > max_bytes ? LINE_PYTHON
            : (char)svmlight_line(PyBytes_AS_STRING(line), len, vocabulary, keys, &indices, &data, &stamps, &numbered,
                                  names, r + 1, &label, &error);
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

#if defined(__GNUC__)
#define PREFETCH(address) __builtin_prefetch(address)
#else
#define PREFETCH(address) ((void)(address))
#endif

static inline uint64_t load8(const char *p) {
    uint64_t word;
    memcpy(&word, p, 8);
    return word;
}

static inline int json_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Past the JSON whitespace at s[k]. Every scan below reads s[len], the NUL that ends a bytes object,
 * as the end of the input: it belongs to no token. */
static inline Py_ssize_t skip_space(const char *s, Py_ssize_t k) {
    while (json_space((unsigned char)s[k])) k++;
    return k;
}

/* The string at s[k] == '"' if it holds printable ASCII only (no escape): the index past its closing
 * quote; -1 otherwise. */
static inline Py_ssize_t json_string(const char *s, Py_ssize_t k) {
    for (k++;; k++) {
        unsigned char c = (unsigned char)s[k];
        if (c == '"') return k + 1;
        if (c < 0x20 || c >= 0x7f || c == '\\') return -1;
    }
}

/* A scalar JSON value, as json.loads would give it. */
enum { V_NONE, V_STRING, V_INT, V_FLOAT, V_TRUE, V_FALSE };
typedef struct { int kind; Py_ssize_t start, end; int64_t integer; double real; } Scalar;

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
    for (; s[k] >= '0' && s[k] <= '9'; k++) m = m * 10 + (uint64_t)(s[k] - '0');
    *mantissa = m;
    return k - start;
}

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
    return scan_number(s + start, 0, k - start, &value->real) >= 0 ? k : -1;  /* -1 for 1e999 and the like */
}

/* The id or label at s[k]: a string, a number or true/false (null, objects and arrays are the Python
 * parser's). The index past it; -1 for anything else. */
static Py_ssize_t json_scalar(const char *s, Py_ssize_t k, const char *end, Scalar *value) {
    switch (s[k]) {
    case '"':
        value->kind = V_STRING;
        value->start = k + 1;
        k = json_string(s, k);
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
 * bytes), its str (made once, so that its hash is computed once and the learner's dict lookups match
 * it by identity), and its column in the batch of the call that last met it (``call``). */
typedef struct {
    uint64_t head;
    uint32_t check, stamp;
    int64_t column;
    uint32_t hash;
    int32_t entry;
    PyObject *name;  /* NULL marks a free slot */
    uint64_t call;
} Slot;
typedef struct { Py_ssize_t offset, len; } Spelling;
typedef struct {
    Slot *slots;
    Py_ssize_t mask, used;
    Growing spellings, arena, pending;  /* pending: the names of the row being read */
    PyObject *keys;  /* the names of this call's columns */
    uint64_t call;
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
    for (Py_ssize_t i = 0; i < size; i++) slots[i].name = NULL;
    for (Py_ssize_t i = 0; t->slots && i <= t->mask; i++) {
        if (!t->slots[i].name) continue;
        Py_ssize_t j = t->slots[i].hash & (size - 1);
        while (slots[j].name) j = (j + 1) & (size - 1);
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

/* The slot of this name (s[name->start:] its bytes), its column numbered in this call's ``keys`` when
 * first met in the call; NULL on error. */
static inline Slot *name_slot(Names *t, const char *s, const Pending *name) {
    Py_ssize_t len = name->len, i = name->hash & t->mask;
    s += name->start;
    Slot *slot = NULL;
    for (;; i = (i + 1) & t->mask) {
        Slot *candidate = &t->slots[i];
        if (!candidate->name) break;
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
        if (!str || grow(&t->spellings, &spelling, sizeof spelling) < 0 || (len && grow(&t->arena, s, len) < 0)) {
            Py_XDECREF(str);
            return NULL;
        }
        slot = &t->slots[i];
        *slot = (Slot){name->head, name->check, 0, -1, (uint32_t)name->hash, (int32_t)t->used++, str, 0};
    }
    if (slot->call != t->call) {
        slot->column = PyList_GET_SIZE(t->keys);
        if (PyList_Append(t->keys, slot->name) < 0) return NULL;
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

static void names_clear(Names *t) {
    for (Py_ssize_t i = 0; t->slots && i <= t->mask; i++) Py_XDECREF(t->slots[i].name);
    PyMem_Free(t->slots);
    PyMem_Free(t->spellings.data);
    PyMem_Free(t->arena.data);
    PyMem_Free(t->pending.data);
    PyMem_Free(t);
}

static void names_free(PyObject *capsule) {
    Names *t = PyCapsule_GetPointer(capsule, "pegasos_stream.names");
    if (t) names_clear(t);
}

/* name_table() -> a capsule of an empty Names table, to pass to every parse_json_events call of a run. */
static PyObject *name_table(PyObject *self, PyObject *unused) {
    Names *t = PyMem_Calloc(1, sizeof(Names));
    if (!t) return PyErr_NoMemory();
    if (names_resize(t, 1024) < 0) { PyMem_Free(t); return NULL; }
    PyObject *capsule = PyCapsule_New(t, "pegasos_stream.names", names_free);
    if (!capsule) names_clear(t);
    return capsule;
}

/* The feature object at s[k] == '{' into the CSR buffers: the index past it; -1 if it is not an
 * object of distinct names and finite numbers in the plain grammar, or on error (with *error set).
 * ``end`` bounds what may be read. The row is read first, fetching the table slot of each name, then
 * its names are looked up, so that the memory reads overlap. */
static Py_ssize_t json_features(const char *s, Py_ssize_t k, const char *end, Names *names, Growing *indices,
                                Growing *data, uint32_t stamp, int *error) {
    Growing *pending = &names->pending;
    pending->len = 0;
    k = skip_space(s, k + 1);
    if (s[k] == '}') return k + 1;
    for (;;) {
        if (s[k] != '"') return -1;
        Pending name;
        name.start = k + 1;
        k = json_string(s, k);
        if (k < 0) return -1;
        name.len = k - 1 - name.start;
        name_key(&name, s + name.start, end);
        PREFETCH(&names->slots[name.hash & names->mask]);
        k = skip_space(s, k);
        if (s[k] != ':') return -1;
        Scalar value;
        k = json_number(s, skip_space(s, k + 1), end, 15, &value);
        if (k < 0) return -1;
        double number = value.kind == V_INT ? (double)value.integer : value.real;
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
        Slot *slot = name_slot(names, s, (const Pending *)pending->data + j);
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

/* One JSON value into the CSR buffers, its id and its label; LINE_PYTHON leaves the buffers as they
 * were (but for new columns). */
static int json_line(const char *s, Py_ssize_t len, const Field *fields, Names *names, Growing *indices,
                     Growing *data, uint32_t stamp, Scalar *id, Scalar *label, int *error) {
    Py_ssize_t indices_before = indices->len, data_before = data->len, k = skip_space(s, 0);
    int has_x = 0;
    id->kind = label->kind = V_NONE;
    if (s[k] != '{') return LINE_PYTHON;
    k = skip_space(s, k + 1);
    for (;;) {
        if (s[k] != '"') goto python;
        Py_ssize_t start = k + 1;
        k = json_string(s, k);
        if (k < 0) goto python;
        Py_ssize_t name_len = k - 1 - start;
        k = skip_space(s, k);
        if (s[k] != ':') goto python;
        k = skip_space(s, k + 1);
        if (is_field(s + start, name_len, &fields[1])) {
            if (has_x || s[k] != '{') goto python;
            has_x = 1;
            k = json_features(s, k, s + len + 1, names, indices, data, stamp, error);
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

/* parse_json_events(values, id_field, x_field, label_field, text_field, max_bytes, names, keys)
 * -> (status, indptr, indices, data, ids, labels): status per value as bytes (0 row, 2 for the Python
 * parser); one CSR row, id (None when absent) and label per status-0 value. ``names`` is a name_table()
 * kept from call to call; the columns of this call are named by ``keys`` (filled in first-seen order). */
static PyObject *parse_json_events(PyObject *self, PyObject *args) {
    PyObject *values, *field_names[4], *capsule, *keys;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "O!UUUUnOO!", &PyList_Type, &values, &field_names[0], &field_names[1],
                          &field_names[2], &field_names[3], &max_bytes, &capsule, &PyList_Type, &keys))
        return NULL;
    Names *names = PyCapsule_GetPointer(capsule, "pegasos_stream.names");
    if (!names) return NULL;
    names->keys = keys;
    names->call++;
    Field fields[4];  /* id, x, label, text */
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
    Growing status = {.in_bytes = 1}, indptr = {.in_bytes = 1}, indices = {.in_bytes = 1}, data = {.in_bytes = 1};
    PyObject *ids = PyList_New(0), *labels = PyList_New(0);
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
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(values); r++) {
        PyObject *value = PyList_GET_ITEM(values, r);
        if (!PyBytes_Check(value)) { PyErr_SetString(PyExc_TypeError, "parse_json_events: expected bytes"); goto fail; }
        Py_ssize_t len = PyBytes_GET_SIZE(value);
        const char *s = PyBytes_AS_STRING(value);
        Scalar id, label;
        int error = 0;
        char kind = (len > max_bytes || !distinct) ? LINE_PYTHON
            : (char)json_line(s, len, fields, names, &indices, &data, next_row(names), &id, &label, &error);
        if (error) goto fail;
        if (grow(&status, &kind, 1) < 0) goto fail;
        if (kind == LINE_ROW) {
            nnz = indices.len / 8;
            if (grow(&indptr, &nnz, 8) < 0) goto fail;
            PyObject *id_object = scalar_object(s, &id), *label_object = scalar_object(s, &label);
            int failed = !id_object || !label_object || PyList_Append(ids, id_object) < 0
                || PyList_Append(labels, label_object) < 0;
            Py_XDECREF(id_object);
            Py_XDECREF(label_object);
            if (failed) goto fail;
        }
    }
    return Py_BuildValue("NNNNNN", take_bytes(&status), take_bytes(&indptr), take_bytes(&indices),
                         take_bytes(&data), ids, labels);
fail:
    discard(&status);
    discard(&indptr);
    discard(&indices);
    discard(&data);
    Py_XDECREF(ids);
    Py_XDECREF(labels);
    return NULL;
}

static PyMethodDef methods[] = {
    {"learn_rows", learn_rows, METH_VARARGS, "PegasosClassifier.learn_one over CSR rows; returns the stop row."},
    {"rows_from_dicts", rows_from_dicts, METH_VARARGS, "Feature dicts to CSR bytes (indptr, indices, data)."},
    {"parse_svmlight", parse_svmlight, METH_VARARGS, "svmlight lines to (status, indptr, indices, data, labels)."},
    {"parse_json_events", parse_json_events, METH_VARARGS,
     "JSON feature events to (status, indptr, indices, data, ids, labels)."},
    {"name_table", name_table, METH_NOARGS, "An empty table of feature names for parse_json_events."},
    {"sparse_dot", sparse_dot, METH_VARARGS, "<v, x> of two dicts, summed as sum() sums; None if not floats."},
    {"axpy_sq_norm", axpy_sq_norm, METH_VARARGS, "v += c*x in place; the change of the squared norm."},
    {"gather", gather, METH_VARARGS, "Values of keys from a weight dict into a buffer, with presence flags."},
    {"scatter", scatter, METH_VARARGS, "Values of the given columns back into a weight dict, in order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fast", "Compiled inner loops for batch replay.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__fast(void) { return PyModule_Create(&module); }
