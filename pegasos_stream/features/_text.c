/* The compiled twin of EmailFeatures(reader="bytes", hash_bits=...) over a batch of texts.
 *
 * rows(texts, parse, n, words, shapes, max_bytes, hash_bits, binary, normalize, hashed) reads each text
 * (bytes) as pegasos_stream.features.mime.message_bytes does (when parse), keeps its first max_bytes
 * bytes, and hashes its byte n-grams ("c:" + n bytes), ASCII words ("w:" + word) and shapes ("s:" + shape) to CRC-32 mod
 * 2^hash_bits, exactly as EmailFeatures.transform_one; it returns the batch as CSR rows over
 * columns numbered by first appearance: (indptr bytes of int64, indices bytes of int64, data bytes
 * of float64, keys: list of the hashed columns, empty_bodies: how many texts kept no body text in their
 * first max_bytes), the rows Rows.from_dicts makes of the dicts. With hashed, the columns are the hashed
 * columns themselves, and keys is None.
 * Every step is the one of features/mime.py, on bytes; tests/test_text_compiled.py and tests/test_mime_rule.py
 * hold them equal.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../crc32.h"

/* -- growable byte buffers, and the writer of the reader's output ------------------------------ */

/* A buffer that doubles as it fills: raw memory (PyMem_Raw*, which needs no GIL), or the inside of a bytes object
 * (``bytes``), which buf_take then hands over without a copy (nor the page faults of a second big buffer). A bytes
 * object is resized with the GIL: when ``released`` points to the state of a thread that gave it up, the GIL is taken
 * back for the resize (rare: the first room is about what a batch needs). A failure returns -1, the exception set
 * only by a resize of a bytes object; otherwise the caller raises MemoryError once it holds the GIL. */
typedef struct {
    unsigned char *p;
    Py_ssize_t len, cap;
    PyObject *bytes;
    PyThreadState **released;
} Buf;

static int bytes_resize(Buf *b, Py_ssize_t cap) {
    PyThreadState *state = b->released ? *b->released : NULL;
    if (state) PyEval_RestoreThread(state);
    int r = _PyBytes_Resize(&b->bytes, cap);  /* frees the object on failure */
    if (state) *b->released = PyEval_SaveThread();
    return r;
}

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) {
        if (cap > PY_SSIZE_T_MAX / 2) return -1;
        cap *= 2;
    }
    if (b->bytes) {
        if (bytes_resize(b, cap) < 0) {
            b->p = NULL;
            b->len = b->cap = 0;
            return -1;
        }
        b->p = (unsigned char *)PyBytes_AS_STRING(b->bytes);
    } else {
        unsigned char *p = PyMem_RawRealloc(b->p, (size_t)cap);
        if (!p) return -1;
        b->p = p;
    }
    b->cap = cap;
    return 0;
}

/* An empty buffer inside a bytes object of room for ``cap`` bytes (untouched pages cost nothing). */
static int buf_in_bytes(Buf *b, Py_ssize_t cap) {
    b->bytes = PyBytes_FromStringAndSize(NULL, cap > 0 ? cap : 1);
    if (!b->bytes) return -1;
    b->p = (unsigned char *)PyBytes_AS_STRING(b->bytes);
    b->len = 0;
    b->cap = cap > 0 ? cap : 1;
    return 0;
}

/* The buffer's bytes as a bytes object (a new reference), the buffer left empty. */
static PyObject *buf_take(Buf *b) {
    PyObject *bytes = b->bytes;
    if (!bytes) return PyBytes_FromStringAndSize(b->p ? (const char *)b->p : "", b->len);
    b->bytes = NULL;
    b->p = NULL;
    b->cap = 0;
    return _PyBytes_Resize(&bytes, b->len) < 0 ? NULL : bytes;
}

