/* The Jinja evaluator: walks the tree of jinja_parse.c with Python's
 * semantics for values (jinja_value.c) and Jinja's for names and scopes:
 * `for` bodies and macro calls open a scope (a `set` inside does not leak
 * out; namespace() objects carry values across), `if` does not; a macro sees
 * the scope it was defined in as it is when called. Attribute access
 * prefers methods and item access prefers keys, as Jinja's getattr and
 * getitem do. Errors unwind to ms_jinja_render with the current line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/jinja_internal.h"

/* ---- names and scopes ------------------------------------------------------------- */

static jv lookup(jctx *x, const jstr *name)
{
    for (jscope *s = x->scope; s; s = s->parent) {
        jv *v = jd_get(&s->vars, name->p);
        if (v)
            return *v;
    }
    jv *g = jd_get(x->globals, name->p);
    if (g)
        return *g;
    jv b;
    if (jx_global(x, name->p, &b))
        return b;
    char *why = jx_alloc(x, name->n + 32);
    snprintf(why, name->n + 32, "'%s' is undefined", name->p);
    return jv_undef(why);
}

static void bind(jctx *x, jscope *s, const jstr *name, jv v)
{
    jv key = {.t = JT_STR};
    key.u.s = (jstr *)name;
    jd_set(x, &s->vars, key, v);
}

void jx_need(jctx *x, jv v)
{
    if (v.t == JT_UNDEF)
        jx_fail(x, "%s", v.u.why ? v.u.why : "a value is undefined");
}

static const char *type_repr(jv v, char *buf, size_t n)
{
    if (v.t == JT_NONE)
        return "None";
    snprintf(buf, n, "%s object", jv_type_name(v));
    return buf;
}

static jv no_attr(jctx *x, jv obj, const char *name, size_t n)
{
    char t[64];
    size_t cap = n + 96;
    char *why = jx_alloc(x, cap);
    snprintf(why, cap, "'%s' has no attribute '%.*s'", type_repr(obj, t, sizeof t), (int)n, name);
    return jv_undef(why);
}

/* ---- attributes and items -------------------------------------------------------------- */

static jv loop_attr(jctx *x, jloop *l, const char *name)
{
    int64_t i = l->index0, n = l->length;
    if (!strcmp(name, "index")) return jv_int(i + 1);
    if (!strcmp(name, "index0")) return jv_int(i);
    if (!strcmp(name, "revindex")) return jv_int(n - i);
    if (!strcmp(name, "revindex0")) return jv_int(n - i - 1);
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i == n - 1);
    if (!strcmp(name, "length")) return jv_int(n);
    if (!strcmp(name, "depth")) return jv_int(l->depth);
    if (!strcmp(name, "depth0")) return jv_int(l->depth - 1);
    if (!strcmp(name, "previtem"))
        return i > 0 ? l->items->v[i - 1] : jv_undef("there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? l->items->v[i + 1] : jv_undef("there is no next item");
    if (!strcmp(name, "cycle") || !strcmp(name, "changed")) {
        jv f = {.t = JT_FUNC};
        f.u.fn = jx_alloc(x, sizeof(jfunc));
        memset(f.u.fn, 0, sizeof(jfunc));
        f.u.fn->kind = name[1] == 'y' ? JF_CYCLE : JF_CHANGED;
        f.u.fn->name = name[1] == 'y' ? "loop.cycle" : "loop.changed";
        f.u.fn->self.t = JT_LOOP;
        f.u.fn->self.u.loop = l;
        return f;
    }
    jv self = {.t = JT_LOOP};
    self.u.loop = l;
    return no_attr(x, self, name, strlen(name));
}

jv jx_getattr(jctx *x, jv obj, const char *name, size_t n)
{
    jv m;
    switch (obj.t) {
    case JT_UNDEF:
        jx_need(x, obj);
        break;
    case JT_DICT:
        if (jx_method(x, obj, name, &m))
            return m;
        for (int64_t i = 0; i < obj.u.d->n; i++) {
            jv k = obj.u.d->k[i];
            if (k.t == JT_STR && k.u.s->n == n && !memcmp(k.u.s->p, name, n))
                return obj.u.d->v[i];
        }
        break;
    case JT_NS: {
        jv *v = jd_get(obj.u.d, name);
        if (v)
            return *v;
        break;
    }
    case JT_LOOP:
        return loop_attr(x, obj.u.loop, name);
    case JT_STR: case JT_LIST:
        if (jx_method(x, obj, name, &m))
            return m;
        break;
    default:
        break;
    }
    return no_attr(x, obj, name, n);
}

