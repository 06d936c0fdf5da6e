/* Jinja's built-in filters and tests, the methods of str / list / dict the
 * sandbox lets templates call, the globals transformers adds
 * (raise_exception, strftime_now) and Python's % and str.format formatting.
 * Each follows its Jinja 3 / CPython definition; where it does less (case
 * mapping is ASCII only; format specs are the common subset) that is said
 * beside it. The immutable sandbox's refusals are kept: methods that
 * mutate a list or dict are unsafe and calling them fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/jinja_internal.h"
#include "runtime/tokenizer.h"

/* ---- arguments --------------------------------------------------------------------- */

/* Positional argument i, else keyword `name`, else def. */
static jv arg(const jargs *a, int i, const char *name, jv def)
{
    if (i >= 0 && i < a->n)
        return a->v[i];
    for (int k = 0; name && k < a->nk; k++)
        if (!strcmp(a->kn[k]->p, name))
            return a->kv[k];
    return def;
}

static int has_arg(const jargs *a, int i, const char *name)
{
    jv u = arg(a, i, name, jv_undef(NULL));
    return u.t != JT_UNDEF || (i >= 0 && i < a->n);
}

static jstr *need_str(jctx *x, jv v, const char *what)
{
    if (v.t != JT_STR) {
        jx_need(x, v);
        jx_fail(x, "%s expects a string, not %s", what, jv_type_name(v));
    }
    return v.u.s;
}

static int64_t need_int(jctx *x, jv v, const char *what)
{
    if (v.t != JT_INT && v.t != JT_BOOL) {
        jx_need(x, v);
        jx_fail(x, "%s expects an integer, not %s", what, jv_type_name(v));
    }
    return v.u.i;
}

static jv str_of(jctx *x, jv v)
{
    return jv_to_str(x, v);
}

/* ---- string helpers -------------------------------------------------------------------- */

static int in_set(uint32_t c, const jstr *chars)
{
    for (size_t i = 0; i < chars->n;) {
        uint32_t d;
        i += ju_next(chars->p + i, chars->n - i, &d);
        if (d == c)
            return 1;
    }
    return 0;
}

/* str.strip / lstrip / rstrip: chars NULL strips whitespace */
static jv strip(jctx *x, const jstr *s, const jstr *chars, int left, int right)
{
    size_t a = 0, b = s->n;
    if (left)
        while (a < b) {
            uint32_t c;
            size_t k = ju_next(s->p + a, b - a, &c);
            if (chars ? !in_set(c, chars) : !ju_isspace(c))
                break;
            a += k;
        }
    if (right) {
        size_t end = a;
        for (size_t i = a; i < b;) {
            uint32_t c;
            size_t k = ju_next(s->p + i, b - i, &c);
            i += k;
            if (chars ? !in_set(c, chars) : !ju_isspace(c))
                end = i;
        }
        b = end;
    }
    return jv_str(x, s->p + a, b - a);
}

static void put_cp(jctx *x, jbuf *b, uint32_t c)
{
    char t[4];
    jb_put(x, b, t, ms_utf8_put((uint8_t *)t, c));
}

static void put_upper(jctx *x, jbuf *b, uint32_t c)
{
    if (c == 0xdf) /* Python's full mapping: sharp s upper-cases to "SS" */
        jb_puts(x, b, "SS");
    else
        put_cp(x, b, ju_upper(c));
}

static int cased(uint32_t c) { return ju_isupper(c) || ju_islower(c); }

/* upper (U), lower (L), capitalize (C), Jinja's title filter (T: words
 * begin after whitespace and - ( { [ <) and Python's str.title (P: after
 * any uncased character), by Unicode simple case mapping. */
static jv recase(jctx *x, const jstr *s, int how)
{
    jbuf b = {0};
    int start = 1, first = 1;
    for (size_t i = 0; i < s->n;) {
        uint32_t c;
        i += ju_next(s->p + i, s->n - i, &c);
        switch (how) {
        case 'U': put_upper(x, &b, c); break;
        case 'L': put_cp(x, &b, ju_lower(c)); break;
        case 'C':
            if (first) put_upper(x, &b, c);
            else put_cp(x, &b, ju_lower(c));
            break;
        case 'T':
            if (ju_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
                put_cp(x, &b, c);
                start = 1;
            } else {
                if (start) put_upper(x, &b, c);
                else put_cp(x, &b, ju_lower(c));
                start = 0;
            }
            break;
        case 'P':
            if (!start) put_cp(x, &b, ju_lower(c));
            else put_upper(x, &b, c);
            start = !cased(c);
            break;
        }
        first = 0;
    }
    return jb_take(x, &b);
}

static jv swapcase(jctx *x, const jstr *s)
{
    jbuf b = {0};
    for (size_t i = 0; i < s->n;) {
        uint32_t c;
        i += ju_next(s->p + i, s->n - i, &c);
        if (ju_isupper(c)) put_cp(x, &b, ju_lower(c));
        else if (ju_islower(c)) put_upper(x, &b, c);
        else put_cp(x, &b, c);
    }
    return jb_take(x, &b);
}

static jv replace(jctx *x, const jstr *s, const jstr *old, const jstr *new, int64_t count)
{
    jbuf b = {0};
    if (count < 0)
        count = INT64_MAX;
    if (old->n == 0) {
        /* Python inserts new between every character and at both ends */
        int64_t done = 0;
        size_t i = 0;
        for (;;) {
            if (done < count) {
                jb_put(x, &b, new->p, new->n);
                done++;
            }
            if (i >= s->n)
                break;
            uint32_t cp;
            size_t k = ju_next(s->p + i, s->n - i, &cp);
            jb_put(x, &b, s->p + i, k);
            i += k;
        }
        return jb_take(x, &b);
    }
    size_t i = 0;
    for (int64_t done = 0; done < count;) {
        const char *f = memmem(s->p + i, s->n - i, old->p, old->n);
        if (!f)
            break;
        size_t at = (size_t)(f - s->p);
        jb_put(x, &b, s->p + i, at - i);
        jb_put(x, &b, new->p, new->n);
        i = at + old->n;
        done++;
        jx_step(x);
    }
    jb_put(x, &b, s->p + i, s->n - i);
    return jb_take(x, &b);
}

/* str.split / rsplit (sep NULL: runs of whitespace) */
static jv split(jctx *x, const jstr *s, const jstr *sep, int64_t maxsplit, int from_right)
{
    jv r = jv_list(x, 0);
    if (maxsplit < 0)
        maxsplit = INT64_MAX;
    if (sep && sep->n == 0)
        jx_fail(x, "empty separator");
    if (!from_right) {
        size_t i = 0;
        int64_t done = 0;
        if (!sep) {
            for (;;) {
                while (i < s->n) {
                    uint32_t c;
                    size_t k = ju_next(s->p + i, s->n - i, &c);
                    if (!ju_isspace(c))
                        break;
                    i += k;
                }
                if (i >= s->n)
                    break;
                if (done == maxsplit) {
                    /* the rest, without trailing whitespace */
                    size_t end = i;
                    for (size_t j = i; j < s->n;) {
                        uint32_t c;
                        size_t k = ju_next(s->p + j, s->n - j, &c);
                        j += k;
                        if (!ju_isspace(c))
                            end = j;
                    }
                    jl_push(x, r.u.l, jv_str(x, s->p + i, end - i));
                    break;
                }
                size_t j = i;
                while (j < s->n) {
                    uint32_t c;
                    size_t k = ju_next(s->p + j, s->n - j, &c);
                    if (ju_isspace(c))
                        break;
                    j += k;
                }
                jl_push(x, r.u.l, jv_str(x, s->p + i, j - i));
                done++;
                i = j;
            }
            return r;
        }
        for (;;) {
            const char *f = done < maxsplit ? memmem(s->p + i, s->n - i, sep->p, sep->n) : NULL;
            if (!f) {
                jl_push(x, r.u.l, jv_str(x, s->p + i, s->n - i));
                return r;
            }
            size_t at = (size_t)(f - s->p);
            jl_push(x, r.u.l, jv_str(x, s->p + i, at - i));
            i = at + sep->n;
            done++;
        }
    }
    /* rsplit: split from the right, then reverse */
    jv parts = jv_list(x, 0);
    size_t end = s->n;
    int64_t done = 0;
    if (!sep) {
        for (;;) {
            /* skip trailing whitespace */
            size_t e = end;
            while (e > 0) {
                size_t b = e - 1;
                while (b > 0 && ((uint8_t)s->p[b] & 0xc0) == 0x80)
                    b--;
                uint32_t c;
                ju_next(s->p + b, e - b, &c);
                if (!ju_isspace(c))
                    break;
                e = b;
            }
            if (e == 0)
                break;
            if (done == maxsplit) {
                size_t st = 0;
                while (st < e) {
                    uint32_t c;
                    size_t k = ju_next(s->p + st, e - st, &c);
                    if (!ju_isspace(c))
                        break;
                    st += k;
                }
                jl_push(x, parts.u.l, jv_str(x, s->p + st, e - st));
                break;
            }
            size_t b = e;
            while (b > 0) {
                size_t q = b - 1;
                while (q > 0 && ((uint8_t)s->p[q] & 0xc0) == 0x80)
                    q--;
                uint32_t c;
                ju_next(s->p + q, b - q, &c);
                if (ju_isspace(c))
                    break;
                b = q;
            }
            jl_push(x, parts.u.l, jv_str(x, s->p + b, e - b));
            done++;
            end = b;
        }
    } else {
        for (;;) {
            const char *f = NULL;
            if (done < maxsplit && end >= sep->n)
                for (size_t k = end - sep->n + 1; k-- > 0;)
                    if (!memcmp(s->p + k, sep->p, sep->n)) {
                        f = s->p + k;
                        break;
                    }
            if (!f) {
                jl_push(x, parts.u.l, jv_str(x, s->p, end));
                break;
            }
            size_t at = (size_t)(f - s->p);
            jl_push(x, parts.u.l, jv_str(x, f + sep->n, end - at - sep->n));
            end = at;
            done++;
        }
    }
    for (int64_t k = parts.u.l->n; k-- > 0;)
        jl_push(x, r.u.l, parts.u.l->v[k]);
    return r;
}