static int buf_put(Buf *b, const unsigned char *s, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

static int buf_byte(Buf *b, unsigned char c) { return buf_put(b, &c, 1); }

static void buf_free(Buf *b) {
    if (b->bytes) Py_CLEAR(b->bytes);
    else PyMem_RawFree(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

static int is_space(unsigned char c) { /* Python's bytes \s and bytes.strip(): space \t \n \r \v \f */
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* The output of the reader: texts joined by newlines, each whitespace run written as one space,
 * cut at max bytes (what the Python reader's output, sliced, holds). */
typedef struct {
    unsigned char *out;
    Py_ssize_t len, max;
    int space, texts;
    Py_ssize_t body; /* where the text of the body starts in out */
} Writer;

static void w_put(Writer *w, const unsigned char *s, Py_ssize_t n) {
    unsigned char *out = w->out;
    Py_ssize_t len = w->len, max = w->max;
    int space = w->space;
    for (Py_ssize_t i = 0; i < n && len < max; i++) {
        unsigned char c = s[i];
        int blank = c == ' ' || (c >= '\t' && c <= '\r'); /* is_space */
        if (!(blank && space)) out[len++] = blank ? ' ' : c;
        space = blank;
    }
    w->len = len;
    w->space = space;
}

static void w_text(Writer *w, const unsigned char *s, Py_ssize_t n) {
    if (w->texts++) w_put(w, (const unsigned char *)"\n", 1);
    w_put(w, s, n);
}

static int w_full(const Writer *w) { return w->len >= w->max; }

/* Whether s[0:n] holds a byte that is not white space. */
static int has_text(const unsigned char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (!is_space(s[i])) return 1;
    return 0;
}

/* -- header fields ------------------------------------------------------------------------------ */

enum { F_SUBJECT, F_FROM, F_CTYPE, F_CTE, F_TO, F_DATE, F_RECEIVED, F_MESSAGE_ID, F_RETURN_PATH, F_MIME, N_FIELDS };
static const char *FIELD_NAMES[N_FIELDS] = {
    "subject", "from", "content-type", "content-transfer-encoding", "to",
    "date", "received", "message-id", "return-path", "mime-version"};
#define N_OUTPUT 2       /* subject, from: the headers written, in this order */
#define FIRST_MESSAGE 0  /* FIELD_NAMES[F_SUBJECT..] except the two MIME ones tell a message */
#define MAX_DEPTH 8

typedef struct {
    Buf value[N_FIELDS];
    int present[N_FIELDS];
} Fields;

static void fields_free(Fields *f) {
    for (int i = 0; i < N_FIELDS; i++) buf_free(&f->value[i]);
}

static int name_byte(unsigned char c) { return c >= '!' && c <= '~' && c != ':'; }

static void strip(const unsigned char **s, Py_ssize_t *n) {
    while (*n && is_space((*s)[0])) { (*s)++; (*n)--; }
    while (*n && is_space((*s)[*n - 1])) (*n)--;
}

static unsigned char lower(unsigned char c) { return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c; }

/* The lines of d[0:n], each ended by CRLF, CR or LF: next_line gives data[*start:*end], the line end left out.
 * ``lf`` remembers the next LF, so that a text of lone CRs is read in one pass. */
typedef struct {
    const unsigned char *d;
    Py_ssize_t n, next, lf; /* lf: where the next LF at or after ``next`` is (n: none), -1 before the first look */
} Lines;

static Lines lines_of(const unsigned char *d, Py_ssize_t n) { return (Lines){d, n, 0, -1}; }

static int next_line(Lines *it, Py_ssize_t *start, Py_ssize_t *end) {
    if (it->next >= it->n) return 0;
    *start = it->next;
    if (it->lf < it->next) {
        const unsigned char *lf = memchr(it->d + it->next, '\n', (size_t)(it->n - it->next));
        it->lf = lf ? lf - it->d : it->n;
    }
    const unsigned char *cr = memchr(it->d + it->next, '\r', (size_t)(it->lf - it->next));
    *end = cr ? cr - it->d : it->lf;
    if (*end == it->n) it->next = it->n;
    else if (cr && *end + 1 < it->n && it->d[*end + 1] == '\n') it->next = *end + 2;
    else it->next = *end + 1;
    return 1;
}

static int field_index(const unsigned char *name, Py_ssize_t n) {
    for (int i = 0; i < N_FIELDS; i++) {
        const char *known = FIELD_NAMES[i];
        if ((Py_ssize_t)strlen(known) != n) continue;
        Py_ssize_t k = 0;
        while (k < n && lower(name[k]) == (unsigned char)known[k]) k++;
        if (k == n) return i;
    }
    return -1;
}

/* The header fields of data[0:n] (first of each name, unfolded) and where its body starts: after the empty
 * line that ends the header block, or at the first line that is neither a field nor a continuation. */
static int split(const unsigned char *data, Py_ssize_t n, Fields *f, Py_ssize_t *body) {
    memset(f, 0, sizeof(*f));
    int current = -1;
    Lines lines = lines_of(data, n);
    Py_ssize_t start, end;
    while (next_line(&lines, &start, &end)) {
        const unsigned char *line = data + start;
        Py_ssize_t len = end - start;
        if (!len) {
            *body = lines.next;
            return 0;
        }
        if (line[0] == ' ' || line[0] == '\t') {
            if (current >= 0) {
                strip(&line, &len);
                if (buf_byte(&f->value[current], ' ') < 0 || buf_put(&f->value[current], line, len) < 0) return -1;
            }
            continue;
        }
        current = -1;
        if (len >= 5 && memcmp(line, "From ", 5) == 0) continue; /* a misplaced envelope line, skipped */
        const unsigned char *colon = memchr(line, ':', (size_t)len);
        Py_ssize_t name_len = colon ? colon - line : 0, k = 0;
        while (k < name_len && name_byte(line[k])) k++;
        if (!colon || k < name_len) {
            *body = start;
            return 0;
        }
        int index = field_index(line, name_len);
        if (index < 0 || f->present[index]) continue;
        const unsigned char *value = colon + 1;
        Py_ssize_t value_len = len - name_len - 1;
        strip(&value, &value_len);
        f->present[index] = 1;
        if (buf_put(&f->value[index], value, value_len) < 0) return -1;
        current = index;
    }
    *body = n;
    return 0;
}

/* -- decoders ----------------------------------------------------------------------------------- */

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Base64, every byte outside the alphabet ignored; a last group of 2 or 3 letters gives 1 or 2
 * bytes, a last single letter nothing. */
static int base64(const unsigned char *s, Py_ssize_t n, Buf *out) {
    if (buf_reserve(out, n / 4 * 3 + 3) < 0) return -1;
    uint32_t acc = 0;
    int have = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int v = b64_value(s[i]);
        if (v < 0) continue;
        acc = (acc << 6) | (uint32_t)v;
        if (++have == 4) {
            out->p[out->len++] = (unsigned char)(acc >> 16);
            out->p[out->len++] = (unsigned char)(acc >> 8);
            out->p[out->len++] = (unsigned char)acc;
            acc = 0;
            have = 0;
        }
    }
    if (have == 2) out->p[out->len++] = (unsigned char)(acc >> 4);
    if (have == 3) {
        out->p[out->len++] = (unsigned char)(acc >> 10);
        out->p[out->len++] = (unsigned char)(acc >> 2);
    }
    return 0;
}

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Quoted-printable: "=XX" is that byte, "=" before a line end joins the lines, else as is; with
 * underscores (an encoded word's Q), "_" is a space. */
static int quoted_printable(const unsigned char *s, Py_ssize_t n, int underscores, Buf *out) {
    if (buf_reserve(out, n) < 0) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c == '=') {
            if (i + 2 < n && s[i + 1] == '\r' && s[i + 2] == '\n') { i += 2; continue; }
            if (i + 1 < n && (s[i + 1] == '\n' || s[i + 1] == '\r')) { i += 1; continue; }
            if (i + 2 < n && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
                out->p[out->len++] = (unsigned char)(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
                i += 2;
                continue;
            }
        }
        out->p[out->len++] = (underscores && c == '_') ? ' ' : c;
    }
    return 0;
}

/* The length of the run of bytes at s (at most limit + 1 counted) that are neither "?" nor space. */
static Py_ssize_t word_run(const unsigned char *s, Py_ssize_t n, Py_ssize_t limit) {
    Py_ssize_t k = 0;
    while (k < n && k <= limit && s[k] != '?' && !is_space(s[k])) k++;
    return k;
}

/* A header value with its RFC 2047 encoded words =?charset?B|Q?text?= decoded (charset not applied), the
 * white space between two encoded words dropped. */
static int decode_words(const unsigned char *v, Py_ssize_t n, Buf *out) {
    Py_ssize_t i = 0, word_end = -1, out_end = 0; /* where the last encoded word ended, in v and in out */
    while (i < n) {
        if (v[i] == '=' && i + 1 < n && v[i + 1] == '?') {
            Py_ssize_t cs = word_run(v + i + 2, n - i - 2, 40), k = i + 2 + cs;
            if (cs >= 1 && cs <= 40 && k + 2 < n && v[k] == '?' && strchr("bBqQ", v[k + 1]) && v[k + 1] && v[k + 2] == '?') {
                Py_ssize_t t0 = k + 3, tl = word_run(v + t0, n - t0, 1000), e = t0 + tl;
                if (tl <= 1000 && e + 1 < n && v[e] == '?' && v[e + 1] == '=') {
                    Py_ssize_t k2 = word_end;
                    while (k2 >= 0 && k2 < i && is_space(v[k2])) k2++;
                    if (k2 == i) out->len = out_end; /* only white space since the last encoded word */
                    int r = (v[k + 1] == 'b' || v[k + 1] == 'B') ? base64(v + t0, tl, out)
                                                                   : quoted_printable(v + t0, tl, 1, out);
                    if (r < 0) return -1;
                    i = word_end = e + 2;
                    out_end = out->len;
                    continue;
                }
            }
        }
        if (buf_byte(out, v[i]) < 0) return -1;
        i++;
    }
    return 0;
}

/* HTML to text: every "<" + at most 2,000 bytes other than ">" + ">" made a space. */
static int strip_tags(const unsigned char *s, Py_ssize_t n, Buf *out) {
    if (buf_reserve(out, n) < 0) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] == '<') {
            Py_ssize_t limit = n - i - 1 < 2001 ? n - i - 1 : 2001;
            const unsigned char *gt = memchr(s + i + 1, '>', (size_t)limit);
            if (gt) {
                out->p[out->len++] = ' ';
                i = gt - s;
                continue;
            }
        }
        out->p[out->len++] = s[i];
    }
    return 0;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

static Py_ssize_t run_of(const unsigned char *s, Py_ssize_t n, int (*in)(unsigned char), Py_ssize_t limit) {
    Py_ssize_t k = 0;
    while (k < n && k <= limit && in(s[k])) k++;
    return k;
}

static int is_hex(unsigned char c) { return hex_value(c) >= 0; }

static int put_utf8(Buf *out, uint32_t code) {
    unsigned char b[4];
    int len;
    if (code < 0x80) { b[0] = (unsigned char)code; len = 1; }
    else if (code < 0x800) { b[0] = (unsigned char)(0xC0 | code >> 6); b[1] = (unsigned char)(0x80 | (code & 0x3F)); len = 2; }
    else if (code < 0x10000) {
        b[0] = (unsigned char)(0xE0 | code >> 12); b[1] = (unsigned char)(0x80 | ((code >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (code & 0x3F)); len = 3;
    } else {
        b[0] = (unsigned char)(0xF0 | code >> 18); b[1] = (unsigned char)(0x80 | ((code >> 12) & 0x3F));
        b[2] = (unsigned char)(0x80 | ((code >> 6) & 0x3F)); b[3] = (unsigned char)(0x80 | (code & 0x3F)); len = 4;
    }
    return buf_put(out, b, len);
}

static const char *NAMED[][2] = {{"nbsp", " "}, {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}};

/* HTML character references: numeric ones as UTF-8 (a space for no character), six named ones. */
static int entities(const unsigned char *s, Py_ssize_t n, Buf *out) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (s[i] == '&' && i + 1 < n) {
            const unsigned char *p = s + i + 1;
            Py_ssize_t left = n - i - 1, run = 0, skip = 0;
            if (p[0] == '#' && left > 1 && is_digit(p[1])) {
                run = run_of(p + 1, left - 1, is_digit, 7);
                if (run <= 7 && 1 + run < left && p[1 + run] == ';') {
                    uint32_t code = 0;
                    for (Py_ssize_t k = 0; k < run; k++) code = code * 10 + (uint32_t)(p[1 + k] - '0');
                    skip = 2 + run + 1;
                    if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF) ? buf_byte(out, ' ') : put_utf8(out, code)) return -1;
                }
            } else if (p[0] == '#' && left > 2 && (p[1] == 'x' || p[1] == 'X') && is_hex(p[2])) {
                run = run_of(p + 2, left - 2, is_hex, 6);
                if (run <= 6 && 2 + run < left && p[2 + run] == ';') {
                    uint32_t code = 0;
                    for (Py_ssize_t k = 0; k < run; k++) code = code * 16 + (uint32_t)hex_value(p[2 + k]);
                    skip = 3 + run + 1;
                    if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF) ? buf_byte(out, ' ') : put_utf8(out, code)) return -1;
                }
            } else if (is_letter(p[0])) {
                run = run_of(p, left, is_letter, 6);
                if (run >= 2 && run <= 6 && run < left && p[run] == ';') {
                    skip = 1 + run + 1;
                    const char *value = NULL;
                    for (size_t k = 0; k < sizeof(NAMED) / sizeof(NAMED[0]) && !value; k++) {
                        const char *name = NAMED[k][0];
                        Py_ssize_t m = 0;
                        if ((Py_ssize_t)strlen(name) != run) continue;
                        while (m < run && lower(p[m]) == (unsigned char)name[m]) m++;
                        if (m == run) value = NAMED[k][1];
                    }
                    if (value ? buf_put(out, (const unsigned char *)value, 1) : buf_put(out, s + i, skip)) return -1;
                }
            }
            if (skip) {
                i += skip;
                continue;
            }
        }
        if (buf_byte(out, s[i]) < 0) return -1;
        i++;
    }
    return 0;
}