static int64_t as_index(jv k, int *ok)
{
    *ok = k.t == JT_INT || k.t == JT_BOOL;
    return *ok ? k.u.i : 0;
}

jv jx_getitem(jctx *x, jv obj, jv key)
{
    int ok;
    int64_t i = as_index(key, &ok);
    switch (obj.t) {
    case JT_UNDEF:
        jx_need(x, obj);
        break;
    case JT_DICT: {
        int64_t j = jd_find(obj.u.d, key);
        if (j >= 0)
            return obj.u.d->v[j];
        break;
    }
    case JT_LIST:
        if (ok) {
            int64_t n = obj.u.l->n;
            if (i < 0)
                i += n;
            if (i >= 0 && i < n)
                return obj.u.l->v[i];
            char *why = jx_alloc(x, 64);
            snprintf(why, 64, "list object has no element %lld", (long long)key.u.i);
            return jv_undef(why);
        }
        break;
    case JT_STR:
        if (ok) {
            int64_t n = ju_len(obj.u.s->p, obj.u.s->n);
            if (i < 0)
                i += n;
            if (i >= 0 && i < n) {
                size_t a = ju_offset(obj.u.s->p, obj.u.s->n, i);
                size_t b = ju_offset(obj.u.s->p, obj.u.s->n, i + 1);
                return jv_str(x, obj.u.s->p + a, b - a);
            }
            char *why = jx_alloc(x, 64);
            snprintf(why, 64, "str object has no element %lld", (long long)key.u.i);
            return jv_undef(why);
        }
        break;
    default:
        break;
    }
    if (key.t == JT_STR)
        return jx_getattr(x, obj, key.u.s->p, key.u.s->n);
    char t[64];
    jbuf b = {0};
    jb_puts(x, &b, type_repr(obj, t, sizeof t));
    jb_puts(x, &b, " has no element ");
    jv_repr(x, &b, key);
    return jv_undef(b.p);
}