/* str.splitlines(): Python's line boundaries */
static jv splitlines(jctx *x, const jstr *s, int keepends)
{
    jv r = jv_list(x, 0);
    size_t i = 0, start = 0;
    while (i < s->n) {
        uint32_t c;
        size_t k = ju_next(s->p + i, s->n - i, &c);
        int brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) ||
                  c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!brk) {
            i += k;
            continue;
        }
        size_t e = i + k;
        if (c == '\r' && e < s->n && s->p[e] == '\n')
            e++;
        jl_push(x, r.u.l, jv_str(x, s->p + start, (keepends ? e : i) - start));
        i = start = e;
    }
    if (start < s->n)
        jl_push(x, r.u.l, jv_str(x, s->p + start, s->n - start));
    return r;
}

static int starts_with(const jstr *s, const jstr *p, int end)
{
    if (p->n > s->n)
        return 0;
    return !memcmp(end ? s->p + s->n - p->n : s->p, p->p, p->n);
}

/* startswith / endswith with a string or a tuple of strings */
static int affix(jctx *x, const jstr *s, jv p, int end)
{
    if (p.t == JT_LIST) {
        for (int64_t i = 0; i < p.u.l->n; i++)
            if (starts_with(s, need_str(x, p.u.l->v[i], end ? "endswith" : "startswith"), end))
                return 1;
        return 0;
    }
    return starts_with(s, need_str(x, p, end ? "endswith" : "startswith"), end);
}

static int64_t find(const jstr *s, const jstr *sub, int rev)
{
    if (sub->n > s->n)
        return -1;
    const char *f = NULL;
    if (!rev) {
        f = sub->n ? memmem(s->p, s->n, sub->p, sub->n) : s->p;
    } else {
        for (size_t k = s->n - sub->n + 1; k-- > 0;)
            if (!memcmp(s->p + k, sub->p, sub->n)) {
                f = s->p + k;
                break;
            }
    }
    return f ? ju_len(s->p, (size_t)(f - s->p)) : -1;
}

static jv center(jctx *x, const jstr *s, int64_t width, const char *fill, int how)
{
    int64_t n = ju_len(s->p, s->n);
    if (width <= n)
        return jv_str(x, s->p, s->n);
    if (width > (int64_t)x->max_output)
        jx_fail(x, "width %lld passes the output limit", (long long)width);
    int64_t pad = width - n, left;
    if (how == 'l') left = 0;
    else if (how == 'r') left = pad;
    else left = pad / 2 + (pad & width & 1);
    jbuf b = {0};
    for (int64_t i = 0; i < left; i++)
        jb_puts(x, &b, fill);
    jb_put(x, &b, s->p, s->n);
    for (int64_t i = left; i < pad; i++)
        jb_puts(x, &b, fill);
    return jb_take(x, &b);
}

/* ---- Python's % formatting and str.format ---------------------------------------------- */

/* A width or precision of a format: decimal digits at s[*i...]. Fails past
 * 2e8 so that the int cannot overflow (no output is that wide anyway). */
static int fmt_number(jctx *x, const char *s, size_t n, size_t *i)
{
    int v = 0;
    while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        v = v * 10 + (s[(*i)++] - '0');
        if (v > 200000000)
            jx_fail(x, "format width or precision too large");
    }
    return v;
}

/* One number or string formatted by a printf-like conversion. */
static void put_conv(jctx *x, jbuf *b, jv v, char conv, const char *flags, int width, int prec)
{
    char fmt[32], out[512];
    if (width > (int64_t)x->max_output)
        jx_fail(x, "width %d passes the output limit", width);
    if (conv == 's' || conv == 'r' || conv == 'a') {
        jbuf t = {0};
        if (conv == 's')
            jv_print(x, &t, v);
        else
            jv_repr(x, &t, v);
        jv sv = jb_take(x, &t);
        size_t n = sv.u.s->n;
        if (prec >= 0)
            n = ju_offset(sv.u.s->p, n, prec);
        int64_t len = ju_len(sv.u.s->p, n);
        int left = strchr(flags, '-') != NULL;
        if (!left)
            for (int64_t i = len; i < width; i++)
                jb_putc(x, b, ' ');
        jb_put(x, b, sv.u.s->p, n);
        if (left)
            for (int64_t i = len; i < width; i++)
                jb_putc(x, b, ' ');
        return;
    }
    /* conv goes into a printf format below: only the conversions handled there
     * (str.format's spec passes any character, e.g. 'p', 'S', 'm', NUL) */
    if (!conv || !strchr("diouxXeEfFgGc", conv))
        jx_fail(x, "Unknown format code '%c' for object of type '%s'", conv, jv_type_name(v));
    if (!jv_is_num(v)) {
        jx_need(x, v);
        jx_fail(x, "%%%c format: a real number is required, not %s", conv, jv_type_name(v));
    }
    if (width > 256 || prec > 100)
        jx_fail(x, "format width or precision too large");
    if (v.t == JT_FLOAT && strchr("diouxX", conv) && !(fabs(v.u.f) < 9.2e18))
        jx_fail(x, "%%%c format: %g does not fit in 64 bits", conv, v.u.f);  /* the cast is UB */
    if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o' || conv == 'u') {
        long long i = v.t == JT_FLOAT ? (long long)v.u.f : (long long)v.u.i;
        char c = conv == 'i' || conv == 'u' ? 'd' : conv;
        if (prec >= 0)
            snprintf(fmt, sizeof fmt, "%%%s%d.%dll%c", flags, width, prec, c);
        else
            snprintf(fmt, sizeof fmt, "%%%s%dll%c", flags, width, c);
        snprintf(out, sizeof out, fmt, i);
    } else if (conv == 'c') {
        snprintf(out, sizeof out, "%c", (int)v.u.i);
    } else {
        snprintf(fmt, sizeof fmt, "%%%s%d.%d%c", flags, width, prec < 0 ? 6 : prec, conv);
        snprintf(out, sizeof out, fmt, jv_num(v));
    }
    jb_puts(x, b, out);
}

jv jx_percent_format(jctx *x, jv fmt, jv args);
jv jx_percent_format(jctx *x, jv fmt, jv args)
{
    const jstr *f = fmt.u.s;
    int is_tuple = args.t == JT_LIST && args.u.l->tuple;
    int64_t next = 0;
    jbuf b = {0};
    for (size_t i = 0; i < f->n; i++) {
        if (f->p[i] != '%') {
            jb_putc(x, &b, f->p[i]);
            continue;
        }
        if (++i >= f->n)
            jx_fail(x, "incomplete format");
        jv v;
        if (f->p[i] == '(') {
            size_t e = i + 1;
            while (e < f->n && f->p[e] != ')')
                e++;
            if (args.t != JT_DICT)
                jx_fail(x, "format requires a mapping");
            jv *got = NULL;
            for (int64_t k = 0; k < args.u.d->n; k++)
                if (args.u.d->k[k].t == JT_STR && args.u.d->k[k].u.s->n == e - i - 1 &&
                    !memcmp(args.u.d->k[k].u.s->p, f->p + i + 1, e - i - 1))
                    got = &args.u.d->v[k];
            if (!got)
                jx_fail(x, "format key '%.*s' not found", (int)(e - i - 1), f->p + i + 1);
            v = *got;
            i = e + 1;
        } else {
            v = jv_undef(NULL);
        }
        char flags[8] = "";
        int nf = 0, width = 0, prec = -1;
        while (i < f->n && strchr("-+ #0", f->p[i]) && nf < 6)
            flags[nf++] = f->p[i++];
        width = fmt_number(x, f->p, f->n, &i);
        if (i < f->n && f->p[i] == '.') {
            i++;
            prec = fmt_number(x, f->p, f->n, &i);
        }
        if (i >= f->n)
            jx_fail(x, "incomplete format");
        char conv = f->p[i];
        if (conv == '%') {
            jb_putc(x, &b, '%');
            continue;
        }
        if (!strchr("sradiouxXeEfFgGc", conv))
            jx_fail(x, "unsupported format character '%c'", conv);
        if (v.t == JT_UNDEF && args.t != JT_DICT) {
            if (is_tuple) {
                if (next >= args.u.l->n)
                    jx_fail(x, "not enough arguments for format string");
                v = args.u.l->v[next++];
            } else {
                if (next++ > 0)
                    jx_fail(x, "not enough arguments for format string");
                v = args;
            }
        } else if (v.t == JT_UNDEF) {
            v = args;
        }
        put_conv(x, &b, v, conv, flags, width, prec);
    }
    if (is_tuple && next < args.u.l->n)
        jx_fail(x, "not all arguments converted during string formatting");
    return jb_take(x, &b);
}