/* -- the reader --------------------------------------------------------------------------------- */

static int equals_lower(const unsigned char *s, Py_ssize_t n, const char *word) {
    Py_ssize_t m = (Py_ssize_t)strlen(word);
    if (n != m) return 0;
    for (Py_ssize_t k = 0; k < n; k++)
        if (lower(s[k]) != (unsigned char)word[k]) return 0;
    return 1;
}

/* The boundary parameter of a Content-Type value (quotes removed); length 0 when there is none. */
static void boundary_of(const unsigned char *v, Py_ssize_t n, const unsigned char **b, Py_ssize_t *bn) {
    *b = v;
    *bn = 0;
    const unsigned char *semi = memchr(v, ';', (size_t)n);
    while (semi) {
        const unsigned char *p = semi + 1;
        Py_ssize_t left = n - (p - v);
        const unsigned char *next = memchr(p, ';', (size_t)left);
        Py_ssize_t len = next ? next - p : left;
        const unsigned char *eq = memchr(p, '=', (size_t)len);
        if (eq) {
            const unsigned char *key = p, *value = eq + 1;
            Py_ssize_t key_len = eq - p, value_len = len - key_len - 1;
            strip(&key, &key_len);
            if (equals_lower(key, key_len, "boundary")) {
                strip(&value, &value_len);
                if (value_len >= 2 && value[0] == '"' && value[value_len - 1] == '"') {
                    value++;
                    value_len -= 2;
                }
                *b = value;
                *bn = value_len;
                return;
            }
        }
        semi = next;
    }
}