/* Python's slice of a list or string. */
static jv slice(jctx *x, jv obj, jv lo, jv hi, jv st)
{
    jx_need(x, obj);
    int64_t n;
    if (obj.t == JT_LIST) n = obj.u.l->n;
    else if (obj.t == JT_STR) n = ju_len(obj.u.s->p, obj.u.s->n);
    else jx_fail(x, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t step = 1;
    if (st.t != JT_NONE && st.t != JT_UNDEF) {
        if (st.t != JT_INT && st.t != JT_BOOL)
            jx_fail(x, "slice indices must be integers or None");
        step = st.u.i;
        if (step == 0)
            jx_fail(x, "slice step cannot be zero");
    }
    int64_t a, b;
    jv ends[2] = {lo, hi};
    int64_t out[2];
    for (int e = 0; e < 2; e++) {
        jv v = ends[e];
        if (v.t == JT_NONE || v.t == JT_UNDEF) {
            out[e] = step < 0 ? (e == 0 ? n - 1 : -1) : (e == 0 ? 0 : n);
            if (step < 0 && e == 1)
                out[e] = INT64_MIN;  /* "before the start" */
            continue;
        }
        if (v.t != JT_INT && v.t != JT_BOOL)
            jx_fail(x, "slice indices must be integers or None");
        int64_t k = v.u.i;
        if (k < 0) {
            k += n;
            if (k < 0)
                k = step < 0 ? -1 : 0;
        } else if (k >= n) {
            k = step < 0 ? n - 1 : n;
        }
        out[e] = k;
    }
    a = out[0];
    b = out[1] == INT64_MIN ? -1 : out[1];
    if (obj.t == JT_LIST) {
        jv r = jv_list(x, 0);
        r.u.l->tuple = obj.u.l->tuple;
        for (int64_t i = a; step > 0 ? i < b : i > b; i += step)
            jl_push(x, r.u.l, obj.u.l->v[i]);
        return r;
    }
    /* strings: by code point */
    const char *s = obj.u.s->p;
    size_t len = obj.u.s->n;
    if (step == 1) {
        if (b <= a)
            return jv_str(x, "", 0);
        size_t p = ju_offset(s, len, a), q = ju_offset(s, len, b);
        return jv_str(x, s + p, q - p);
    }
    size_t *off = jx_alloc(x, (size_t)(n + 1) * sizeof *off);
    for (int64_t i = 0, o = 0; i <= n; i++) {
        off[i] = (size_t)o;
        if (i < n) {
            uint32_t cp;
            o += (int64_t)ju_next(s + o, len - (size_t)o, &cp);
        }
    }
    jbuf buf = {0};
    for (int64_t i = a; step > 0 ? i < b : i > b; i += step)
        jb_put(x, &buf, s + off[i], off[i + 1] - off[i]);
    return jb_take(x, &buf);
}

jlist *jx_iter(jctx *x, jv v)
{
    switch (v.t) {
    case JT_UNDEF: return jv_list(x, 0).u.l;
    case JT_LIST: return v.u.l;
    case JT_DICT: {
        jlist *l = jv_list(x, v.u.d->n).u.l;
        for (int64_t i = 0; i < v.u.d->n; i++)
            jl_push(x, l, v.u.d->k[i]);
        return l;
    }
    case JT_STR: {
        jlist *l = jv_list(x, 0).u.l;
        for (size_t i = 0; i < v.u.s->n;) {
            uint32_t cp;
            size_t k = ju_next(v.u.s->p + i, v.u.s->n - i, &cp);
            jl_push(x, l, jv_str(x, v.u.s->p + i, k));
            i += k;
        }
        return l;
    }
    default:
        jx_fail(x, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* ---- operators ---------------------------------------------------------------------- */

static _Noreturn void bad_operands(jctx *x, const char *op, jv a, jv b)
{
    jx_need(x, a);
    jx_need(x, b);
    if (!strcmp(op, "+") && a.t == JT_STR)
        jx_fail(x, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
    jx_fail(x, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a),
            jv_type_name(b));
}

static jv int_result(jctx *x, __int128 r)
{
    if (r > INT64_MAX || r < INT64_MIN)
        jx_fail(x, "integer result out of the 64-bit range");
    return jv_int((int64_t)r);
}

static jv repeat(jctx *x, jv seq, int64_t k)
{
    if (k < 0)
        k = 0;
    if (seq.t == JT_STR) {
        if (seq.u.s->n && (uint64_t)k > x->max_output / seq.u.s->n)
            jx_fail(x, "a repeated string passes the output limit");
        jbuf b = {0};
        for (int64_t i = 0; i < k; i++)
            jb_put(x, &b, seq.u.s->p, seq.u.s->n);
        return jb_take(x, &b);
    }
    if (seq.u.l->n && (uint64_t)k > (uint64_t)x->max_steps / (uint64_t)seq.u.l->n)
        jx_fail(x, "a repeated list is too long");
    jv r = jv_list(x, seq.u.l->n * k);
    r.u.l->tuple = seq.u.l->tuple;
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < seq.u.l->n; j++)
            jl_push(x, r.u.l, seq.u.l->v[j]);
    return r;
}

jv jx_percent_format(jctx *x, jv fmt, jv args);

static jv arith(jctx *x, int op, jv a, jv b)
{
    char ops[3] = {(char)op, 0, 0};
    if (op == 'f') strcpy(ops, "//");
    if (op == 'p') strcpy(ops, "**");
    if (op == '~') {
        jbuf r = {0};
        jv_print(x, &r, a);
        jv_print(x, &r, b);
        return jb_take(x, &r);
    }
    if (op == '%' && a.t == JT_STR)
        return jx_percent_format(x, a, b);
    int na = jv_is_num(a), nb = jv_is_num(b);
    if (op == '+') {
        if (a.t == JT_STR && b.t == JT_STR) {
            /* Markup + str escapes the str (and the sum stays Markup) */
            if (a.safe != b.safe) {
                jargs none = {0};
                if (a.safe) b = jx_filter(x, "escape", b, &none);
                else a = jx_filter(x, "escape", a, &none);
            }
            jbuf r = {0};
            jb_put(x, &r, a.u.s->p, a.u.s->n);
            jb_put(x, &r, b.u.s->p, b.u.s->n);
            jv sum = jb_take(x, &r);
            sum.safe = a.safe;
            return sum;
        }
        if (a.t == JT_LIST && b.t == JT_LIST && a.u.l->tuple == b.u.l->tuple) {
            jv r = jv_list(x, a.u.l->n + b.u.l->n);
            r.u.l->tuple = a.u.l->tuple;
            for (int64_t i = 0; i < a.u.l->n; i++)
                jl_push(x, r.u.l, a.u.l->v[i]);
            for (int64_t i = 0; i < b.u.l->n; i++)
                jl_push(x, r.u.l, b.u.l->v[i]);
            return r;
        }
    }
    if (op == '*') {
        if ((a.t == JT_STR || a.t == JT_LIST) && (b.t == JT_INT || b.t == JT_BOOL))
            return repeat(x, a, b.u.i);
        if ((b.t == JT_STR || b.t == JT_LIST) && (a.t == JT_INT || a.t == JT_BOOL))
            return repeat(x, b, a.u.i);
    }
    if (!na || !nb)
        bad_operands(x, ops, a, b);
    int ints = a.t != JT_FLOAT && b.t != JT_FLOAT;
    if (ints) {
        __int128 p = a.u.i, q = b.u.i;
        switch (op) {
        case '+': return int_result(x, p + q);
        case '-': return int_result(x, p - q);
        case '*': return int_result(x, p * q);
        case '/':
            if (q == 0)
                jx_fail(x, "division by zero");
            return jv_float((double)a.u.i / (double)b.u.i);
        case 'f': case '%': {
            if (q == 0)
                jx_fail(x, "integer division or modulo by zero");
            __int128 d = p / q, m = p % q;
            if (m != 0 && ((m < 0) != (q < 0))) {
                d -= 1;
                m += q;
            }
            return int_result(x, op == 'f' ? d : m);
        }
        case 'p': {
            if (q < 0)
                return jv_float(pow((double)p, (double)q));
            __int128 r = 1;
            for (int64_t i = 0; i < q; i++) {
                r *= p;
                if (r > INT64_MAX || r < INT64_MIN)
                    jx_fail(x, "integer result out of the 64-bit range");
                if (r == 0 || r == 1)
                    break;
            }
            if (p == -1)   /* the loop stops at r == 1 after two rounds: (-1) ** 3 */
                r = q % 2 ? -1 : 1;
            return int_result(x, r);
        }
        }
    }
    double p = jv_num(a), q = jv_num(b);
    switch (op) {
    case '+': return jv_float(p + q);
    case '-': return jv_float(p - q);
    case '*': return jv_float(p * q);
    case '/':
        if (q == 0)
            jx_fail(x, "float division by zero");
        return jv_float(p / q);
    case 'f': case '%': {
        if (q == 0)
            jx_fail(x, "float %s", op == 'f' ? "floor division by zero" : "modulo");
        /* Python's float divmod */
        double mod = fmod(p, q), div = (p - mod) / q;
        if (mod != 0) {
            if ((q < 0) != (mod < 0)) {
                mod += q;
                div -= 1.0;
            }
        } else {
            mod = copysign(0.0, q);
        }
        if (div != 0) {
            double fl = floor(div);
            if (div - fl > 0.5)
                fl += 1.0;
            div = fl;
        } else {
            div = copysign(0.0, p / q);
        }
        return jv_float(op == '%' ? mod : div);
    }
    case 'p': return jv_float(pow(p, q));
    }
    bad_operands(x, ops, a, b);
}

static int contains(jctx *x, jv hay, jv item)
{
    switch (hay.t) {
    case JT_UNDEF: return 0;
    case JT_STR:
        if (item.t != JT_STR) {
            jx_need(x, item);
            jx_fail(x, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        }
        if (item.u.s->n == 0)
            return 1;
        return memmem(hay.u.s->p, hay.u.s->n, item.u.s->p, item.u.s->n) != NULL;
    case JT_LIST:
        for (int64_t i = 0; i < hay.u.l->n; i++)
            if (jv_eq(hay.u.l->v[i], item))
                return 1;
        return 0;
    case JT_DICT:
        return jd_find(hay.u.d, item) >= 0;
    default:
        jx_fail(x, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

static int compare_op(jctx *x, int op, jv a, jv b)
{
    switch (op) {
    case C_EQ: return jv_eq(a, b);
    case C_NE: return !jv_eq(a, b);
    case C_LT: return jv_cmp(x, a, b) < 0;
    case C_LE: return jv_eq(a, b) || jv_cmp(x, a, b) <= 0;
    case C_GT: return jv_cmp(x, a, b) > 0;
    case C_GE: return jv_eq(a, b) || jv_cmp(x, a, b) >= 0;
    case C_IN: return contains(x, b, a);
    default: return !contains(x, b, a);
    }
}

/* ---- calls ------------------------------------------------------------------------------ */

typedef struct evargs {
    jv *v; int n;
    const jstr **kn; jv *kv; int nk;
} evargs;

static void eval_args(jctx *x, const jnode *n, evargs *a)
{
    a->v = jx_alloc(x, (size_t)(n->nkids + 1) * sizeof(jv));
    a->kv = jx_alloc(x, (size_t)(n->nkids + 1) * sizeof(jv));
    a->kn = jx_alloc(x, (size_t)(n->nkids + 1) * sizeof(jstr *));
    a->n = a->nk = 0;
    for (int i = 0; i < n->nkids; i++) {
        const jnode *k = n->kids[i];
        if (k->kind == N_KWARG) {
            a->kn[a->nk] = k->name;
            a->kv[a->nk++] = jx_eval(x, k->a);
        } else {
            a->v[a->n++] = jx_eval(x, k);
        }
    }
}

static jv call_macro(jctx *x, const jfunc *f, const jv *args, int nargs, const jstr *const *kwn,
                     const jv *kwv, int nkw)
{
    const jnode *m = f->macro;
    if (++x->depth > 100)
        jx_fail(x, "macro calls nested deeper than 100 (endless recursion?)");
    jscope *s = jx_alloc(x, sizeof *s);
    memset(s, 0, sizeof *s);
    s->parent = f->closure;
    jscope *saved = x->scope;
    jbuf *saved_out = x->out;
    int saved_line = x->line;
    x->scope = s;
    char *used = jx_alloc(x, (size_t)nkw + 1);
    memset(used, 0, (size_t)nkw + 1);
    for (int i = 0; i < m->nkids; i++) {
        const jnode *p = m->kids[i];
        jv v = jv_undef(NULL);
        int have = 0;
        if (i < nargs) {
            v = args[i];
            have = 1;
        }
        for (int k = 0; k < nkw; k++)
            if (!strcmp(kwn[k]->p, p->name->p)) {
                if (have)
                    jx_fail(x, "macro '%s' got multiple values for argument '%s'", f->name,
                            p->name->p);
                v = kwv[k];
                used[k] = have = 1;
            }
        if (!have) {
            if (p->kind == N_KWARG) {
                v = jx_eval(x, p->a);
            } else {
                char *why = jx_alloc(x, p->name->n + 80);
                snprintf(why, p->name->n + 80, "parameter '%s' was not provided", p->name->p);
                v = jv_undef(why);
            }
        }
        bind(x, s, p->name, v);
    }
    if (nargs > m->nkids && !(m->op & 1) && m->kind == N_MACRO)
        jx_fail(x, "macro '%s' takes not more than %d argument(s)", f->name, m->nkids);
    for (int k = 0; k < nkw; k++)
        if (!used[k] && !(m->op & 2) && m->kind == N_MACRO)
            jx_fail(x, "macro '%s' takes no keyword argument '%s'", f->name, kwn[k]->p);
    jv varargs = jv_list(x, 0), kwargs = jv_dict(x);
    varargs.u.l->tuple = 1;
    for (int i = m->nkids; i < nargs; i++)
        jl_push(x, varargs.u.l, args[i]);
    for (int k = 0; k < nkw; k++)
        if (!used[k])
            jd_set(x, kwargs.u.d, jv_str(x, kwn[k]->p, kwn[k]->n), kwv[k]);
    jd_setc(x, &s->vars, "varargs", varargs);
    jd_setc(x, &s->vars, "kwargs", kwargs);
    if (f->caller.t == JT_FUNC)
        jd_setc(x, &s->vars, "caller", f->caller);
    jbuf b = {0};
    x->out = &b;
    jx_exec(x, m->b);
    x->brk = 0;
    x->out = saved_out;
    x->scope = saved;
    x->line = saved_line;
    x->depth--;
    return jb_take(x, &b);
}

jv jx_call(jctx *x, jv fn, const jv *args, int nargs, const jstr *const *kwn, const jv *kwv,
           int nkw)
{
    jx_step(x);
    if (fn.t != JT_FUNC) {
        jx_need(x, fn);
        jx_fail(x, "'%s' object is not callable", jv_type_name(fn));
    }
    const jfunc *f = fn.u.fn;
    jargs a = {args, nargs, kwn, kwv, nkw};
    switch (f->kind) {
    case JF_MACRO: return call_macro(x, f, args, nargs, kwn, kwv, nkw);
    case JF_METHOD: return jx_call_method(x, f, &a);
    case JF_GLOBAL: return jx_call_global(x, f, &a);
    case JF_CYCLE: {
        if (nargs == 0)
            jx_fail(x, "no items for cycling given");
        return args[f->self.u.loop->index0 % nargs];
    }
    case JF_CHANGED: {
        jloop *l = f->self.u.loop;
        jv now = jv_list(x, nargs);
        now.u.l->tuple = 1;
        for (int i = 0; i < nargs; i++)
            jl_push(x, now.u.l, args[i]);
        if (l->has_changed && jv_eq(l->changed, now))
            return jv_bool(0);
        l->has_changed = 1;
        l->changed = now;
        return jv_bool(1);
    }
    }
    jx_fail(x, "not callable");
}

/* ---- expressions -------------------------------------------------------------------------- */

static jv eval_filter(jctx *x, const jnode *n, jv block_in)
{
    jv in;
    if (!n->a)
        in = block_in;
    else if (n->a->kind == N_FILTER)
        in = eval_filter(x, n->a, block_in);
    else
        in = jx_eval(x, n->a);
    evargs a;
    eval_args(x, n, &a);
    x->line = n->line;
    jargs ja = {a.v, a.n, a.kn, a.kv, a.nk};
    return jx_filter(x, n->name->p, in, &ja);
}

jv jx_eval(jctx *x, const jnode *n)
{
    jx_step(x);
    x->line = n->line;
    switch (n->kind) {
    case N_LIT:
        return n->lit;
    case N_NAME:
        return lookup(x, n->name);
    case N_LIST: case N_TUPLE: {
        jv l = jv_list(x, n->nkids);
        l.u.l->tuple = n->kind == N_TUPLE;
        for (int i = 0; i < n->nkids; i++)
            jl_push(x, l.u.l, jx_eval(x, n->kids[i]));
        return l;
    }
    case N_DICT: {
        jv d = jv_dict(x);
        for (int i = 0; i + 1 < n->nkids; i += 2) {
            jv k = jx_eval(x, n->kids[i]);
            if (k.t == JT_LIST && !k.u.l->tuple)
                jx_fail(x, "unhashable type: 'list'");
            if (k.t == JT_DICT)
                jx_fail(x, "unhashable type: 'dict'");
            jd_set(x, d.u.d, k, jx_eval(x, n->kids[i + 1]));
        }
        return d;
    }
    case N_ATTR: {
        jv o = jx_eval(x, n->a);
        x->line = n->line;
        return jx_getattr(x, o, n->name->p, n->name->n);
    }
    case N_INDEX: {
        jv o = jx_eval(x, n->a), k = jx_eval(x, n->b);
        x->line = n->line;
        return jx_getitem(x, o, k);
    }
    case N_SLICE: {
        jv o = jx_eval(x, n->a);
        jv lo = n->b ? jx_eval(x, n->b) : jv_none();
        jv hi = n->c ? jx_eval(x, n->c) : jv_none();
        jv st = n->d ? jx_eval(x, n->d) : jv_none();
        x->line = n->line;
        return slice(x, o, lo, hi, st);
    }
    case N_CALL: {
        jv f = jx_eval(x, n->a);
        evargs a;
        eval_args(x, n, &a);
        x->line = n->line;
        return jx_call(x, f, a.v, a.n, a.kn, a.kv, a.nk);
    }
    case N_FILTER:
        return eval_filter(x, n, jv_undef(NULL));
    case N_TEST: {
        jv in = jx_eval(x, n->a);
        evargs a;
        eval_args(x, n, &a);
        x->line = n->line;
        jargs ja = {a.v, a.n, a.kn, a.kv, a.nk};
        int r = jx_test(x, n->name->p, in, &ja);
        return jv_bool(n->op ? !r : r);
    }
    case N_NOT:
        return jv_bool(!jv_truthy(jx_eval(x, n->a)));
    case N_NEG: case N_POS: {
        jv v = jx_eval(x, n->a);
        x->line = n->line;
        if (!jv_is_num(v)) {
            jx_need(x, v);
            jx_fail(x, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+',
                    jv_type_name(v));
        }
        if (n->kind == N_POS)
            return v.t == JT_BOOL ? jv_int(v.u.i) : v;
        if (v.t == JT_FLOAT)
            return jv_float(-v.u.f);
        return int_result(x, -(__int128)v.u.i);
    }
    case N_BIN: {
        jv a = jx_eval(x, n->a), b = jx_eval(x, n->b);
        x->line = n->line;
        return arith(x, n->op, a, b);
    }
    case N_AND: {
        jv a = jx_eval(x, n->a);
        return jv_truthy(a) ? jx_eval(x, n->b) : a;
    }
    case N_OR: {
        jv a = jx_eval(x, n->a);
        return jv_truthy(a) ? a : jx_eval(x, n->b);
    }
    case N_CMP: {
        jv a = jx_eval(x, n->a);
        for (int i = 0; i + 1 < n->nkids; i += 2) {
            jv b = jx_eval(x, n->kids[i + 1]);
            x->line = n->kids[i]->line;
            if (!compare_op(x, n->kids[i]->op, a, b))
                return jv_bool(0);
            a = b;
        }
        return jv_bool(1);
    }
    case N_COND:
        if (jv_truthy(jx_eval(x, n->a)))
            return jx_eval(x, n->b);
        if (n->c)
            return jx_eval(x, n->c);
        return jv_undef("the inline if-expression evaluated to false and no else section was "
                        "defined.");
    default:
        jx_fail(x, "internal: node %d is not an expression", n->kind);
    }
}

/* ---- statements --------------------------------------------------------------------------- */

static void assign_all(jctx *x, const jnode *n, jv v);

static void assign(jctx *x, const jnode *t, jv v)
{
    if (t->kind == N_NAME) {
        bind(x, x->scope, t->name, v);
        return;
    }
    if (t->kind == N_TUPLE) {
        assign_all(x, t, v);
        return;
    }
    jv ns = lookup(x, t->a->name);
    if (ns.t != JT_NS)
        jx_fail(x, "cannot assign attribute on non-namespace object");
    jv key = {.t = JT_STR};
    key.u.s = t->name;
    jd_set(x, ns.u.d, key, v);
}

/* n->kids are the targets: one takes v, several unpack it */
static void assign_all(jctx *x, const jnode *n, jv v)
{
    if (n->nkids == 1 && n->kind != N_TUPLE) {
        assign(x, n->kids[0], v);
        return;
    }
    jlist *l = jx_iter(x, v);
    if (l->n != n->nkids)
        jx_fail(x, l->n > n->nkids ? "too many values to unpack (expected %d)"
                                   : "not enough values to unpack (expected %d, got %lld)",
                n->nkids, (long long)l->n);
    for (int i = 0; i < n->nkids; i++)
        assign(x, n->kids[i], l->v[i]);
}

static void exec_for(jctx *x, const jnode *n)
{
    jv seq = jx_eval(x, n->a);
    jlist *items = jx_iter(x, seq);
    jscope *s = jx_alloc(x, sizeof *s);
    memset(s, 0, sizeof *s);
    s->parent = x->scope;
    jscope *saved = x->scope;
    x->scope = s;
    if (n->d) {
        jlist *kept = jv_list(x, items->n).u.l;
        for (int64_t i = 0; i < items->n; i++) {
            assign_all(x, n, items->v[i]);
            if (jv_truthy(jx_eval(x, n->d)))
                jl_push(x, kept, items->v[i]);
        }
        items = kept;
        s->vars.n = 0;
    }
    jloop *lp = jx_alloc(x, sizeof *lp);
    memset(lp, 0, sizeof *lp);   /* has_changed must start at 0 (the region is not zeroed) */
    lp->items = items;
    lp->length = items->n;
    lp->depth = 1;
    for (jscope *o = saved; o; o = o->parent) {
        jv *outer = jd_get(&o->vars, "loop");
        if (outer && outer->t == JT_LOOP) {
            lp->depth = outer->u.loop->depth + 1;
            break;
        }
    }
    jv lv = {.t = JT_LOOP};
    lv.u.loop = lp;
    /* Each iteration starts from a fresh scope (a set in the body reads the
     * outer value again); the else block runs when no iteration ran to its
     * end, as Jinja compiles it (a break in the first one counts). */
    int completed = 0;
    for (int64_t i = 0; i < items->n; i++) {
        jx_step(x);
        s->vars.n = 0;
        lp->index0 = i;
        jd_setc(x, &s->vars, "loop", lv);
        assign_all(x, n, items->v[i]);
        jx_exec(x, n->b);
        if (x->brk == 1) {
            x->brk = 0;
            break;
        }
        if (x->brk == 0)
            completed = 1;
        x->brk = 0;
    }
    x->scope = saved;
    if (!completed && n->c)
        jx_exec(x, n->c);
}

static jv capture(jctx *x, const jnode *b)
{
    jbuf buf = {0};
    jbuf *saved = x->out;
    x->out = &buf;
    jx_exec(x, b);
    x->out = saved;
    return jb_take(x, &buf);
}

static jv new_macro(jctx *x, const jnode *n, const char *name, jv caller)
{
    jv f = {.t = JT_FUNC};
    f.u.fn = jx_alloc(x, sizeof(jfunc));
    memset(f.u.fn, 0, sizeof(jfunc));
    f.u.fn->kind = JF_MACRO;
    f.u.fn->name = name;
    f.u.fn->macro = n;
    f.u.fn->closure = x->scope;
    f.u.fn->caller = caller;
    return f;
}

void jx_exec(jctx *x, const jnode *n)
{
    jx_step(x);
    x->line = n->line;
    switch (n->kind) {
    case N_TEXT:
        jb_put(x, x->out, n->lit.u.s->p, n->lit.u.s->n);
        return;
    case N_OUT: {
        jv v = jx_eval(x, n->a);
        jv_print(x, x->out, v);
        return;
    }
    case N_BODY:
        for (int i = 0; i < n->nkids && !x->brk; i++)
            jx_exec(x, n->kids[i]);
        return;
    case N_IF:
        if (jv_truthy(jx_eval(x, n->a)))
            jx_exec(x, n->b);
        else if (n->c)
            jx_exec(x, n->c);
        return;
    case N_FOR:
        exec_for(x, n);
        return;
    case N_SET:
        assign_all(x, n, jx_eval(x, n->a));
        return;
    case N_SETBLOCK: {
        jv v = capture(x, n->b);
        if (n->a)
            v = eval_filter(x, n->a, v);
        bind(x, x->scope, n->name, v);
        return;
    }
    case N_MACRO:
        bind(x, x->scope, n->name, new_macro(x, n, n->name->p, jv_undef(NULL)));
        return;
    case N_CALLBLOCK: {
        const jnode *c = n->a;
        jv caller = new_macro(x, n, "caller", jv_undef(NULL));
        jv f = jx_eval(x, c->a);
        if (f.t == JT_FUNC && f.u.fn->kind == JF_MACRO) {
            jfunc *g = jx_alloc(x, sizeof *g);
            *g = *f.u.fn;
            g->caller = caller;
            f.u.fn = g;
        }
        evargs a;
        eval_args(x, c, &a);
        x->line = n->line;
        jv r = jx_call(x, f, a.v, a.n, a.kn, a.kv, a.nk);
        jv_print(x, x->out, r);
        return;
    }
    case N_FILTERBLOCK: {
        jv v = capture(x, n->b);
        jv_print(x, x->out, eval_filter(x, n->a, v));
        return;
    }
    case N_WITH: {
        jscope *s = jx_alloc(x, sizeof *s);
        memset(s, 0, sizeof *s);
        s->parent = x->scope;
        jv *vals = jx_alloc(x, (size_t)(n->nkids + 1) * sizeof *vals);
        for (int i = 0; i < n->nkids; i++)
            vals[i] = jx_eval(x, n->kids[i]->a);
        for (int i = 0; i < n->nkids; i++)
            bind(x, s, n->kids[i]->name, vals[i]);
        jscope *saved = x->scope;
        x->scope = s;
        jx_exec(x, n->b);
        x->scope = saved;
        return;
    }
    case N_BREAK:
        x->brk = 1;
        return;
    case N_CONTINUE:
        x->brk = 2;
        return;
    default:
        jx_fail(x, "internal: node %d is not a statement", n->kind);
    }
}

/* ---- entry point ------------------------------------------------------------------------------ */

typedef struct render {
    jctx x;
    jregion r;
    jbuf out;
    jscope root;
} render;

int ms_jinja_render(const ms_jinja *t, const json_t *vars, const ms_jinja_env *env, char **out,
                    size_t *len, ms_err *err)
{
    *out = NULL;
    if (len)
        *len = 0;
    if (vars && !json_is_object(vars))
        return ms_err_set(err, MS_E_ARG, "%s: the template variables must be a JSON object",
                          t->name);
    render *rs = calloc(1, sizeof *rs);
    if (!rs)
        return ms_err_set(err, MS_E_NOMEM, "out of memory rendering %s", t->name);
    jctx *x = &rs->x;
    x->r = &rs->r;
    x->err = err;
    x->name = t->name;
    x->max_steps = env && env->max_steps > 0 ? env->max_steps : 500000000;
    x->max_output = env && env->max_output > 0 ? env->max_output : (size_t)256 << 20;
    x->now = env ? env->now : 0;
    x->scope = &rs->root;
    x->out = &rs->out;
    if (setjmp(x->fail)) {
        jr_free(&rs->r);
        free(rs);
        return -1;
    }
    jv g = vars ? jv_from_json(x, vars) : jv_dict(x);
    x->globals = g.u.d;
    jx_exec(x, t->root);
    char *s = malloc(rs->out.n + 1);
    if (!s) {
        jr_free(&rs->r);
        free(rs);
        return ms_err_set(err, MS_E_NOMEM, "out of memory rendering %s", t->name);
    }
    if (rs->out.n)
        memcpy(s, rs->out.p, rs->out.n);
    s[rs->out.n] = 0;
    *out = s;
    if (len)
        *len = rs->out.n;
    jr_free(&rs->r);
    free(rs);
    return 0;
}