/* A format spec of str.format: [[fill]align][sign][#][0][width][,][.prec][type] */
static void format_spec(jctx *x, jbuf *b, jv v, const char *spec, size_t n)
{
    char fill = ' ', align = 0, sign = 0, type = 0;
    int width = 0, prec = -1, zero = 0;
    size_t i = 0;
    if (n >= 2 && strchr("<>^=", spec[1])) {
        fill = spec[0];
        align = spec[1];
        i = 2;
    } else if (n >= 1 && strchr("<>^=", spec[0])) {
        align = spec[0];
        i = 1;
    }
    if (i < n && strchr("+- ", spec[i]))
        sign = spec[i++];
    if (i < n && spec[i] == '0') {
        zero = 1;
        i++;
    }
    width = fmt_number(x, spec, n, &i);
    if (i < n && spec[i] == '.') {
        i++;
        prec = fmt_number(x, spec, n, &i);
    }
    if (i < n)
        type = spec[i++];
    if (i != n || width > 4096)
        jx_fail(x, "unsupported format spec '%.*s'", (int)n, spec);
    jbuf t = {0};
    if (type == 0 || type == 's') {
        if (v.t == JT_FLOAT && prec >= 0) {
            put_conv(x, &t, v, 'g', "", 0, prec);
        } else {
            jv_print(x, &t, v);
            if (prec >= 0 && t.n)
                t.n = ju_offset(t.p, t.n, prec);
        }
    } else {
        char fl[3] = {sign == ' ' || sign == '+' ? sign : 0, 0, 0};
        put_conv(x, &t, v, type == 'n' ? 'g' : type, fl, 0, prec);
    }
    int64_t len = t.n ? ju_len(t.p, t.n) : 0;
    if (!align)
        align = jv_is_num(v) ? '>' : '<';
    if (zero && jv_is_num(v)) {
        fill = '0';
        align = '=';
    }
    int64_t pad = width > len ? width - len : 0;
    int64_t left = align == '>' || align == '=' ? pad : align == '^' ? pad / 2 : 0;
    if (align == '=' && t.n && (t.p[0] == '-' || t.p[0] == '+')) {
        jb_putc(x, b, t.p[0]);
        for (int64_t k = 0; k < left; k++)
            jb_putc(x, b, fill);
        jb_put(x, b, t.p + 1, t.n - 1);
        return;
    }
    for (int64_t k = 0; k < left; k++)
        jb_putc(x, b, fill);
    if (t.n)
        jb_put(x, b, t.p, t.n);
    for (int64_t k = left; k < pad; k++)
        jb_putc(x, b, fill);
}

static jv str_format(jctx *x, const jstr *f, const jargs *a)
{
    jbuf b = {0};
    int auto_i = 0;
    for (size_t i = 0; i < f->n; i++) {
        char c = f->p[i];
        if (c == '}' ) {
            if (i + 1 < f->n && f->p[i + 1] == '}')
                i++;
            else
                jx_fail(x, "Single '}' encountered in format string");
            jb_putc(x, &b, '}');
            continue;
        }
        if (c != '{') {
            jb_putc(x, &b, c);
            continue;
        }
        if (i + 1 < f->n && f->p[i + 1] == '{') {
            jb_putc(x, &b, '{');
            i++;
            continue;
        }
        size_t e = i + 1;
        while (e < f->n && f->p[e] != '}')
            e++;
        if (e >= f->n)
            jx_fail(x, "Single '{' encountered in format string");
        const char *field = f->p + i + 1;
        size_t fn = e - i - 1, name_n = 0;
        while (name_n < fn && field[name_n] != ':' && field[name_n] != '!')
            name_n++;
        jv v;
        if (name_n == 0) {
            v = arg(a, auto_i++, NULL, jv_undef(NULL));
            if (auto_i > a->n)
                jx_fail(x, "Replacement index %d out of range for positional args tuple",
                        auto_i - 1);
        } else if (field[0] >= '0' && field[0] <= '9') {
            long k = strtol(field, NULL, 10);   /* not atoi: "{4294967295}" gave -1 */
            if (k >= a->n)
                jx_fail(x, "Replacement index %ld out of range for positional args tuple", k);
            v = a->v[k];
        } else {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)name_n, field);
            v = jv_undef(NULL);
            int found = 0;
            for (int k = 0; k < a->nk; k++)
                if (!strcmp(a->kn[k]->p, name)) {
                    v = a->kv[k];
                    found = 1;
                }
            if (!found)
                jx_fail(x, "format: no keyword argument '%s'", name);
        }
        size_t at = name_n;
        int conv = 0;
        if (at < fn && field[at] == '!') {
            conv = at + 1 < fn ? field[at + 1] : 0;
            at += 2;
        }
        if (conv == 'r') {
            jbuf t = {0};
            jv_repr(x, &t, v);
            v = jb_take(x, &t);
        }
        if (at < fn && field[at] == ':')
            format_spec(x, &b, v, field + at + 1, fn - at - 1);
        else
            jv_print(x, &b, v);
        i = e;
    }
    return jb_take(x, &b);
}

/* ---- attribute getters (map, selectattr, sort, ...) -------------------------------------- */

/* Jinja's make_attrgetter: dotted path, integer parts as indexes. */
static jv attr_path_def(jctx *x, jv item, const jstr *path, jv def);

static jv attr_path(jctx *x, jv item, const jstr *path)
{
    return attr_path_def(x, item, path, jv_undef(NULL));
}

/* with a default (not undefined): replaces an undefined after each part */
static jv attr_path_def(jctx *x, jv item, const jstr *path, jv def)
{
    size_t i = 0;
    while (i <= path->n) {
        size_t e = i;
        while (e < path->n && path->p[e] != '.')
            e++;
        const char *part = path->p + i;
        size_t n = e - i;
        int digits = n > 0;
        for (size_t k = 0; k < n; k++)
            digits &= part[k] >= '0' && part[k] <= '9';
        if (digits)
            item = jx_getitem(x, item, jv_int(atoll(part)));
        else
            item = jx_getitem(x, item, jv_str(x, part, n));
        if (item.t == JT_UNDEF && def.t != JT_UNDEF && def.t != JT_NONE)
            item = def;
        i = e + 1;
    }
    return item;
}

/* the key of a value for sort / unique / min / max: lower-cased strings */
static jv sort_key(jctx *x, jv v, int case_sensitive, const jstr *attr)
{
    if (attr)
        v = attr_path(x, v, attr);
    if (!case_sensitive && v.t == JT_STR)
        return recase(x, v.u.s, 'L');
    return v;
}

/* Stable merge sort of vals by keys. */
static void merge_sort(jctx *x, jv *keys, jv *vals, int64_t n, int reverse)
{
    if (n < 2)
        return;
    int64_t h = n / 2;
    merge_sort(x, keys, vals, h, reverse);
    merge_sort(x, keys + h, vals + h, n - h, reverse);
    jv *k2 = jx_alloc(x, (size_t)n * sizeof *k2), *v2 = jx_alloc(x, (size_t)n * sizeof *v2);
    int64_t i = 0, j = h, o = 0;
    while (i < h && j < n) {
        int c = jv_cmp(x, keys[j], keys[i]);
        int take_right = reverse ? c > 0 : c < 0;
        if (take_right) {
            k2[o] = keys[j];
            v2[o++] = vals[j++];
        } else {
            k2[o] = keys[i];
            v2[o++] = vals[i++];
        }
    }
    while (i < h) {
        k2[o] = keys[i];
        v2[o++] = vals[i++];
    }
    while (j < n) {
        k2[o] = keys[j];
        v2[o++] = vals[j++];
    }
    memcpy(keys, k2, (size_t)n * sizeof *k2);
    memcpy(vals, v2, (size_t)n * sizeof *v2);
}

static const jstr *opt_attr(jctx *x, const jargs *a, int i)
{
    jv v = arg(a, i, "attribute", jv_none());
    if (v.t == JT_NONE || v.t == JT_UNDEF)
        return NULL;
    if (v.t == JT_INT)
        return jv_to_str(x, v).u.s;
    return need_str(x, v, "attribute");
}

/* ---- filters ------------------------------------------------------------------------------- */

static int64_t length_of(jctx *x, jv v)
{
    switch (v.t) {
    case JT_UNDEF: return 0;
    case JT_STR: return ju_len(v.u.s->p, v.u.s->n);
    case JT_LIST: return v.u.l->n;
    case JT_DICT: return v.u.d->n;
    default: jx_fail(x, "object of type '%s' has no len()", jv_type_name(v));
    }
}