static int collect(const unsigned char *data, Py_ssize_t n, const Fields *f, Py_ssize_t body, int depth, Writer *w);

/* One part of a multipart body (part[0:n], its own headers and body), read at depth. */
static int read_part(const unsigned char *part, Py_ssize_t n, int depth, Writer *w) {
    Fields inner;
    Py_ssize_t inner_body;
    int r = split(part, n, &inner, &inner_body);
    if (r == 0 && !w_full(w)) r = collect(part, n, &inner, inner_body, depth, w);
    fields_free(&inner);
    return r;
}

/* Whether line[0:len] is a boundary line: "--" + boundary, "--" when it is the closing one (*closing), then
 * only spaces or tabs. */
static int is_boundary(const unsigned char *line, Py_ssize_t len, const unsigned char *b, Py_ssize_t bn, int *closing) {
    if (len < bn + 2 || line[0] != '-' || line[1] != '-' || memcmp(line + 2, b, (size_t)bn) != 0) return 0;
    Py_ssize_t k = bn + 2;
    *closing = len >= k + 2 && line[k] == '-' && line[k + 1] == '-';
    for (k += 2 * *closing; k < len; k++)
        if (line[k] != ' ' && line[k] != '\t') return 0;
    return 1;
}

/* The parts of a multipart body (between its boundary lines, the line end before each left out), each read;
 * *found tells whether any line is a boundary line. */
static int parts(const unsigned char *body, Py_ssize_t n, const unsigned char *b, Py_ssize_t bn, int depth, Writer *w,
                 int *found) {
    Py_ssize_t part = -1, last_end = 0, start, end; /* part: where the part being read starts; -1 before the first */
    Lines lines = lines_of(body, n);
    int closing = 0;
    while (next_line(&lines, &start, &end)) {
        if (is_boundary(body + start, end - start, b, bn, &closing)) {
            Py_ssize_t stop = last_end > part ? last_end : part;
            if (part >= 0 && read_part(body + part, stop - part, depth + 1, w) < 0) return -1;
            if (closing) {
                *found = 1;
                return 0;
            }
            part = lines.next;
        }
        last_end = end;
    }
    *found = part >= 0;
    return part >= 0 ? read_part(body + part, n - part, depth + 1, w) : 0;
}

static int collect(const unsigned char *data, Py_ssize_t n, const Fields *f, Py_ssize_t body, int depth, Writer *w) {
    const unsigned char *ct = f->value[F_CTYPE].p ? f->value[F_CTYPE].p : (const unsigned char *)"";
    Py_ssize_t ct_len = f->value[F_CTYPE].len;
    const unsigned char *semi = memchr(ct, ';', (size_t)ct_len);
    const unsigned char *kind = ct;
    Py_ssize_t kind_len = semi ? semi - ct : ct_len;
    strip(&kind, &kind_len);
    Py_ssize_t slashes = 0;
    for (Py_ssize_t k = 0; k < kind_len; k++) slashes += kind[k] == '/';
    if (slashes != 1) { /* no type, or one that names no single "/": plain text */
        kind = (const unsigned char *)"text/plain";
        kind_len = 10;
    }
    int multipart = kind_len >= 10 && equals_lower(kind, 10, "multipart/");
    int message = kind_len >= 8 && equals_lower(kind, 8, "message/") && !equals_lower(kind, kind_len, "message/delivery-status");
    if (depth < MAX_DEPTH && multipart) {
        const unsigned char *b;
        Py_ssize_t bn;
        boundary_of(ct, ct_len, &b, &bn);
        int found = 0;
        if (bn) {
            int r = parts(data + body, n - body, b, bn, depth, w, &found);
            if (r < 0 || found) return r;
        }
    } else if (depth < MAX_DEPTH && message) {
        return read_part(data + body, n - body, depth + 1, w);
    }
    if (!multipart && !message && !(kind_len >= 5 && equals_lower(kind, 5, "text/"))) return 0;
    const unsigned char *cte = f->value[F_CTE].p;
    Py_ssize_t cte_len = f->value[F_CTE].len;
    if (cte) strip(&cte, &cte_len);
    Buf decoded = {0}, tags = {0}, text = {0};
    const unsigned char *s = data + body;
    Py_ssize_t len = n - body;
    int r = 0;
    if (cte && equals_lower(cte, cte_len, "base64")) {
        r = base64(s, len, &decoded);
        s = decoded.p;
        len = decoded.len;
    } else if (cte && equals_lower(cte, cte_len, "quoted-printable")) {
        r = quoted_printable(s, len, 0, &decoded);
        s = decoded.p;
        len = decoded.len;
    }
    if (r == 0 && equals_lower(kind, kind_len, "text/html")) {
        r = strip_tags(s, len, &tags);
        if (r == 0) r = entities(tags.p, tags.len, &text);
        s = text.p;
        len = text.len;
    }
    if (r == 0) w_text(w, s ? s : (const unsigned char *)"", len);
    buf_free(&decoded);
    buf_free(&tags);
    buf_free(&text);
    return r;
}

