/* Jinja values: the render region, strings and containers, and the ways
 * Python shows them (str, repr, json.dumps) and compares them. */
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include "runtime/jinja_internal.h"
#include "runtime/tokenizer.h"

/* ---- the region ---------------------------------------------------------------------- */

struct jblock { jblock *next; size_t cap, used; _Alignas(16) char mem[]; };

void *jr_alloc(jregion *r, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    jblock *b = r->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 60000 ? n : 65536 - sizeof(jblock);
        b = malloc(sizeof(jblock) + cap);
        if (!b)
            return NULL;
        b->next = r->head;
        b->cap = cap;
        b->used = 0;
        r->head = b;
    }
    void *p = b->mem + b->used;
    b->used += n;
    r->used += n;
    return p;
}

void jr_free(jregion *r)
{
    for (jblock *b = r->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    r->head = NULL;
    r->used = 0;
}

_Noreturn void jx_fail(jctx *x, const char *fmt, ...)
{
    char msg[sizeof x->err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ms_err_set(x->err, MS_E_ARG, "%s, line %d: %s", x->name, x->line, msg);
    longjmp(x->fail, 1);
}

void *jx_alloc(jctx *x, size_t n)
{
    if (x->r->used + n > x->max_output * 4 + (64u << 20))
        jx_fail(x, "the template uses more than %zu MiB while rendering",
                (x->max_output * 4 + (64u << 20)) >> 20);
    void *p = jr_alloc(x->r, n);
    if (!p)
        jx_fail(x, "out of memory while rendering");
    return p;
}

void jx_step(jctx *x)
{
    if (++x->steps > x->max_steps)
        jx_fail(x, "rendering takes more than %lld steps (a loop that does not end?)",
                (long long)x->max_steps);
}

/* ---- strings and containers -------------------------------------------------------- */

jstr *js_new(jregion *r, const char *s, size_t n)
{
    jstr *j = jr_alloc(r, sizeof(jstr) + n + 1);
    if (!j)
        return NULL;
    j->n = n;
    if (n)
        memcpy(j->p, s, n);
    j->p[n] = 0;
    return j;
}

jv jv_str(jctx *x, const char *s, size_t n)
{
    jv v = {.t = JT_STR};
    v.u.s = jx_alloc(x, sizeof(jstr) + n + 1);
    v.u.s->n = n;
    if (n)
        memcpy(v.u.s->p, s, n);
    v.u.s->p[n] = 0;
    return v;
}

jv jv_cstr(jctx *x, const char *s)
{
    return jv_str(x, s, strlen(s));
}

jv jv_list(jctx *x, int64_t cap)
{
    jv v = {.t = JT_LIST};
    v.u.l = jx_alloc(x, sizeof(jlist));
    memset(v.u.l, 0, sizeof(jlist));
    if (cap > 0) {
        v.u.l->v = jx_alloc(x, (size_t)cap * sizeof(jv));
        v.u.l->cap = cap;
    }
    return v;
}

jv jv_dict(jctx *x)
{
    jv v = {.t = JT_DICT};
    v.u.d = jx_alloc(x, sizeof(jdict));
    memset(v.u.d, 0, sizeof(jdict));
    return v;
}

void jl_push(jctx *x, jlist *l, jv v)
{
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 4;
        jv *p = jx_alloc(x, (size_t)cap * sizeof(jv));
        if (l->n)
            memcpy(p, l->v, (size_t)l->n * sizeof(jv));
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

int64_t jd_find(const jdict *d, jv key)
{
    for (int64_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], key))
            return i;
    return -1;
}

jv *jd_get(const jdict *d, const char *key)
{
    size_t n = strlen(key);
    for (int64_t i = 0; i < d->n; i++)
        if (d->k[i].t == JT_STR && d->k[i].u.s->n == n && !memcmp(d->k[i].u.s->p, key, n))
            return &d->v[i];
    return NULL;
}

void jd_set(jctx *x, jdict *d, jv key, jv val)
{
    int64_t i = jd_find(d, key);
    if (i >= 0) {
        d->v[i] = val;
        return;
    }
    if (d->n == d->cap) {
        int64_t cap = d->cap ? d->cap * 2 : 4;
        jv *k = jx_alloc(x, (size_t)cap * sizeof(jv)), *v = jx_alloc(x, (size_t)cap * sizeof(jv));
        if (d->n) {
            memcpy(k, d->k, (size_t)d->n * sizeof(jv));
            memcpy(v, d->v, (size_t)d->n * sizeof(jv));
        }
        d->k = k;
        d->v = v;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n++] = val;
}

void jd_setc(jctx *x, jdict *d, const char *key, jv val)
{
    jd_set(x, d, jv_cstr(x, key), val);
}

/* ---- buffers ---------------------------------------------------------------------- */

void jb_put(jctx *x, jbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        if (b == x->out && cap > x->max_output + 1) {
            if (b->n + n > x->max_output)
                jx_fail(x, "the output passes %zu bytes", x->max_output);
            cap = x->max_output + 1;
        }
        char *p = jx_alloc(x, cap);
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jb_putc(jctx *x, jbuf *b, char c)
{
    jb_put(x, b, &c, 1);
}

jv jb_take(jctx *x, jbuf *b)
{
    return jv_str(x, b->p ? b->p : "", b->n);
}

/* ---- UTF-8 ----------------------------------------------------------------------------- */

size_t ju_next(const char *s, size_t n, uint32_t *cp)
{
    if (n == 0)
        return 0;
    size_t k = ms_utf8_next((const uint8_t *)s, n, cp);
    if (k == 0) { /* an ill-formed byte counts as one U+FFFD */
        *cp = 0xfffd;
        return 1;
    }
    return k;
}

int64_t ju_len(const char *s, size_t n)
{
    int64_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((uint8_t)s[i] & 0xc0) != 0x80;
    return k;
}

size_t ju_offset(const char *s, size_t n, int64_t k)
{
    size_t i = 0;
    while (i < n && k > 0) {
        uint32_t cp;
        i += ju_next(s + i, n - i, &cp);
        k--;
    }
    return i;
}

int ju_isspace(uint32_t c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* glibc's C.UTF-8 locale, built into glibc since 2.35, for Unicode case
 * mapping; loaded once (a read-mostly global). NULL: ASCII rules only. */
static locale_t loc;
static pthread_once_t loc_once = PTHREAD_ONCE_INIT;

static void loc_init(void)
{
    loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

static locale_t utf8_locale(void)
{
    pthread_once(&loc_once, loc_init);
    return loc;
}

uint32_t ju_upper(uint32_t c)
{
    if (c < 0x80 || !utf8_locale())
        return c >= 'a' && c <= 'z' ? c - 32 : c;
    return (uint32_t)towupper_l((wint_t)c, utf8_locale());
}

uint32_t ju_lower(uint32_t c)
{
    if (c < 0x80 || !utf8_locale())
        return c >= 'A' && c <= 'Z' ? c + 32 : c;
    return (uint32_t)towlower_l((wint_t)c, utf8_locale());
}

int ju_isupper(uint32_t c)
{
    if (c < 0x80 || !utf8_locale())
        return c >= 'A' && c <= 'Z';
    return iswupper_l((wint_t)c, utf8_locale()) != 0;
}

int ju_islower(uint32_t c)
{
    if (c < 0x80 || !utf8_locale())
        return c >= 'a' && c <= 'z';
    return iswlower_l((wint_t)c, utf8_locale()) != 0;
}

int ju_isalpha(uint32_t c)
{
    if (c < 0x80 || !utf8_locale())
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    return iswalpha_l((wint_t)c, utf8_locale()) != 0;
}

int ju_isdigit(uint32_t c)
{
    return c >= '0' && c <= '9';
}

/* ---- printing ------------------------------------------------------------------------ */

/* Python's repr(float): the shortest digits that read back the same, in
 * fixed notation for exponents -4..15 and scientific (1e-05, 1e+16) else. */
static void put_float(jctx *x, jbuf *b, double f)
{
    if (isnan(f)) {
        jb_puts(x, b, "nan");
        return;
    }
    if (isinf(f)) {
        jb_puts(x, b, f < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    for (int p = 0; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e is [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *q = e + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.')
            digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char out[64];
    int o = 0;
    if (neg)
        out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = -1; i > exp; i--)
                out[o++] = '0';
            for (int i = 0; i < nd; i++)
                out[o++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++)
                out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++)
                    out[o++] = digits[i];
            else
                out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++)
                out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
    }
    jb_puts(x, b, out);
}

static void put_int(jctx *x, jbuf *b, int64_t i)
{
    char t[24];
    snprintf(t, sizeof t, "%lld", (long long)i);
    jb_puts(x, b, t);
}

/* Python's str.isprintable for one code point, for repr: the controls, the
 * separators other than space and the format characters are escaped. */
static int printable(uint32_t c)
{
    if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad)
        return 0;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
        (c >= 0x205f && c <= 0x2064) || c == 0x3000 || c == 0xfeff || (c >= 0xd800 && c <= 0xdfff) ||
        (c >= 0xe000 && c <= 0xf8ff) || c == 0xfffe || c == 0xffff)
        return 0;
    return 1;
}

static void repr_str(jctx *x, jbuf *b, const jstr *s)
{
    int has_sq = memchr(s->p, '\'', s->n) != NULL, has_dq = memchr(s->p, '"', s->n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jb_putc(x, b, q);
    for (size_t i = 0; i < s->n;) {
        uint32_t c;
        size_t k = ju_next(s->p + i, s->n - i, &c);
        char t[16];
        if (c == (uint32_t)q || c == '\\') {
            t[0] = '\\';
            t[1] = (char)c;
            jb_put(x, b, t, 2);
        } else if (c == '\n') jb_puts(x, b, "\\n");
        else if (c == '\r') jb_puts(x, b, "\\r");
        else if (c == '\t') jb_puts(x, b, "\\t");
        else if (!printable(c)) {
            snprintf(t, sizeof t, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", c);
            jb_puts(x, b, t);
        } else
            jb_put(x, b, s->p + i, k);
        i += k;
    }
    jb_putc(x, b, q);
}

const char *jv_type_name(jv v)
{
    static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float", "str",
                                        "list", "dict", "Namespace", "LoopContext", "function"};
    if (v.t == JT_LIST && v.u.l->tuple)
        return "tuple";
    return names[v.t];
}

static void print_any(jctx *x, jbuf *b, jv v, int repr)
{
    switch (v.t) {
    case JT_UNDEF: if (repr) jb_puts(x, b, "Undefined"); break;
    case JT_NONE: jb_puts(x, b, "None"); break;
    case JT_BOOL: jb_puts(x, b, v.u.i ? "True" : "False"); break;
    case JT_INT: put_int(x, b, v.u.i); break;
    case JT_FLOAT: put_float(x, b, v.u.f); break;
    case JT_STR:
        if (repr)
            repr_str(x, b, v.u.s);
        else
            jb_put(x, b, v.u.s->p, v.u.s->n);
        break;
    case JT_LIST: {
        jx_step(x);
        jb_putc(x, b, v.u.l->tuple ? '(' : '[');
        for (int64_t i = 0; i < v.u.l->n; i++) {
            if (i)
                jb_puts(x, b, ", ");
            print_any(x, b, v.u.l->v[i], 1);
        }
        if (v.u.l->tuple && v.u.l->n == 1)
            jb_putc(x, b, ',');
        jb_putc(x, b, v.u.l->tuple ? ')' : ']');
        break;
    }
    case JT_NS:
        jb_puts(x, b, "<Namespace ");
        /* fall through */
    case JT_DICT:
        jx_step(x);
        jb_putc(x, b, '{');
        for (int64_t i = 0; i < v.u.d->n; i++) {
            if (i)
                jb_puts(x, b, ", ");
            print_any(x, b, v.u.d->k[i], 1);
            jb_puts(x, b, ": ");
            print_any(x, b, v.u.d->v[i], 1);
        }
        jb_putc(x, b, '}');
        if (v.t == JT_NS)
            jb_putc(x, b, '>');
        break;
    case JT_LOOP: jb_puts(x, b, "<LoopContext>"); break;
    case JT_FUNC:
        jb_puts(x, b, "<function ");
        jb_puts(x, b, v.u.fn->name ? v.u.fn->name : "?");
        jb_putc(x, b, '>');
        break;
    }
}

void jv_print(jctx *x, jbuf *b, jv v) { print_any(x, b, v, 0); }
void jv_repr(jctx *x, jbuf *b, jv v) { print_any(x, b, v, 1); }

jv jv_to_str(jctx *x, jv v)
{
    if (v.t == JT_STR)
        return v;
    jbuf b = {0};
    jv_print(x, &b, v);
    return jb_take(x, &b);
}

/* ---- json.dumps ------------------------------------------------------------------------- */

static void json_str(jctx *x, jbuf *b, const char *s, size_t n, int ascii)
{
    jb_putc(x, b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        const char *esc = NULL;
        char t[16];
        size_t k = 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) {
            snprintf(t, sizeof t, "\\u%04x", c);
            esc = t;
        } else if (c >= 0x80 && ascii) {
            uint32_t cp;
            k = ju_next(s + i, n - i, &cp);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(t, sizeof t, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else
                snprintf(t, sizeof t, "\\u%04x", cp);
            esc = t;
        }
        if (esc) {
            jb_put(x, b, s + run, i - run);
            jb_puts(x, b, esc);
            i += k;
            run = i;
        } else
            i++;
    }
    jb_put(x, b, s + run, n - run);
    jb_putc(x, b, '"');
}

typedef struct jsonfmt {
    int ascii, sort;
    const char *indent, *item_sep, *key_sep;
} jsonfmt;

static void json_newline(jctx *x, jbuf *b, const jsonfmt *f, int level)
{
    jb_putc(x, b, '\n');
    for (int i = 0; i < level; i++)
        jb_puts(x, b, f->indent);
}

static int key_order(const void *a, const void *b)
{
    const jstr *p = *(const jstr *const *)a, *q = *(const jstr *const *)b;
    size_t n = p->n < q->n ? p->n : q->n;
    int c = memcmp(p->p, q->p, n);
    return c ? c : (p->n > q->n) - (p->n < q->n);
}

static void json_any(jctx *x, jbuf *b, jv v, const jsonfmt *f, int level)
{
    jx_step(x);
    if (level > 512)
        jx_fail(x, "tojson: nesting deeper than 512");
    switch (v.t) {
    case JT_NONE: jb_puts(x, b, "null"); return;
    case JT_BOOL: jb_puts(x, b, v.u.i ? "true" : "false"); return;
    case JT_INT: put_int(x, b, v.u.i); return;
    case JT_FLOAT:
        if (isnan(v.u.f)) jb_puts(x, b, "NaN");
        else if (isinf(v.u.f)) jb_puts(x, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else put_float(x, b, v.u.f);
        return;
    case JT_STR: json_str(x, b, v.u.s->p, v.u.s->n, f->ascii); return;
    case JT_LIST:
        if (v.u.l->n == 0) {
            jb_puts(x, b, "[]");
            return;
        }
        jb_putc(x, b, '[');
        for (int64_t i = 0; i < v.u.l->n; i++) {
            if (i)
                jb_puts(x, b, f->item_sep);
            if (f->indent)
                json_newline(x, b, f, level + 1);
            json_any(x, b, v.u.l->v[i], f, level + 1);
        }
        if (f->indent)
            json_newline(x, b, f, level);
        jb_putc(x, b, ']');
        return;
    case JT_DICT: {
        const jdict *d = v.u.d;
        if (d->n == 0) {
            jb_puts(x, b, "{}");
            return;
        }
        /* keys as json.dumps writes them: strings, numbers, true/false/null */
        jstr **keys = jx_alloc(x, (size_t)d->n * sizeof *keys);
        int64_t *order = jx_alloc(x, (size_t)d->n * sizeof *order);
        for (int64_t i = 0; i < d->n; i++) {
            jv k = d->k[i];
            if (k.t == JT_STR) keys[i] = k.u.s;
            else if (k.t == JT_NONE) keys[i] = jv_cstr(x, "null").u.s;
            else if (k.t == JT_BOOL) keys[i] = jv_cstr(x, k.u.i ? "true" : "false").u.s;
            else if (k.t == JT_INT || k.t == JT_FLOAT) keys[i] = jv_to_str(x, k).u.s;
            else jx_fail(x, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
            order[i] = i;
        }
        if (f->sort) {
            /* sort (key, index) pairs by key; a stable order for equal keys */
            jstr **sorted = jx_alloc(x, (size_t)d->n * sizeof *sorted);
            memcpy(sorted, keys, (size_t)d->n * sizeof *sorted);
            for (int64_t i = 0; i < d->n; i++)
                if (d->k[i].t != JT_STR)
                    jx_fail(x, "'<' not supported between instances of '%s' and 'str'",
                            jv_type_name(d->k[i]));
            qsort(sorted, (size_t)d->n, sizeof *sorted, key_order);
            for (int64_t i = 0; i < d->n; i++)
                for (int64_t j = 0; j < d->n; j++)
                    if (keys[j] == sorted[i]) {
                        order[i] = j;
                        break;
                    }
        }
        jb_putc(x, b, '{');
        for (int64_t i = 0; i < d->n; i++) {
            if (i)
                jb_puts(x, b, f->item_sep);
            if (f->indent)
                json_newline(x, b, f, level + 1);
            json_str(x, b, keys[order[i]]->p, keys[order[i]]->n, f->ascii);
            jb_puts(x, b, f->key_sep);
            json_any(x, b, d->v[order[i]], f, level + 1);
        }
        if (f->indent)
            json_newline(x, b, f, level);
        jb_putc(x, b, '}');
        return;
    }
    default:
        jx_fail(x, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

void jv_json(jctx *x, jbuf *b, jv v, int ensure_ascii, const char *indent, const char *item_sep,
             const char *key_sep, int sort_keys)
{
    jsonfmt f = {ensure_ascii, sort_keys, indent, item_sep, key_sep};
    if (!f.item_sep)
        f.item_sep = indent ? "," : ", ";
    if (!f.key_sep)
        f.key_sep = ": ";
    json_any(x, b, v, &f, 0);
}

/* ---- truth and comparison -------------------------------------------------------------- */

int jv_truthy(jv v)
{
    switch (v.t) {
    case JT_UNDEF: case JT_NONE: return 0;
    case JT_BOOL: case JT_INT: return v.u.i != 0;
    case JT_FLOAT: return v.u.f != 0;
    case JT_STR: return v.u.s->n != 0;
    case JT_LIST: return v.u.l->n != 0;
    case JT_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

int jv_is_num(jv v) { return v.t == JT_BOOL || v.t == JT_INT || v.t == JT_FLOAT; }
double jv_num(jv v) { return v.t == JT_FLOAT ? v.u.f : (double)v.u.i; }

int jv_eq(jv a, jv b)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JT_FLOAT && b.t != JT_FLOAT)
            return a.u.i == b.u.i;
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t)
        return 0;
    switch (a.t) {
    case JT_UNDEF: case JT_NONE: return 1;
    case JT_STR: return a.u.s->n == b.u.s->n && !memcmp(a.u.s->p, b.u.s->p, a.u.s->n);
    case JT_LIST:
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple)
            return 0;
        for (int64_t i = 0; i < a.u.l->n; i++)
            if (!jv_eq(a.u.l->v[i], b.u.l->v[i]))
                return 0;
        return 1;
    case JT_DICT:
        if (a.u.d->n != b.u.d->n)
            return 0;
        for (int64_t i = 0; i < a.u.d->n; i++) {
            int64_t j = jd_find(b.u.d, a.u.d->k[i]);
            if (j < 0 || !jv_eq(a.u.d->v[i], b.u.d->v[j]))
                return 0;
        }
        return 1;
    case JT_NS: return a.u.d == b.u.d;
    case JT_LOOP: return a.u.loop == b.u.loop;
    case JT_FUNC: return a.u.fn == b.u.fn;
    default: return 0;
    }
}

int jv_cmp(jctx *x, jv a, jv b)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JT_FLOAT && b.t != JT_FLOAT)
            return (a.u.i > b.u.i) - (a.u.i < b.u.i);
        double p = jv_num(a), q = jv_num(b);
        return (p > q) - (p < q);
    }
    if (a.t == JT_STR && b.t == JT_STR) {
        size_t n = a.u.s->n < b.u.s->n ? a.u.s->n : b.u.s->n;
        int c = memcmp(a.u.s->p, b.u.s->p, n);   /* UTF-8 byte order = code point order */
        return c ? (c > 0) - (c < 0) : (a.u.s->n > b.u.s->n) - (a.u.s->n < b.u.s->n);
    }
    if (a.t == JT_LIST && b.t == JT_LIST && a.u.l->tuple == b.u.l->tuple) {
        for (int64_t i = 0; i < a.u.l->n && i < b.u.l->n; i++)
            if (!jv_eq(a.u.l->v[i], b.u.l->v[i]))
                return jv_cmp(x, a.u.l->v[i], b.u.l->v[i]);
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    jx_need(x, a);
    jx_need(x, b);
    jx_fail(x, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
            jv_type_name(b));
}

/* ---- from JSON ---------------------------------------------------------------------------- */

jv jv_from_json(jctx *x, const json_t *j)
{
    jx_step(x);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jv d = jv_dict(x);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v)
            jd_set(x, d.u.d, jv_cstr(x, k), jv_from_json(x, v));
        return d;
    }
    case JSON_ARRAY: {
        jv l = jv_list(x, (int64_t)json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++)
            jl_push(x, l.u.l, jv_from_json(x, json_array_get(j, i)));
        return l;
    }
    case JSON_STRING: return jv_str(x, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return jv_int(json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_TRUE: return jv_bool(1);
    case JSON_FALSE: return jv_bool(0);
    default: return jv_none();
    }
}