static jv f_tojson(jctx *x, jv in, const jargs *a)
{
    jv ascii = arg(a, 0, "ensure_ascii", jv_bool(0));
    jv ind = arg(a, 1, "indent", jv_none());
    jv sep = arg(a, 2, "separators", jv_none());
    jv sort = arg(a, 3, "sort_keys", jv_bool(0));
    char spaces[64];
    const char *indent = NULL, *item_sep = NULL, *key_sep = NULL;
    if (ind.t == JT_INT || ind.t == JT_BOOL) {
        int64_t k = ind.u.i < 0 ? 0 : ind.u.i > 60 ? 60 : ind.u.i;
        memset(spaces, ' ', (size_t)k);
        spaces[k] = 0;
        indent = spaces;
    } else if (ind.t == JT_STR) {
        indent = ind.u.s->p;
    } else if (ind.t != JT_NONE && ind.t != JT_UNDEF) {
        jx_fail(x, "tojson: indent must be an integer or a string");
    }
    if (sep.t == JT_LIST && sep.u.l->n == 2) {
        item_sep = need_str(x, sep.u.l->v[0], "tojson separators")->p;
        key_sep = need_str(x, sep.u.l->v[1], "tojson separators")->p;
    } else if (sep.t != JT_NONE && sep.t != JT_UNDEF) {
        jx_fail(x, "tojson: separators must be a pair of strings");
    }
    jbuf b = {0};
    jv_json(x, &b, in, jv_truthy(ascii), indent, item_sep, key_sep, jv_truthy(sort));
    return jb_take(x, &b);
}

static jv f_indent(jctx *x, jv in, const jargs *a)
{
    jv w = arg(a, 0, "width", jv_int(4));
    int first = jv_truthy(arg(a, 1, "first", jv_bool(0)));
    int blank = jv_truthy(arg(a, 2, "blank", jv_bool(0)));
    jv ind;
    if (w.t == JT_STR) {
        ind = w;
    } else {
        int64_t k = need_int(x, w, "indent width");
        if (k < 0) k = 0;
        if (k > 4096) jx_fail(x, "indent width %lld too large", (long long)k);
        char *sp = jx_alloc(x, (size_t)k + 1);
        memset(sp, ' ', (size_t)k);
        ind = jv_str(x, sp, (size_t)k);
    }
    jv s = str_of(x, in);
    jbuf t = {0};
    jb_put(x, &t, s.u.s->p, s.u.s->n);
    jb_putc(x, &t, '\n');
    jv lines = splitlines(x, jb_take(x, &t).u.s, 0);
    jbuf b = {0};
    for (int64_t i = 0; i < lines.u.l->n; i++) {
        const jstr *l = lines.u.l->v[i].u.s;
        if (i) {
            jb_putc(x, &b, '\n');
            if (blank || l->n)
                jb_put(x, &b, ind.u.s->p, ind.u.s->n);
        }
        jb_put(x, &b, l->p, l->n);
    }
    jv r = jb_take(x, &b);
    if (first) {
        jbuf f = {0};
        jb_put(x, &f, ind.u.s->p, ind.u.s->n);
        jb_put(x, &f, r.u.s->p, r.u.s->n);
        return jb_take(x, &f);
    }
    return r;
}

static jv f_join(jctx *x, jv in, const jargs *a)
{
    jv d = arg(a, 0, "d", jv_str(x, "", 0));
    const jstr *attr = opt_attr(x, a, 1);
    jlist *l = jx_iter(x, in);
    jv sep = str_of(x, d);
    jbuf b = {0};
    for (int64_t i = 0; i < l->n; i++) {
        if (i)
            jb_put(x, &b, sep.u.s->p, sep.u.s->n);
        jv v = attr ? attr_path(x, l->v[i], attr) : l->v[i];
        jv_print(x, &b, v);
    }
    return jb_take(x, &b);
}

static jv f_round(jctx *x, jv in, const jargs *a)
{
    int64_t prec = need_int(x, arg(a, 0, "precision", jv_int(0)), "round precision");
    jv m = arg(a, 1, "method", jv_cstr(x, "common"));
    const char *method = need_str(x, m, "round method")->p;
    if (!jv_is_num(in)) {
        jx_need(x, in);
        jx_fail(x, "type %s doesn't define __round__ method", jv_type_name(in));
    }
    if (prec < -300 || prec > 300)
        jx_fail(x, "round precision out of range");
    if (!strcmp(method, "common")) {
        if (in.t != JT_FLOAT)
            return jv_int(in.u.i);
        if (prec >= 0) {
            char t[400];
            snprintf(t, sizeof t, "%.*f", (int)prec, in.u.f);
            return jv_float(strtod(t, NULL));
        }
        double p10 = pow(10, (double)-prec);
        return jv_float(nearbyint(in.u.f / p10) * p10);
    }
    if (strcmp(method, "ceil") && strcmp(method, "floor"))
        jx_fail(x, "method must be common, ceil or floor");
    double p10 = pow(10, (double)prec), v = jv_num(in) * p10;
    return jv_float((!strcmp(method, "ceil") ? ceil(v) : floor(v)) / p10);
}

static jv f_int(jctx *x, jv in, const jargs *a)
{
    jv def = arg(a, 0, "default", jv_int(0));
    int64_t base = need_int(x, arg(a, 1, "base", jv_int(10)), "int base");
    switch (in.t) {
    case JT_INT: case JT_BOOL: return jv_int(in.u.i);
    case JT_FLOAT:
        if (isfinite(in.u.f) && fabs(in.u.f) < 9.2e18)
            return jv_int((int64_t)in.u.f);
        return def;
    case JT_STR: {
        jv s = strip(x, in.u.s, NULL, 1, 1);
        char *e;
        char clean[128];
        size_t m = 0;
        for (size_t i = 0; i < s.u.s->n && m < sizeof clean - 1; i++)
            if (s.u.s->p[i] != '_' || (i > 0 && i + 1 < s.u.s->n))
                clean[m++] = s.u.s->p[i];
        clean[m] = 0;
        if (m && base >= 2 && base <= 36) {
            long long v = strtoll(clean, &e, (int)base);
            if (*e == 0)
                return jv_int(v);
        }
        double f = strtod(clean, &e);
        if (m && *e == 0 && isfinite(f) && fabs(f) < 9.2e18)
            return jv_int((int64_t)f);
        return def;
    }
    default: return def;
    }
}

static jv f_float(jctx *x, jv in, const jargs *a)
{
    jv def = arg(a, 0, "default", jv_float(0.0));
    if (jv_is_num(in))
        return jv_float(jv_num(in));
    if (in.t == JT_STR) {
        jv s = strip(x, in.u.s, NULL, 1, 1);
        char *e;
        double f = strtod(s.u.s->p, &e);
        if (s.u.s->n && *e == 0)
            return jv_float(f);
    }
    return def;
}

static jv select_like(jctx *x, jv in, const jargs *a, int by_attr, int keep_if)
{
    jlist *l = jx_iter(x, in);
    jv r = jv_list(x, 0);
    int off = by_attr ? 1 : 0;
    const jstr *attr = by_attr ? need_str(x, arg(a, 0, NULL, jv_undef("selectattr needs an "
                                                                      "attribute")), "attribute")
                               : NULL;
    const char *test = a->n > off ? need_str(x, a->v[off], "test name")->p : NULL;
    jargs ta = {a->v + off + 1, a->n > off + 1 ? a->n - off - 1 : 0, a->kn, a->kv, a->nk};
    for (int64_t i = 0; i < l->n; i++) {
        jv v = attr ? attr_path(x, l->v[i], attr) : l->v[i];
        int ok = test ? jx_test(x, test, v, &ta) : jv_truthy(v);
        if (ok == keep_if)
            jl_push(x, r.u.l, l->v[i]);
    }
    return r;
}

static jv f_map(jctx *x, jv in, const jargs *a)
{
    jlist *l = jx_iter(x, in);
    jv r = jv_list(x, l->n);
    jv attr = arg(a, -1, "attribute", jv_undef(NULL));
    if (attr.t != JT_UNDEF) {
        const jstr *path = attr.t == JT_INT ? jv_to_str(x, attr).u.s : need_str(x, attr, "attribute");
        jv def = arg(a, -1, "default", jv_undef(NULL));
        for (int64_t i = 0; i < l->n; i++)
            jl_push(x, r.u.l, attr_path_def(x, l->v[i], path, def));
        return r;
    }
    if (a->n < 1)
        jx_fail(x, "map requires a filter argument");
    const char *name = need_str(x, a->v[0], "filter name")->p;
    jargs fa = {a->v + 1, a->n - 1, a->kn, a->kv, a->nk};
    for (int64_t i = 0; i < l->n; i++)
        jl_push(x, r.u.l, jx_filter(x, name, l->v[i], &fa));
    return r;
}

static jv f_sort(jctx *x, jv in, const jargs *a)
{
    int reverse = jv_truthy(arg(a, 0, "reverse", jv_bool(0)));
    int cs = jv_truthy(arg(a, 1, "case_sensitive", jv_bool(0)));
    const jstr *attr = opt_attr(x, a, 2);
    jlist *l = jx_iter(x, in);
    jv r = jv_list(x, l->n);
    jv *keys = jx_alloc(x, (size_t)(l->n + 1) * sizeof *keys);
    for (int64_t i = 0; i < l->n; i++) {
        jl_push(x, r.u.l, l->v[i]);
        keys[i] = sort_key(x, l->v[i], cs, attr);
    }
    merge_sort(x, keys, r.u.l->v, l->n, reverse);
    return r;
}