/* message_bytes(raw)[:w->max] into the writer (in raw mode when raw is not a message). */
static int read_message(const unsigned char *raw, Py_ssize_t n, Writer *w) {
    const unsigned char *data = raw;
    Py_ssize_t len = n;
    if (n >= 5 && memcmp(raw, "From ", 5) == 0) {
        Lines lines = lines_of(raw, n);
        Py_ssize_t start, end;
        next_line(&lines, &start, &end);
        data = raw + lines.next;
        len = n - lines.next;
    }
    Py_ssize_t k = 0;
    while (k < len && name_byte(data[k])) k++;
    int message = k > 0 && k < len && data[k] == ':';
    Fields f;
    Py_ssize_t body = 0;
    if (message) {
        if (split(data, len, &f, &body) < 0) { fields_free(&f); return -1; }
        message = 0;
        for (int i = 0; i < N_FIELDS; i++)
            if (f.present[i] && i != F_CTYPE && i != F_CTE) message = 1;
    }
    if (!message) {
        if (k > 0 && k < len && data[k] == ':') fields_free(&f);
        Py_ssize_t m = n < w->max ? n : w->max;
        memcpy(w->out, raw, (size_t)m);
        w->len = m;
        return 0;
    }
    int r = 0;
    for (int i = 0; i < N_OUTPUT && r == 0; i++) {
        if (!f.present[i] || !f.value[i].len) continue;
        Buf value = {0};
        const char *name = FIELD_NAMES[i];
        r = decode_words(f.value[i].p, f.value[i].len, &value);
        if (r == 0) {
            w_text(w, (const unsigned char *)name, (Py_ssize_t)strlen(name));
            w_put(w, (const unsigned char *)": ", 2);
            w_put(w, value.p ? value.p : (const unsigned char *)"", value.len);
        }
        buf_free(&value);
    }
    w->body = w->len;
    if (r == 0 && !w_full(w)) r = collect(data, len, &f, body, 0, w);
    fields_free(&f);
    return r;
}

/* -- hashing, and the rows ---------------------------------------------------------------------- */

/* The longest n-gram hashed by crc_after_zeros, from the state of "c:" after n zero bytes; a longer one goes through
 * crc_update. */
#define SHORT_GRAM 8

/* An open-addressing map from a column to a slot number (first appearance), and a count per slot. */
typedef struct {
    uint64_t *keys;  /* column + 1; 0 when empty */
    Py_ssize_t *slots;
    Py_ssize_t *where;  /* the table position of each slot, to empty the map in O(used) */
    Py_ssize_t size, used;
} Map;

static int map_init(Map *m, Py_ssize_t want) {
    Py_ssize_t size = 16;
    while (size < 2 * want + 2) size *= 2;
    m->keys = PyMem_RawCalloc((size_t)size, sizeof(uint64_t));
    m->slots = PyMem_RawMalloc((size_t)size * sizeof(Py_ssize_t));
    m->where = PyMem_RawMalloc((size_t)size * sizeof(Py_ssize_t));
    m->size = size;
    m->used = 0;
    return m->keys && m->slots && m->where ? 0 : -1;
}

static void map_free(Map *m) {
    PyMem_RawFree(m->keys);
    PyMem_RawFree(m->slots);
    PyMem_RawFree(m->where);
    m->keys = NULL;
    m->slots = NULL;
    m->where = NULL;
    m->size = m->used = 0;
}

/* Empty the map, keeping its table when it holds ``want`` entries at half load. */
static int map_reset(Map *m, Py_ssize_t want) {
    if (m->keys && m->size >= 2 * want + 2) {
        for (Py_ssize_t s = 0; s < m->used; s++) m->keys[m->where[s]] = 0;
        m->used = 0;
        return 0;
    }
    map_free(m);
    return map_init(m, want);
}

static int map_grow(Map *m);

/* The slot of column, made the next one (used) when absent; -1 on no memory. */
static inline Py_ssize_t map_slot(Map *m, uint64_t column, int *added) {
    if (2 * (m->used + 1) > m->size && map_grow(m) < 0) return -1;
    uint64_t key = column + 1, mask = (uint64_t)m->size - 1, h = (column * 0x9E3779B97F4A7C15ull) >> 17;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == key) { *added = 0; return m->slots[i]; }
        if (!m->keys[i]) {
            m->keys[i] = key;
            m->slots[i] = m->used;
            m->where[m->used] = (Py_ssize_t)i;
            *added = 1;
            return m->used++;
        }
    }
}

static int map_grow(Map *m) {
    Map bigger;
    if (map_init(&bigger, m->size) < 0) { map_free(&bigger); return -1; }
    for (Py_ssize_t i = 0; i < m->size; i++) {
        if (!m->keys[i]) continue;
        uint64_t mask = (uint64_t)bigger.size - 1, h = ((m->keys[i] - 1) * 0x9E3779B97F4A7C15ull) >> 17;
        uint64_t j = h & mask;
        while (bigger.keys[j]) j = (j + 1) & mask;
        bigger.keys[j] = m->keys[i];
        bigger.slots[j] = m->slots[i];
        bigger.where[m->slots[i]] = (Py_ssize_t)j;
    }
    bigger.used = m->used;
    map_free(m);
    *m = bigger;
    return 0;
}

typedef struct {
    int parse, n, words, shapes, binary, normalize, hashed;
    Py_ssize_t max_bytes;
    uint32_t mask;
    uint32_t grams_start;  /* the state after "c:" and n zero bytes, when n <= SHORT_GRAM */
    uint32_t words_start[SHORT_GRAM + 1], shapes_start[SHORT_GRAM + 1]; /* [k]: after "w:" ("s:") and k zero bytes */
} Options;

typedef struct {
    Buf indptr, indices, data;  /* int64, int64, float64 */
    uint8_t *seen;              /* a bit per column below 2^DIRECT_BITS: the batch holds it */
    uint32_t *local;            /* the local column number of each column seen */
    Map batch;                  /* column -> local column number, when neither direct nor hashed */
    PyObject *keys;             /* the list of the columns by local number; NULL when hashed */
} Batch;

#define DIRECT_BITS 24

static int add_key(Batch *batch, uint64_t column) {
    PyObject *key = PyLong_FromUnsignedLongLong(column);
    if (!key || PyList_Append(batch->keys, key) < 0) {
        Py_XDECREF(key);
        return -1;
    }
    Py_DECREF(key);
    return 0;
}