static jv f_dictsort(jctx *x, jv in, const jargs *a)
{
    int cs = jv_truthy(arg(a, 0, "case_sensitive", jv_bool(0)));
    const char *by = need_str(x, arg(a, 1, "by", jv_cstr(x, "key")), "dictsort by")->p;
    int reverse = jv_truthy(arg(a, 2, "reverse", jv_bool(0)));
    if (in.t != JT_DICT) {
        jx_need(x, in);
        jx_fail(x, "dictsort expects a mapping, not %s", jv_type_name(in));
    }
    int pos = !strcmp(by, "key") ? 0 : !strcmp(by, "value") ? 1 : -1;
    if (pos < 0)
        jx_fail(x, "You can only sort by either \"key\" or \"value\"");
    int64_t n = in.u.d->n;
    jv r = jv_list(x, n);
    jv *keys = jx_alloc(x, (size_t)(n + 1) * sizeof *keys);
    for (int64_t i = 0; i < n; i++) {
        jv t = jv_list(x, 2);
        t.u.l->tuple = 1;
        jl_push(x, t.u.l, in.u.d->k[i]);
        jl_push(x, t.u.l, in.u.d->v[i]);
        jl_push(x, r.u.l, t);
        keys[i] = sort_key(x, pos ? in.u.d->v[i] : in.u.d->k[i], cs, NULL);
    }
    merge_sort(x, keys, r.u.l->v, n, reverse);
    return r;
}

static jv f_unique(jctx *x, jv in, const jargs *a)
{
    int cs = jv_truthy(arg(a, 0, "case_sensitive", jv_bool(0)));
    const jstr *attr = opt_attr(x, a, 1);
    jlist *l = jx_iter(x, in);
    jv r = jv_list(x, 0), seen = jv_list(x, 0);
    for (int64_t i = 0; i < l->n; i++) {
        jv k = sort_key(x, l->v[i], cs, attr);
        int dup = 0;
        for (int64_t j = 0; j < seen.u.l->n && !dup; j++)
            dup = jv_eq(seen.u.l->v[j], k);
        if (!dup) {
            jl_push(x, seen.u.l, k);
            jl_push(x, r.u.l, l->v[i]);
        }
    }
    return r;
}

static jv f_minmax(jctx *x, jv in, const jargs *a, int max)
{
    int cs = jv_truthy(arg(a, 0, "case_sensitive", jv_bool(0)));
    const jstr *attr = opt_attr(x, a, 1);
    jlist *l = jx_iter(x, in);
    if (l->n == 0)
        return jv_undef(max ? "No aggregated item, sequence was empty." : "No aggregated item, "
                        "sequence was empty.");
    int64_t best = 0;
    jv bk = sort_key(x, l->v[0], cs, attr);
    for (int64_t i = 1; i < l->n; i++) {
        jv k = sort_key(x, l->v[i], cs, attr);
        int c = jv_cmp(x, k, bk);
        if (max ? c > 0 : c < 0) {
            best = i;
            bk = k;
        }
    }
    return l->v[best];
}

static jv f_sum(jctx *x, jv in, const jargs *a)
{
    const jstr *attr = opt_attr(x, a, 0);
    jv total = arg(a, 1, "start", jv_int(0));
    jlist *l = jx_iter(x, in);
    for (int64_t i = 0; i < l->n; i++) {
        jv v = attr ? attr_path(x, l->v[i], attr) : l->v[i];
        if (!jv_is_num(total) || !jv_is_num(v)) {
            jx_need(x, v);
            jx_fail(x, "unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(total),
                    jv_type_name(v));
        }
        if (total.t == JT_FLOAT || v.t == JT_FLOAT)
            total = jv_float(jv_num(total) + jv_num(v));
        else if (__builtin_add_overflow(total.u.i, v.u.i, &total.u.i))
            jx_fail(x, "integer result out of the 64-bit range");
        else
            total = jv_int(total.u.i);   /* start=True gives an int */
    }
    return total;
}

static jv f_escape(jctx *x, jv in)
{
    if (in.t == JT_STR && in.safe)
        return in;
    jv s = str_of(x, in);
    jbuf b = {0};
    for (size_t i = 0; i < s.u.s->n; i++) {
        char c = s.u.s->p[i];
        switch (c) {
        case '&': jb_puts(x, &b, "&amp;"); break;
        case '<': jb_puts(x, &b, "&lt;"); break;
        case '>': jb_puts(x, &b, "&gt;"); break;
        case '"': jb_puts(x, &b, "&#34;"); break;
        case '\'': jb_puts(x, &b, "&#39;"); break;
        default: jb_putc(x, &b, c);
        }
    }
    jv r = jb_take(x, &b);
    r.safe = 1;
    return r;
}

static jv f_truncate(jctx *x, jv in, const jargs *a)
{
    jv s = str_of(x, in);
    int64_t length = need_int(x, arg(a, 0, "length", jv_int(255)), "truncate length");
    int killwords = jv_truthy(arg(a, 1, "killwords", jv_bool(0)));
    jv end = arg(a, 2, "end", jv_cstr(x, "..."));
    jv lw = arg(a, 3, "leeway", jv_none());
    int64_t leeway = lw.t == JT_NONE || lw.t == JT_UNDEF ? 5 : need_int(x, lw, "leeway");
    const jstr *e = need_str(x, end, "truncate end");
    int64_t n = ju_len(s.u.s->p, s.u.s->n), en = ju_len(e->p, e->n);
    if (length < en)
        jx_fail(x, "expected length >= %lld, got %lld", (long long)en, (long long)length);
    if (n <= length + leeway)
        return s;
    size_t cut = ju_offset(s.u.s->p, s.u.s->n, length - en);
    jbuf b = {0};
    if (killwords) {
        jb_put(x, &b, s.u.s->p, cut);
    } else {
        size_t k = cut;
        while (k > 0 && s.u.s->p[k - 1] != ' ')
            k--;
        jb_put(x, &b, s.u.s->p, k ? k - 1 : cut);
    }
    jb_put(x, &b, e->p, e->n);
    return jb_take(x, &b);
}

static jv f_batch(jctx *x, jv in, const jargs *a)
{
    int64_t k = need_int(x, arg(a, 0, "linecount", jv_undef("batch needs a size")), "batch size");
    jv fill = arg(a, 1, "fill_with", jv_none());
    int fills = has_arg(a, 1, "fill_with") && fill.t != JT_NONE;
    if (k <= 0)
        jx_fail(x, "batch size must be positive");
    jlist *l = jx_iter(x, in);
    jv r = jv_list(x, 0), cur = jv_list(x, 0);
    for (int64_t i = 0; i < l->n; i++) {
        if (cur.u.l->n == k) {
            jl_push(x, r.u.l, cur);
            cur = jv_list(x, 0);
        }
        jl_push(x, cur.u.l, l->v[i]);
    }
    if (cur.u.l->n) {
        while (fills && cur.u.l->n < k)
            jl_push(x, cur.u.l, fill);
        jl_push(x, r.u.l, cur);
    }
    return r;
}

static jv f_slice(jctx *x, jv in, const jargs *a)
{
    int64_t k = need_int(x, arg(a, 0, "slices", jv_undef("slice needs a count")), "slice count");
    jv fill = arg(a, 1, "fill_with", jv_none());
    if (k <= 0 || k > 100000)
        jx_fail(x, "slice count must be between 1 and 100000");
    jlist *l = jx_iter(x, in);
    int64_t per = l->n / k, extra = l->n % k, offset = 0;
    jv r = jv_list(x, k);
    for (int64_t s = 0; s < k; s++) {
        int64_t start = offset + s * per;
        if (s < extra)
            offset++;
        int64_t end = offset + (s + 1) * per;
        jv part = jv_list(x, end - start + 1);
        for (int64_t i = start; i < end; i++)
            jl_push(x, part.u.l, l->v[i]);
        if (fill.t != JT_NONE && fill.t != JT_UNDEF && s >= extra)
            jl_push(x, part.u.l, fill);
        jl_push(x, r.u.l, part);
    }
    return r;
}

static jv f_wordcount(jctx *x, jv in)
{
    jv s = str_of(x, in);
    int64_t n = 0;
    int inword = 0;
    for (size_t i = 0; i < s.u.s->n; i++) {
        uint8_t c = (uint8_t)s.u.s->p[i];
        int w = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c >= 0x80;
        if (w && !inword)
            n++;
        inword = w;
    }
    return jv_int(n);
}

static jv items_of(jctx *x, jv in)
{
    jv r = jv_list(x, 0);
    if (in.t == JT_UNDEF)
        return r;
    if (in.t != JT_DICT)
        jx_fail(x, "can only get item pairs from a mapping, not %s", jv_type_name(in));
    for (int64_t i = 0; i < in.u.d->n; i++) {
        jv t = jv_list(x, 2);
        t.u.l->tuple = 1;
        jl_push(x, t.u.l, in.u.d->k[i]);
        jl_push(x, t.u.l, in.u.d->v[i]);
        jl_push(x, r.u.l, t);
    }
    return r;
}