/* The local column number of ``column`` in the batch (the map), numbered and listed when new. */
static Py_ssize_t batch_column(Batch *batch, uint64_t column) {
    int added = 0;
    Py_ssize_t local = map_slot(&batch->batch, column, &added);
    if (local >= 0 && added && add_key(batch, column) < 0) return -1;
    return local;
}

/* The direct way, once every row is in: the entries hold columns; number the columns by first
 * appearance (a pass over the entries with a bit per column), then replace each column by its
 * number (loads that do not wait on each other). */
static int number_columns(Batch *batch) {
    int64_t *entries = (int64_t *)batch->indices.p;
    Py_ssize_t n = batch->indices.len / 8;
    uint32_t next = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        uint64_t column = (uint64_t)entries[k];
        if (!(batch->seen[column >> 3] & (1u << (column & 7)))) {
            batch->seen[column >> 3] |= (uint8_t)(1u << (column & 7));
            batch->local[column] = next++;
            if (add_key(batch, column) < 0) return -1;
        }
    }
    for (Py_ssize_t k = 0; k < n; k++) entries[k] = batch->local[entries[k]];
    return 0;
}

/* One more occurrence of ``column`` in the row: cols lists the row's columns by first appearance,
 * cnt their counts. */
static int count(Map *row, uint64_t column, uint64_t *cols, Py_ssize_t *cnt) {
    int added;
    Py_ssize_t s = map_slot(row, column, &added);
    if (s < 0) return -1;
    if (added) {
        cols[s] = column;
        cnt[s] = 0;
    }
    cnt[s]++;
    return 0;
}

/* The distinct columns of the row being read, in first-appearance order (cols, with their counts
 * cnt): a bit per column when the features are binary and the columns few enough (no counts then: a binary
 * feature's value is not its count), else the map. */
typedef struct {
    Map *map;
    uint8_t *bits;
    uint64_t *cols;
    Py_ssize_t *cnt;
    Py_ssize_t used;
} RowState;

static inline int add_column(RowState *r, uint64_t column) {
    if (r->bits) {
        uint8_t bit = (uint8_t)(1u << (column & 7));
        if (!(r->bits[column >> 3] & bit)) {
            r->bits[column >> 3] |= bit;
            r->cols[r->used++] = column;  /* (binary: no count) */
        }
        return 0;
    }
    if (count(r->map, column, r->cols, r->cnt) < 0) return -1;
    r->used = r->map->used;
    return 0;
}

/* Each byte as a word takes it (lower case, for a letter or a digit; 0 for any other byte), as a shape takes it (its
 * class: A upper case, a lower case, 9 digit, x 8-bit, any other byte itself), and whether it is white space. */
static unsigned char WORD_BYTE[256], SHAPE_CLASS[256], SPACE[256];

static void byte_tables_init(void) {
    for (int c = 0; c < 256; c++) {
        unsigned char low = lower((unsigned char)c);
        WORD_BYTE[c] = ((low >= 'a' && low <= 'z') || (low >= '0' && low <= '9')) ? low : 0;
        SHAPE_CLASS[c] = (c >= 'A' && c <= 'Z') ? 'A' : (c >= 'a' && c <= 'z') ? 'a' : (c >= '0' && c <= '9') ? '9'
                         : c >= 128 ? 'x' : (unsigned char)c;
        SPACE[c] = (unsigned char)is_space((unsigned char)c);
    }
}

/* Whether token[0:n] starts with a link's start: http://, https:// or www. (any case). */
static int is_link(const unsigned char *token, Py_ssize_t n) {
    unsigned char first = lower(token[0]);
    if (first == 'w') return n >= 4 && equals_lower(token, 4, "www.");
    if (first != 'h') return 0;
    return (n >= 7 && equals_lower(token, 7, "http://")) || (n >= 8 && equals_lower(token, 8, "https://"));
}

/* The shape of token[0:n] (n <= 40) into shape, its length returned: "url" for a link, else each byte's class,
 * a run of one class cut to three. */
static Py_ssize_t shape_of(const unsigned char *token, Py_ssize_t n, unsigned char *shape) {
    if (is_link(token, n)) {
        memcpy(shape, "url", 3);
        return 3;
    }
    Py_ssize_t len = 0, run = 0;
    unsigned char last = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        unsigned char c = SHAPE_CLASS[token[k]];
        run = k && c == last ? run + 1 : 1;
        last = c;
        shape[len] = c;
        len += run <= 3;
    }
    return len;
}

/* The CRC state after a prefix (``start``) and token[0:n]: from ``after_zeros``[n] (the state after the prefix and n
 * zero bytes) by one lookup a byte when n <= SHORT_GRAM, as the n-grams are hashed. */
static inline uint32_t token_crc(const uint32_t *after_zeros, uint32_t start, const unsigned char *token, Py_ssize_t n) {
    return n <= SHORT_GRAM ? crc_after_zeros(after_zeros[n], token, (int)n) : crc_update(start, token, n);
}

/* The features of one text (its distinct columns, first appearance first, with their counts) into the batch. */
static int add_row(Batch *batch, const Options *o, const unsigned char *t, Py_ssize_t len, Map *row, uint8_t *bits,
                   uint64_t **columns, Py_ssize_t **counts, Py_ssize_t *capacity) {
    Py_ssize_t tokens = (o->n && len >= o->n ? len - o->n + 1 : 0) + (o->words ? len / 2 + 1 : 0)
                        + (o->shapes ? len / 2 + 1 : 0);
    if (tokens > *capacity) {
        uint64_t *c = PyMem_RawRealloc(*columns, (size_t)tokens * sizeof(uint64_t));
        if (c) *columns = c;
        Py_ssize_t *k = c ? PyMem_RawRealloc(*counts, (size_t)tokens * sizeof(Py_ssize_t)) : NULL;
        if (k) *counts = k;
        if (!c || !k) return -1;
        *capacity = tokens;
    }
    if (!bits && map_reset(row, tokens) < 0) return -1;
    uint64_t *cols = *columns;
    Py_ssize_t *cnt = *counts;
    RowState r = {row, bits, cols, cnt, 0};
    uint32_t start_c = crc_update(0xFFFFFFFFu, (const unsigned char *)"c:", 2);
    uint32_t start_w = crc_update(0xFFFFFFFFu, (const unsigned char *)"w:", 2);
    if (o->n == 4 && bits) { /* the usual features, binary 4-grams: crc_after_zeros unrolled, add_column inlined */
        const uint32_t *t0 = CRC_AFTER[0], *t1 = CRC_AFTER[1], *t2 = CRC_AFTER[2], *t3 = CRC_AFTER[3];
        for (Py_ssize_t i = 0; i + 4 <= len; i++) {  /* without a branch: whether a gram is new is unpredictable */
            uint32_t column = ~(o->grams_start ^ t3[t[i]] ^ t2[t[i + 1]] ^ t1[t[i + 2]] ^ t0[t[i + 3]]) & o->mask;
            uint8_t bit = (uint8_t)(1u << (column & 7)), held = bits[column >> 3];
            bits[column >> 3] = held | bit;
            cols[r.used] = column;
            r.used += !(held & bit);
        }
    } else {
        for (Py_ssize_t i = 0; o->n && i + o->n <= len; i++) {
            uint32_t crc = o->n <= SHORT_GRAM ? crc_after_zeros(o->grams_start, t + i, o->n)
                                              : crc_update(start_c, t + i, o->n);
            if (add_column(&r, (~crc) & o->mask) < 0) return -1;
        }
    }
    if (o->words) {
        unsigned char word[30];
        Py_ssize_t i = 0;
        while (i < len) {
            Py_ssize_t k = 0;
            unsigned char c;
            while (i + k < len && k < 30 && (c = WORD_BYTE[t[i + k]])) word[k++] = c;
            if (k >= 2 && add_column(&r, (~token_crc(o->words_start, start_w, word, k)) & o->mask) < 0) return -1;
            i += k ? k : 1;
        }
    }
    if (o->shapes) {
        uint32_t start_s = crc_update(0xFFFFFFFFu, (const unsigned char *)"s:", 2);
        Py_ssize_t i = 0;
        while (i < len) {
            if (SPACE[t[i]]) { i++; continue; }
            Py_ssize_t k = 1;
            while (i + k < len && k < 40 && !SPACE[t[i + k]]) k++;
            unsigned char shape[40];
            Py_ssize_t m = shape_of(t + i, k, shape);
            if (add_column(&r, (~token_crc(o->shapes_start, start_s, shape, m)) & o->mask) < 0) return -1;
            i += k;
        }
    }
    Py_ssize_t distinct = r.used;
    for (Py_ssize_t k = 0; bits && k < distinct; k++) bits[cols[k] >> 3] = 0;  /* empty for the next row */
    double scale = 1.0;
    if (o->normalize && distinct) {
        if (o->binary) {
            scale = 1.0 / sqrt((double)distinct);
        } else {
            double squares = 0.0;  /* exact: an integer below 2^53 */
            for (Py_ssize_t s = 0; s < distinct; s++) squares += (double)cnt[s] * (double)cnt[s];
            scale = 1.0 / sqrt(squares);
        }
    }
    if (buf_reserve(&batch->indices, distinct * 8) < 0 || buf_reserve(&batch->data, distinct * 8) < 0) return -1;
    unsigned char *indices = batch->indices.p + batch->indices.len, *data = batch->data.p + batch->data.len;
    int as_is = o->hashed || batch->seen;  /* the column itself when hashed, or when direct (numbered once every row is in) */
    for (Py_ssize_t s = 0; s < distinct; s++) {
        int64_t index = as_is ? (int64_t)cols[s] : (int64_t)batch_column(batch, cols[s]);
        if (index < 0) return -1;
        double value = o->binary ? (o->normalize ? scale : 1.0) : (o->normalize ? (double)cnt[s] * scale : (double)cnt[s]);
        memcpy(indices + 8 * s, &index, 8);
        memcpy(data + 8 * s, &value, 8);
    }
    batch->indices.len += distinct * 8;
    batch->data.len += distinct * 8;
    int64_t end = (int64_t)(batch->indices.len / 8);
    return buf_put(&batch->indptr, (const unsigned char *)&end, 8);
}

/* A text of the batch: its bytes, read without the GIL. */
typedef struct {
    const unsigned char *p;
    Py_ssize_t len;
} Text;

/* Every row of the batch, its texts read as ``rows`` reads them; -1 on no memory. Runs without the GIL when the
 * batch numbers no column on the way (hashed, or direct: numbered once every row is in). */
static int read_rows(Batch *batch, const Options *o, const Text *texts, Py_ssize_t count, unsigned char *out,
                     uint8_t *row_bits, Py_ssize_t *empty_bodies) {
    Map row = {0};
    uint64_t *columns = NULL;
    Py_ssize_t *counts = NULL, capacity = 0;
    int r = 0;
    for (Py_ssize_t i = 0; i < count && r == 0; i++) {
        Writer w = {out, 0, o->max_bytes, 0, 0, 0};
        if (o->parse) {
            r = read_message(texts[i].p, texts[i].len, &w);
        } else {
            w.len = texts[i].len < o->max_bytes ? texts[i].len : o->max_bytes;
            memcpy(out, texts[i].p, (size_t)w.len);
        }
        if (r == 0) {
            *empty_bodies += !has_text(out + w.body, w.len - w.body);
            r = add_row(batch, o, out, w.len, &row, row_bits, &columns, &counts, &capacity);
        }
    }
    PyMem_RawFree(columns);
    PyMem_RawFree(counts);
    map_free(&row);
    return r;
}