static jv first_last(jctx *x, jv in, int last)
{
    jlist *l = jx_iter(x, in);
    if (l->n == 0)
        return jv_undef(last ? "No last item, sequence was empty." : "No first item, sequence "
                        "was empty.");
    return l->v[last ? l->n - 1 : 0];
}

static const char *const filter_names[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "first", "float", "forceescape", "format", "indent", "int", "items", "join",
    "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace",
    "reverse", "round", "safe", "select", "selectattr", "slice", "sort", "string", "sum", "title",
    "tojson", "trim", "truncate", "unique", "upper", "wordcount", NULL};

int jx_has_filter(const char *name)
{
    for (int i = 0; filter_names[i]; i++)
        if (!strcmp(filter_names[i], name))
            return 1;
    return 0;
}

jv jx_filter(jctx *x, const char *name, jv in, const jargs *a)
{
    jx_step(x);
#define IS(s) (!strcmp(name, s))
    if (IS("tojson")) return f_tojson(x, in, a);
    if (IS("safe")) {
        jv r = str_of(x, in);
        r.safe = 1;
        return r;
    }
    if (IS("string")) return str_of(x, in);
    if (IS("length") || IS("count")) return jv_int(length_of(x, in));
    if (IS("default") || IS("d")) {
        jv def = arg(a, 0, "default_value", jv_str(x, "", 0));
        int boolean = jv_truthy(arg(a, 1, "boolean", jv_bool(0)));
        return in.t == JT_UNDEF || (boolean && !jv_truthy(in)) ? def : in;
    }
    if (IS("trim")) {
        jv chars = arg(a, 0, "chars", jv_none());
        return strip(x, str_of(x, in).u.s, chars.t == JT_STR ? chars.u.s : NULL, 1, 1);
    }
    if (IS("upper")) return recase(x, str_of(x, in).u.s, 'U');
    if (IS("lower")) return recase(x, str_of(x, in).u.s, 'L');
    if (IS("capitalize")) return recase(x, str_of(x, in).u.s, 'C');
    if (IS("title")) return recase(x, str_of(x, in).u.s, 'T');
    if (IS("replace")) {
        jv old = arg(a, 0, "old", jv_undef("replace needs old")), new = arg(a, 1, "new", jv_undef(
            "replace needs new"));
        jv cnt = arg(a, 2, "count", jv_none());
        return replace(x, str_of(x, in).u.s, str_of(x, old).u.s, str_of(x, new).u.s,
                       cnt.t == JT_NONE || cnt.t == JT_UNDEF ? -1 : need_int(x, cnt, "count"));
    }
    if (IS("join")) return f_join(x, in, a);
    if (IS("first")) return first_last(x, in, 0);
    if (IS("last")) return first_last(x, in, 1);
    if (IS("list")) {
        jlist *l = jx_iter(x, in);
        jv r = jv_list(x, l->n);
        for (int64_t i = 0; i < l->n; i++)
            jl_push(x, r.u.l, l->v[i]);
        return r;
    }
    if (IS("items")) return items_of(x, in);
    if (IS("selectattr")) return select_like(x, in, a, 1, 1);
    if (IS("rejectattr")) return select_like(x, in, a, 1, 0);
    if (IS("select")) return select_like(x, in, a, 0, 1);
    if (IS("reject")) return select_like(x, in, a, 0, 0);
    if (IS("map")) return f_map(x, in, a);
    if (IS("int")) return f_int(x, in, a);
    if (IS("float")) return f_float(x, in, a);
    if (IS("abs")) {
        if (!jv_is_num(in)) {
            jx_need(x, in);
            jx_fail(x, "bad operand type for abs(): '%s'", jv_type_name(in));
        }
        if (in.t == JT_FLOAT)
            return jv_float(fabs(in.u.f));
        if (in.u.i == INT64_MIN)
            jx_fail(x, "integer result out of the 64-bit range");
        return jv_int(in.u.i < 0 ? -in.u.i : in.u.i);
    }
    if (IS("round")) return f_round(x, in, a);
    if (IS("indent")) return f_indent(x, in, a);
    if (IS("dictsort")) return f_dictsort(x, in, a);
    if (IS("sort")) return f_sort(x, in, a);
    if (IS("unique")) return f_unique(x, in, a);
    if (IS("min")) return f_minmax(x, in, a, 0);
    if (IS("max")) return f_minmax(x, in, a, 1);
    if (IS("sum")) return f_sum(x, in, a);
    if (IS("reverse")) {
        if (in.t == JT_STR) {
            jlist *l = jx_iter(x, in);
            jbuf b = {0};
            for (int64_t i = l->n; i-- > 0;)
                jb_put(x, &b, l->v[i].u.s->p, l->v[i].u.s->n);
            return jb_take(x, &b);
        }
        jlist *l = jx_iter(x, in);
        jv r = jv_list(x, l->n);
        for (int64_t i = l->n; i-- > 0;)
            jl_push(x, r.u.l, l->v[i]);
        return r;
    }
    if (IS("escape") || IS("e")) return f_escape(x, in);
    if (IS("forceescape")) {
        in = str_of(x, in);
        in.safe = 0;
        return f_escape(x, in);
    }
    if (IS("slice")) return f_slice(x, in, a);
    if (IS("format")) {
        jv fmt = str_of(x, in);
        if (a->nk) {
            jv d = jv_dict(x);
            for (int k = 0; k < a->nk; k++)
                jd_set(x, d.u.d, jv_str(x, a->kn[k]->p, a->kn[k]->n), a->kv[k]);
            return jx_percent_format(x, fmt, d);
        }
        jv t = jv_list(x, a->n);
        t.u.l->tuple = 1;
        for (int i = 0; i < a->n; i++)
            jl_push(x, t.u.l, a->v[i]);
        return jx_percent_format(x, fmt, t);
    }
    if (IS("center")) {
        int64_t w = need_int(x, arg(a, 0, "width", jv_int(80)), "center width");
        return center(x, str_of(x, in).u.s, w, " ", 'c');
    }
    if (IS("truncate")) return f_truncate(x, in, a);
    if (IS("batch")) return f_batch(x, in, a);
    if (IS("wordcount")) return f_wordcount(x, in);
    if (IS("attr")) {
        /* Python's getattr only: a dict's keys are not its attributes */
        const jstr *n = need_str(x, arg(a, 0, "name", jv_undef("attr needs a name")), "attr");
        jv m;
        if ((in.t == JT_DICT || in.t == JT_LIST || in.t == JT_STR) && jx_method(x, in, n->p, &m))
            return m;
        if (in.t == JT_DICT)
            return jv_undef("the dict has no such attribute");
        return jx_getattr(x, in, n->p, n->n);
    }
#undef IS
    jx_fail(x, "No filter named '%s'.", name);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static const char *const test_names[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false",
    "filter", "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan",
    "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string",
    "test", "true", "undefined", "upper", "==", "!=", "<", "<=", ">", ">=", NULL};

int jx_has_test(const char *name)
{
    for (int i = 0; test_names[i]; i++)
        if (!strcmp(test_names[i], name))
            return 1;
    return 0;
}

/* Python's str.isupper / islower: every cased character so, and one at least. */
static int all_case(const jstr *s, int upper)
{
    int any = 0;
    for (size_t i = 0; i < s->n;) {
        uint32_t c;
        i += ju_next(s->p + i, s->n - i, &c);
        if (upper ? ju_islower(c) : ju_isupper(c))
            return 0;
        any |= upper ? ju_isupper(c) : ju_islower(c);
    }
    return any;
}

int jx_test(jctx *x, const char *name, jv in, const jargs *a)
{
    jx_step(x);
    jv other = arg(a, 0, NULL, jv_undef(NULL));
#define IS(s) (!strcmp(name, s))
    if (IS("defined")) return in.t != JT_UNDEF;
    if (IS("undefined")) return in.t == JT_UNDEF;
    if (IS("none")) return in.t == JT_NONE;
    if (IS("boolean")) return in.t == JT_BOOL;
    if (IS("true")) return in.t == JT_BOOL && in.u.i;
    if (IS("false")) return in.t == JT_BOOL && !in.u.i;
    if (IS("integer")) return in.t == JT_INT;
    if (IS("float")) return in.t == JT_FLOAT;
    if (IS("number")) return jv_is_num(in);
    if (IS("string")) return in.t == JT_STR;
    if (IS("mapping")) return in.t == JT_DICT;
    if (IS("iterable")) return in.t == JT_STR || in.t == JT_LIST || in.t == JT_DICT ||
                               in.t == JT_UNDEF;
    if (IS("sequence")) return in.t == JT_STR || in.t == JT_LIST || in.t == JT_DICT ||
                               in.t == JT_UNDEF;
    if (IS("callable")) return in.t == JT_FUNC || in.t == JT_UNDEF; /* Undefined has __call__ */
    if (IS("escaped")) return 0;
    if (IS("lower")) return in.t == JT_STR ? all_case(in.u.s, 0) : all_case(str_of(x, in).u.s, 0);
    if (IS("upper")) return in.t == JT_STR ? all_case(in.u.s, 1) : all_case(str_of(x, in).u.s, 1);
    if (IS("odd") || IS("even")) {
        int64_t v = need_int(x, in, name);
        return IS("odd") ? (v & 1) != 0 : (v & 1) == 0;
    }
    if (IS("divisibleby")) {
        int64_t d = need_int(x, other, "divisibleby");
        if (d == 0)
            jx_fail(x, "integer division or modulo by zero");
        return need_int(x, in, "divisibleby") % d == 0;
    }
    if (IS("eq") || IS("equalto") || IS("==")) return jv_eq(in, other);
    if (IS("ne") || IS("!=")) return !jv_eq(in, other);
    if (IS("lt") || IS("lessthan") || IS("<")) return jv_cmp(x, in, other) < 0;
    if (IS("le") || IS("<=")) return jv_cmp(x, in, other) <= 0;
    if (IS("gt") || IS("greaterthan") || IS(">")) return jv_cmp(x, in, other) > 0;
    if (IS("ge") || IS(">=")) return jv_cmp(x, in, other) >= 0;
    if (IS("sameas")) {
        if (in.t != other.t) return 0;
        if (in.t == JT_NONE || in.t == JT_UNDEF) return 1;
        if (in.t == JT_BOOL) return in.u.i == other.u.i;
        if (in.t == JT_INT) return in.u.i == other.u.i && in.u.i >= -5 && in.u.i <= 256;
        if (in.t == JT_STR) return in.u.s == other.u.s;
        return jv_eq(in, other) && in.u.l == other.u.l;
    }
    if (IS("in")) {
        jv hay = other;
        if (hay.t == JT_STR) {
            if (in.t != JT_STR)
                jx_fail(x, "'in <string>' requires string as left operand, not %s",
                        jv_type_name(in));
            return memmem(hay.u.s->p, hay.u.s->n, in.u.s->p, in.u.s->n) != NULL || !in.u.s->n;
        }
        jlist *l = jx_iter(x, hay);
        for (int64_t i = 0; i < l->n; i++)
            if (jv_eq(l->v[i], in))
                return 1;
        return 0;
    }
    if (IS("filter")) return in.t == JT_STR && jx_has_filter(in.u.s->p);
    if (IS("test")) return in.t == JT_STR && jx_has_test(in.u.s->p);
#undef IS
    jx_fail(x, "No test named '%s'.", name);
}

/* ---- methods ------------------------------------------------------------------------------------ */

enum {
    M_STRIP = 1, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_STARTSWITH, M_ENDSWITH, M_UPPER, M_LOWER,
    M_TITLE, M_CAPITALIZE, M_REPLACE, M_FIND, M_RFIND, M_INDEX, M_RINDEX, M_COUNT, M_JOIN,
    M_SPLITLINES, M_ISDIGIT, M_ISALPHA, M_ISALNUM, M_ISSPACE, M_ISUPPER, M_ISLOWER, M_FORMAT,
    M_CENTER, M_LJUST, M_RJUST, M_ZFILL, M_SWAPCASE, M_ISTITLE,
    M_GET, M_ITEMS, M_KEYS, M_VALUES, M_COPY,
    M_LINDEX, M_LCOUNT,
    M_UNSAFE,
};

typedef struct mdef { const char *name; int id; } mdef;

static const mdef str_methods[] = {
    {"strip", M_STRIP}, {"lstrip", M_LSTRIP}, {"rstrip", M_RSTRIP}, {"split", M_SPLIT},
    {"rsplit", M_RSPLIT}, {"startswith", M_STARTSWITH}, {"endswith", M_ENDSWITH},
    {"upper", M_UPPER}, {"lower", M_LOWER}, {"title", M_TITLE}, {"capitalize", M_CAPITALIZE},
    {"replace", M_REPLACE}, {"find", M_FIND}, {"rfind", M_RFIND}, {"index", M_INDEX},
    {"rindex", M_RINDEX}, {"count", M_COUNT}, {"join", M_JOIN}, {"splitlines", M_SPLITLINES},
    {"isdigit", M_ISDIGIT}, {"isalpha", M_ISALPHA}, {"isalnum", M_ISALNUM},
    {"isspace", M_ISSPACE}, {"isupper", M_ISUPPER}, {"islower", M_ISLOWER},
    {"format", M_FORMAT}, {"center", M_CENTER}, {"ljust", M_LJUST}, {"rjust", M_RJUST},
    {"zfill", M_ZFILL}, {"swapcase", M_SWAPCASE}, {"istitle", M_ISTITLE}, {NULL, 0}};
static const mdef dict_methods[] = {
    {"get", M_GET}, {"items", M_ITEMS}, {"keys", M_KEYS}, {"values", M_VALUES}, {"copy", M_COPY},
    {"pop", M_UNSAFE}, {"popitem", M_UNSAFE}, {"setdefault", M_UNSAFE}, {"update", M_UNSAFE},
    {"clear", M_UNSAFE}, {NULL, 0}};
static const mdef list_methods[] = {
    {"index", M_LINDEX}, {"count", M_LCOUNT}, {"copy", M_COPY}, {"append", M_UNSAFE},
    {"extend", M_UNSAFE}, {"insert", M_UNSAFE}, {"pop", M_UNSAFE}, {"remove", M_UNSAFE},
    {"reverse", M_UNSAFE}, {"sort", M_UNSAFE}, {"clear", M_UNSAFE}, {NULL, 0}};

int jx_method(jctx *x, jv self, const char *name, jv *out)
{
    const mdef *t = self.t == JT_STR ? str_methods : self.t == JT_DICT ? dict_methods
                  : self.t == JT_LIST ? list_methods : NULL;
    for (int i = 0; t && t[i].name; i++)
        if (!strcmp(t[i].name, name)) {
            out->t = JT_FUNC;
            out->u.fn = jx_alloc(x, sizeof(jfunc));
            memset(out->u.fn, 0, sizeof(jfunc));
            out->u.fn->kind = JF_METHOD;
            out->u.fn->name = t[i].name;
            out->u.fn->self = self;
            out->u.fn->id = t[i].id;
            return 1;
        }
    return 0;
}

static int str_class(const jstr *s, int id)
{
    if (s->n == 0)
        return 0;
    if (id == M_ISUPPER || id == M_ISLOWER)
        return all_case(s, id == M_ISUPPER);
    int prev_cased = 0, any = 0;
    for (size_t i = 0; i < s->n;) {
        uint32_t c;
        i += ju_next(s->p + i, s->n - i, &c);
        switch (id) {
        case M_ISDIGIT: if (!ju_isdigit(c)) return 0; break;
        case M_ISALPHA: if (!ju_isalpha(c)) return 0; break;
        case M_ISALNUM: if (!ju_isalpha(c) && !ju_isdigit(c)) return 0; break;
        case M_ISSPACE: if (!ju_isspace(c)) return 0; break;
        case M_ISTITLE:
            if (ju_isupper(c)) {
                if (prev_cased) return 0;
                prev_cased = any = 1;
            } else if (ju_islower(c)) {
                if (!prev_cased) return 0;
                prev_cased = any = 1;
            } else {
                prev_cased = 0;
            }
            break;
        }
    }
    return id == M_ISTITLE ? any : 1;
}

jv jx_call_method(jctx *x, const jfunc *f, const jargs *a)
{
    jv self = f->self;
    if (f->id == M_UNSAFE)
        jx_fail(x, "access to attribute '%s' of '%s' object is unsafe.", f->name,
                jv_type_name(self));
    if (self.t == JT_STR) {
        const jstr *s = self.u.s;
        jv a0 = arg(a, 0, NULL, jv_none());
        switch (f->id) {
        case M_STRIP: case M_LSTRIP: case M_RSTRIP: {
            const jstr *chars = a0.t == JT_NONE ? NULL : need_str(x, a0, f->name);
            return strip(x, s, chars, f->id != M_RSTRIP, f->id != M_LSTRIP);
        }
        case M_SPLIT: case M_RSPLIT: {
            jv sep = arg(a, 0, "sep", jv_none());
            jv mx = arg(a, 1, "maxsplit", jv_int(-1));
            return split(x, s, sep.t == JT_NONE ? NULL : need_str(x, sep, "split"),
                         need_int(x, mx, "maxsplit"), f->id == M_RSPLIT);
        }
        case M_STARTSWITH: case M_ENDSWITH: {
            /* s[start:end] first, as Python does */
            jstr *sub = (jstr *)s;
            if (a->n > 1) {
                int64_t n = ju_len(s->p, s->n);
                int64_t b0 = need_int(x, a->v[1], f->name);
                int64_t e0 = a->n > 2 && a->v[2].t != JT_NONE ? need_int(x, a->v[2], f->name) : n;
                if (b0 < 0) b0 = b0 + n < 0 ? 0 : b0 + n;
                if (e0 < 0) e0 = e0 + n < 0 ? 0 : e0 + n;
                if (b0 > n) return jv_bool(0);
                if (e0 > n) e0 = n;
                if (e0 < b0) e0 = b0;
                size_t p0 = ju_offset(s->p, s->n, b0), p1 = ju_offset(s->p, s->n, e0);
                sub = jv_str(x, s->p + p0, p1 - p0).u.s;
            }
            return jv_bool(affix(x, sub, a0, f->id == M_ENDSWITH));
        }
        case M_UPPER: return recase(x, s, 'U');
        case M_LOWER: return recase(x, s, 'L');
        case M_TITLE: return recase(x, s, 'P');
        case M_CAPITALIZE: return recase(x, s, 'C');
        case M_SWAPCASE: return swapcase(x, s);
        case M_REPLACE: {
            jv cnt = arg(a, 2, NULL, jv_int(-1));
            return replace(x, s, need_str(x, arg(a, 0, NULL, jv_undef(NULL)), "replace"),
                           need_str(x, arg(a, 1, NULL, jv_undef(NULL)), "replace"),
                           need_int(x, cnt, "replace count"));
        }
        case M_FIND: case M_RFIND: case M_INDEX: case M_RINDEX: {
            int64_t k = find(s, need_str(x, a0, f->name), f->id == M_RFIND || f->id == M_RINDEX);
            if (k < 0 && (f->id == M_INDEX || f->id == M_RINDEX))
                jx_fail(x, "substring not found");
            return jv_int(k);
        }
        case M_COUNT: {
            const jstr *sub = need_str(x, a0, "count");
            if (!sub->n)
                return jv_int(ju_len(s->p, s->n) + 1);
            int64_t k = 0;
            for (size_t i = 0; i + sub->n <= s->n;) {
                const char *hit = memmem(s->p + i, s->n - i, sub->p, sub->n);
                if (!hit)
                    break;
                k++;
                i = (size_t)(hit - s->p) + sub->n;
            }
            return jv_int(k);
        }
        case M_JOIN: {
            jlist *l = jx_iter(x, a0);
            jbuf b = {0};
            for (int64_t i = 0; i < l->n; i++) {
                if (i)
                    jb_put(x, &b, s->p, s->n);
                const jstr *it = l->v[i].t == JT_STR ? l->v[i].u.s : NULL;
                if (!it)
                    jx_fail(x, "sequence item %lld: expected str instance, %s found",
                            (long long)i, jv_type_name(l->v[i]));
                jb_put(x, &b, it->p, it->n);
            }
            return jb_take(x, &b);
        }
        case M_SPLITLINES: return splitlines(x, s, jv_truthy(arg(a, 0, "keepends", jv_bool(0))));
        case M_ISDIGIT: case M_ISALPHA: case M_ISALNUM: case M_ISSPACE: case M_ISUPPER:
        case M_ISLOWER: case M_ISTITLE:
            return jv_bool(str_class(s, f->id));
        case M_FORMAT: return str_format(x, s, a);
        case M_CENTER: case M_LJUST: case M_RJUST: {
            jv fill = arg(a, 1, NULL, jv_cstr(x, " "));
            const jstr *fs = need_str(x, fill, f->name);
            if (ju_len(fs->p, fs->n) != 1)
                jx_fail(x, "The fill character must be exactly one character long");
            return center(x, s, need_int(x, a0, f->name), fs->p,
                          f->id == M_CENTER ? 'c' : f->id == M_LJUST ? 'l' : 'r');
        }
        case M_ZFILL: {
            int64_t w = need_int(x, a0, "zfill");
            int64_t n = ju_len(s->p, s->n);
            if (w <= n)
                return self;
            jbuf b = {0};
            size_t at = s->n && (s->p[0] == '-' || s->p[0] == '+');
            jb_put(x, &b, s->p, at);
            for (int64_t i = n; i < w; i++)
                jb_putc(x, &b, '0');
            jb_put(x, &b, s->p + at, s->n - at);
            return jb_take(x, &b);
        }
        }
    } else if (self.t == JT_DICT) {
        switch (f->id) {
        case M_GET: {
            int64_t k = jd_find(self.u.d, arg(a, 0, NULL, jv_undef(NULL)));
            return k >= 0 ? self.u.d->v[k] : arg(a, 1, NULL, jv_none());
        }
        case M_ITEMS: return items_of(x, self);
        case M_KEYS: case M_VALUES: {
            jv r = jv_list(x, self.u.d->n);
            for (int64_t i = 0; i < self.u.d->n; i++)
                jl_push(x, r.u.l, f->id == M_KEYS ? self.u.d->k[i] : self.u.d->v[i]);
            return r;
        }
        case M_COPY: {
            jv r = jv_dict(x);
            for (int64_t i = 0; i < self.u.d->n; i++)
                jd_set(x, r.u.d, self.u.d->k[i], self.u.d->v[i]);
            return r;
        }
        }
    } else if (self.t == JT_LIST) {
        jv a0 = arg(a, 0, NULL, jv_undef(NULL));
        switch (f->id) {
        case M_LINDEX:
            for (int64_t i = 0; i < self.u.l->n; i++)
                if (jv_eq(self.u.l->v[i], a0))
                    return jv_int(i);
            jx_fail(x, "value is not in list");
        case M_LCOUNT: {
            int64_t k = 0;
            for (int64_t i = 0; i < self.u.l->n; i++)
                k += jv_eq(self.u.l->v[i], a0);
            return jv_int(k);
        }
        case M_COPY: {
            jv r = jv_list(x, self.u.l->n);
            for (int64_t i = 0; i < self.u.l->n; i++)
                jl_push(x, r.u.l, self.u.l->v[i]);
            return r;
        }
        }
    }
    jx_fail(x, "method %s is not supported", f->name);
}

/* ---- globals --------------------------------------------------------------------------------- */

enum { G_RANGE = 1, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME };

int jx_global(jctx *x, const char *name, jv *out)
{
    static const mdef g[] = {{"range", G_RANGE}, {"namespace", G_NAMESPACE}, {"dict", G_DICT},
                             {"raise_exception", G_RAISE}, {"strftime_now", G_STRFTIME},
                             {NULL, 0}};
    for (int i = 0; g[i].name; i++)
        if (!strcmp(g[i].name, name)) {
            out->t = JT_FUNC;
            out->u.fn = jx_alloc(x, sizeof(jfunc));
            memset(out->u.fn, 0, sizeof(jfunc));
            out->u.fn->kind = JF_GLOBAL;
            out->u.fn->name = g[i].name;
            out->u.fn->id = g[i].id;
            return 1;
        }
    return 0;
}

jv jx_call_global(jctx *x, const jfunc *f, const jargs *a)
{
    switch (f->id) {
    case G_RANGE: {
        int64_t start = 0, stop, step = 1;
        if (a->n == 1) {
            stop = need_int(x, a->v[0], "range");
        } else if (a->n == 2 || a->n == 3) {
            start = need_int(x, a->v[0], "range");
            stop = need_int(x, a->v[1], "range");
            if (a->n == 3)
                step = need_int(x, a->v[2], "range");
        } else {
            jx_fail(x, "range expected 1 to 3 arguments, got %d", a->n);
        }
        if (step == 0)
            jx_fail(x, "range() arg 3 must not be zero");
        __int128 count = step > 0 ? ((__int128)stop - start + step - 1) / step
                                  : ((__int128)start - stop - step - 1) / -step;
        if (count < 0)
            count = 0;
        if (count > 100000)
            jx_fail(x, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        jv r = jv_list(x, (int64_t)count);
        for (int64_t i = 0; i < (int64_t)count; i++)
            jl_push(x, r.u.l, jv_int(start + i * step));
        return r;
    }
    case G_NAMESPACE: case G_DICT: {
        jv d = jv_dict(x);
        if (a->n > 1)
            jx_fail(x, "%s expected at most 1 positional argument", f->name);
        if (a->n == 1) {
            jv init = a->v[0];
            if (init.t == JT_DICT || init.t == JT_NS) {
                for (int64_t i = 0; i < init.u.d->n; i++)
                    jd_set(x, d.u.d, init.u.d->k[i], init.u.d->v[i]);
            } else {
                jlist *l = jx_iter(x, init);
                for (int64_t i = 0; i < l->n; i++) {
                    jlist *kv = jx_iter(x, l->v[i]);
                    if (kv->n != 2)
                        jx_fail(x, "dictionary update sequence element #%lld has length %lld; 2 "
                                "is required", (long long)i, (long long)kv->n);
                    jd_set(x, d.u.d, kv->v[0], kv->v[1]);
                }
            }
        }
        for (int k = 0; k < a->nk; k++)
            jd_set(x, d.u.d, jv_str(x, a->kn[k]->p, a->kn[k]->n), a->kv[k]);
        if (f->id == G_NAMESPACE)
            d.t = JT_NS;
        return d;
    }
    case G_RAISE: {
        jv m = arg(a, 0, NULL, jv_str(x, "", 0));
        jx_fail(x, "%s", str_of(x, m).u.s->p);
    }
    case G_STRFTIME: {
        const jstr *fmt = need_str(x, arg(a, 0, NULL, jv_undef("strftime_now needs a format")),
                                   "strftime_now");
        time_t t = (time_t)x->now;
        struct tm tm;
        gmtime_r(&t, &tm);
        char out[512];
        size_t n = fmt->n ? strftime(out, sizeof out, fmt->p, &tm) : 0;
        if (fmt->n && n == 0)
            jx_fail(x, "strftime_now: the format gives more than %zu bytes", sizeof out);
        return jv_str(x, out, n);
    }
    }
    jx_fail(x, "unknown global");
}