static PyObject *rows(PyObject *self, PyObject *args) {
    PyObject *texts;
    Options o;
    int hash_bits;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!pippnippp:rows", &PyList_Type, &texts, &o.parse, &o.n, &o.words, &o.shapes,
                          &o.max_bytes, &hash_bits, &o.binary, &o.normalize, &o.hashed))
        return NULL;
    if (o.n < 0 || o.max_bytes < 1 || hash_bits < 1 || hash_bits > 32 || (!o.n && !o.words && !o.shapes)) {
        PyErr_SetString(PyExc_ValueError, "rows: n >= 0, max_bytes >= 1, 1 <= hash_bits <= 32, and n, words or shapes");
        return NULL;
    }
    o.mask = hash_bits == 32 ? 0xFFFFFFFFu : (uint32_t)((1u << hash_bits) - 1);
    static const unsigned char zeros[SHORT_GRAM];
    if (o.n <= SHORT_GRAM) o.grams_start = crc_update(crc_update(0xFFFFFFFFu, (const unsigned char *)"c:", 2), zeros, o.n);
    for (int k = 0; k <= SHORT_GRAM; k++) {
        o.words_start[k] = crc_update(crc_update(0xFFFFFFFFu, (const unsigned char *)"w:", 2), zeros, k);
        o.shapes_start[k] = crc_update(crc_update(0xFFFFFFFFu, (const unsigned char *)"s:", 2), zeros, k);
    }
    PyThreadState *released = NULL;
    Batch batch = {{0}, {0}, {0}, NULL, NULL, {0}, NULL};
    batch.indices.released = batch.data.released = &released;
    PyObject *held = PyList_AsTuple(texts);  /* the texts, alive while they are read without the GIL */
    Py_ssize_t count = held ? PyTuple_GET_SIZE(held) : 0, entries = 0, empty_bodies = 0;
    Text *text_of = PyMem_RawMalloc((size_t)(count ? count : 1) * sizeof(Text));
    unsigned char *out = PyMem_RawMalloc((size_t)o.max_bytes);
    uint8_t *row_bits = NULL;
    PyObject *result = NULL;
    int64_t zero = 0;
    if (!held) goto done;
    if (!text_of || !out) goto no_memory;
    for (Py_ssize_t i = 0; i < count; i++) {  /* the texts, and room for about every entry at once */
        PyObject *text = PyTuple_GET_ITEM(held, i);
        if (!PyBytes_Check(text)) {
            PyErr_Format(PyExc_TypeError, "rows: texts[%zd] is a %.80s, not bytes", i, Py_TYPE(text)->tp_name);
            goto done;
        }
        text_of[i] = (Text){(const unsigned char *)PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text)};
        entries += text_of[i].len + 64 < o.max_bytes ? text_of[i].len + 64 : o.max_bytes;
    }
    /* the local numbering: a table of every column for a batch large enough to pay for it, a map
     * otherwise; none when hashed */
    int direct = !o.hashed && hash_bits <= DIRECT_BITS && ((size_t)1 << hash_bits) <= (size_t)count * 4096;
    /* a row's binary features: a bit per column when the batch pays for the table anyway (direct) or
     * when hashed, else the row's map */
    int bits = o.binary && hash_bits <= DIRECT_BITS && (direct || o.hashed);
    row_bits = bits ? PyMem_RawCalloc(((size_t)1 << hash_bits) / 8 + 1, 1) : NULL;
    if (direct) {
        batch.seen = PyMem_RawCalloc(((size_t)1 << hash_bits) / 8 + 1, 1);
        batch.local = PyMem_RawMalloc(((size_t)1 << hash_bits) * sizeof(uint32_t));
    }
    if ((bits && !row_bits) || (direct && (!batch.seen || !batch.local))) goto no_memory;
    if ((!o.hashed && (!(batch.keys = PyList_New(0)) || map_init(&batch.batch, 16) < 0)) ||
        buf_in_bytes(&batch.indices, entries * 8) < 0 || buf_in_bytes(&batch.data, entries * 8) < 0 ||
        buf_put(&batch.indptr, (const unsigned char *)&zero, 8) < 0)
        goto no_memory;
    int read;
    if (o.hashed || direct) {  /* the texts are read on while other threads run */
        released = PyEval_SaveThread();
        read = read_rows(&batch, &o, text_of, count, out, row_bits, &empty_bodies);
        PyEval_RestoreThread(released);
        released = NULL;
    } else {
        read = read_rows(&batch, &o, text_of, count, out, row_bits, &empty_bodies);
    }
    if (read < 0 || (direct && number_columns(&batch) < 0)) goto no_memory;
    PyObject *indices = buf_take(&batch.indices), *data = indices ? buf_take(&batch.data) : NULL;
    if (!indices || !data) {
        Py_XDECREF(indices);
        goto done;
    }
    result = Py_BuildValue("(y#NNOn)", batch.indptr.p, batch.indptr.len, indices, data,
                           o.hashed ? Py_None : batch.keys, empty_bodies);
    goto done;
no_memory:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    Py_XDECREF(held);
    PyMem_RawFree(text_of);
    PyMem_RawFree(out);
    PyMem_RawFree(batch.local);
    PyMem_RawFree(batch.seen);
    PyMem_RawFree(row_bits);
    map_free(&batch.batch);
    buf_free(&batch.indptr);
    buf_free(&batch.indices);
    buf_free(&batch.data);
    Py_XDECREF(batch.keys);
    return result;
}

static PyObject *message(PyObject *self, PyObject *args) {
    const unsigned char *raw;
    Py_ssize_t len, max_bytes;
    (void)self;
    if (!PyArg_ParseTuple(args, "y#n:message", &raw, &len, &max_bytes)) return NULL;
    if (max_bytes < 1) {
        PyErr_SetString(PyExc_ValueError, "message: max_bytes >= 1");
        return NULL;
    }
    unsigned char *out = PyMem_RawMalloc((size_t)max_bytes);
    if (!out) return PyErr_NoMemory();
    Writer w = {out, 0, max_bytes, 0, 0, 0};
    PyObject *result = read_message(raw, len, &w) < 0 ? PyErr_NoMemory() : Py_BuildValue("(y#n)", out, w.len, w.body);
    PyMem_RawFree(out);
    return result;
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS,
     "rows(texts, parse, n, words, shapes, max_bytes, hash_bits, binary, normalize, hashed) -> (indptr, indices, data, "
     "keys, "
     "empty_bodies)"},
    {"message", message, METH_VARARGS,
     "message(raw, max_bytes) -> (text, body): read_message(raw) with its text cut at max_bytes, body at most that"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_text", "The compiled reader and n-grams of EmailFeatures(reader='bytes').", -1, methods,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__text(void) {
    crc_init();
    byte_tables_init();
    return PyModule_Create(&module);
}
