/* The Jinja lexer and parser: template text to the tree of jinja_internal.h.
 *
 * The lexer follows Jinja 3's (jinja2/lexer.py) with trim_blocks and
 * lstrip_blocks on, as transformers configures it: newlines normalized to
 * "\n" and one trailing newline dropped; "{%-"/"{{-"/"{#-" strip the
 * whitespace before a tag, "-%}"/"-}}"/"-#}" the whitespace after it; a
 * block or comment tag alone on its line after spaces takes those spaces
 * (unless "{%+"), and the newline right after "%}" or "#}" goes (unless
 * "+%}"). Inside "{{ }}" and "{% %}" a closing tag only counts outside
 * brackets, so "{{ {'a': 1}}}" works. The parser follows jinja2/parser.py's
 * precedence: conditional, or, and, not, comparisons, + -, ~, * / // %, **,
 * unary, then postfix (.a [i] (args)) and filters / tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/jinja_internal.h"
#include "runtime/tokenizer.h"

enum { T_EOF, T_TEXT, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };

typedef struct tok {
    uint8_t t;
    int line;
    const char *s;   /* T_NAME, T_OP: the source text; T_TEXT: the text */
    size_t n;
    jstr *str;       /* T_STR: the unescaped string; T_TEXT: the text */
    int64_t i;
    double f;
} tok;

typedef struct parser {
    tok *t;
    int nt, cap, i;
    jregion *r;
    ms_err *err;
    const char *name;
    jmp_buf fail;
    int depth;
    int line;
    int loops;       /* for bodies around the statement being parsed (break / continue) */
    int cond;        /* if / conditional expressions around it (unknown filters wait) */
} parser;

static _Noreturn void pfail(parser *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static _Noreturn void pfail(parser *p, int line, const char *fmt, ...)
{
    char msg[sizeof p->err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ms_err_set(p->err, MS_E_ARG, "%s, line %d: %s", p->name, line, msg);
    longjmp(p->fail, 1);
}

static void *palloc(parser *p, size_t n)
{
    void *q = jr_alloc(p->r, n);
    if (!q)
        pfail(p, p->line, "out of memory while parsing");
    memset(q, 0, n);
    return q;
}

static jstr *pstr(parser *p, const char *s, size_t n)
{
    jstr *j = js_new(p->r, s, n);
    if (!j)
        pfail(p, p->line, "out of memory while parsing");
    return j;
}

/* ---- lexer ------------------------------------------------------------------------ */

static tok *emit(parser *p, int t, int line)
{
    if (p->nt == p->cap) {
        int cap = p->cap ? p->cap * 2 : 256;
        tok *q = realloc(p->t, (size_t)cap * sizeof *q);
        if (!q)
            pfail(p, line, "out of memory while parsing");
        p->t = q;
        p->cap = cap;
    }
    tok *k = &p->t[p->nt++];
    memset(k, 0, sizeof *k);
    k->t = (uint8_t)t;
    k->line = line;
    return k;
}

static void emit_text(parser *p, const char *s, size_t n, int line)
{
    if (n == 0)
        return;
    tok *k = emit(p, T_TEXT, line);
    k->str = pstr(p, s, n);
}

/* Python whitespace (str.isspace) at s[i], its length in bytes, or 0. */
static size_t space_at(const char *s, size_t n, size_t i)
{
    uint32_t cp;
    size_t k = ju_next(s + i, n - i, &cp);
    return ju_isspace(cp) ? k : 0;
}

/* Length of s without its trailing Python whitespace (str.rstrip()). */
static size_t rstrip_len(const char *s, size_t n)
{
    size_t end = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = ju_next(s + i, n - i, &cp);
        i += k;
        if (!ju_isspace(cp))
            end = i;
    }
    return end;
}

static size_t skip_space(const char *s, size_t n, size_t i)
{
    size_t k;
    while (i < n && (k = space_at(s, n, i)))
        i += k;
    return i;
}

static int count_lines(const char *s, size_t a, size_t b)
{
    int k = 0;
    for (size_t i = a; i < b; i++)
        k += s[i] == '\n';
    return k;
}

/* The text before a tag, as the tag's sign and lstrip_blocks leave it. */
static size_t lead_text(const char *s, size_t from, size_t to, char sign, int block_like,
                        int line_starting)
{
    size_t n = to - from;
    if (sign == '-')
        return rstrip_len(s + from, n);
    if (sign != '+' && block_like) {
        size_t l = n;
        while (l > 0 && s[from + l - 1] != '\n')
            l--;
        if (l > 0 || line_starting) {
            size_t e = skip_space(s + from, n, l);
            if (e == n && l < n)
                return l;
        }
    }
    return n;
}

/* Python's unicode-escape reading of a string literal's body. */
static jstr *unescape(parser *p, const char *s, size_t n, int line)
{
    char *o = palloc(p, n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) {
            o[m++] = s[i];
            continue;
        }
        char c = s[++i];
        uint32_t cp = 0;
        int hex = 0;
        switch (c) {
        case '\n': continue;
        case '\\': o[m++] = '\\'; continue;
        case '\'': o[m++] = '\''; continue;
        case '"': o[m++] = '"'; continue;
        case 'a': o[m++] = '\a'; continue;
        case 'b': o[m++] = '\b'; continue;
        case 'f': o[m++] = '\f'; continue;
        case 'n': o[m++] = '\n'; continue;
        case 'r': o[m++] = '\r'; continue;
        case 't': o[m++] = '\t'; continue;
        case 'v': o[m++] = '\v'; continue;
        case 'x': hex = 2; break;
        case 'u': hex = 4; break;
        case 'U': hex = 8; break;
        default:
            if (c >= '0' && c <= '7') {
                int k = 0;
                while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7')
                    cp = cp * 8 + (uint32_t)(s[i++] - '0'), k++;
                i--;
                break;
            }
            o[m++] = '\\';
            o[m++] = c;
            continue;
        }
        for (int k = 0; k < hex; k++) {
            char h = ++i < n ? s[i] : 0;
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0)
                pfail(p, line, "truncated \\%c escape in a string literal", c);
            cp = cp * 16 + (uint32_t)d;
        }
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            pfail(p, line, "escape \\%c in a string literal gives no Unicode character", c);
        m += ms_utf8_put((uint8_t *)o + m, cp);
    }
    return pstr(p, o, m);
}

static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
static const char ops1[] = "+-/*%~[](){}<>=.:|,;";

/* Lexes the inside of a {{ }} or {% %} from s[i]; returns the index after
 * the closing tag (its trailing whitespace handled) and sets *ls. */
static size_t lex_tag(parser *p, const char *s, size_t n, size_t i, int block, int *line, int *ls)
{
    int depth = 0;
    for (;;) {
        size_t j = skip_space(s, n, i);
        *line += count_lines(s, i, j);
        i = j;
        if (i >= n)
            pfail(p, *line, "unexpected end of template inside %s", block ? "a {% %} tag" : "{{ }}");
        if (depth == 0) {
            const char *end = block ? "%}" : "}}";
            char sign = s[i];
            size_t at = (sign == '-' || (sign == '+' && block)) ? i + 1 : i;
            if (at + 1 < n && s[at] == end[0] && s[at + 1] == end[1]) {
                emit(p, block ? T_BEND : T_VEND, *line);
                size_t e = at + 2;
                if (at != i && sign == '-') {
                    size_t f = skip_space(s, n, e);
                    *line += count_lines(s, e, f);
                    e = f;
                } else if (block && at == i && e < n && s[e] == '\n') {
                    e++;
                    (*line)++;
                }
                *ls = e > 0 && s[e - 1] == '\n';
                return e;
            }
        }
        char c = s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t j2 = i;
            while (j2 < n && ((s[j2] >= 'a' && s[j2] <= 'z') || (s[j2] >= 'A' && s[j2] <= 'Z') ||
                              (s[j2] >= '0' && s[j2] <= '9') || s[j2] == '_'))
                j2++;
            tok *k = emit(p, T_NAME, *line);
            k->s = s + i;
            k->n = j2 - i;
            i = j2;
        } else if (c >= '0' && c <= '9') {
            size_t j2 = i;
            int is_float = 0;
            while (j2 < n && ((s[j2] >= '0' && s[j2] <= '9') || (s[j2] == '_' && j2 + 1 < n &&
                              s[j2 + 1] >= '0' && s[j2 + 1] <= '9')))
                j2++;
            int after_dot = i > 0 && s[i - 1] == '.';
            if (!after_dot && j2 + 1 < n && s[j2] == '.' && s[j2 + 1] >= '0' && s[j2 + 1] <= '9') {
                is_float = 1;
                j2++;
                while (j2 < n && ((s[j2] >= '0' && s[j2] <= '9') || s[j2] == '_'))
                    j2++;
            }
            if (!after_dot && j2 < n && (s[j2] == 'e' || s[j2] == 'E')) {
                size_t e = j2 + 1;
                if (e < n && (s[e] == '+' || s[e] == '-'))
                    e++;
                if (e < n && s[e] >= '0' && s[e] <= '9') {
                    is_float = 1;
                    j2 = e;
                    while (j2 < n && ((s[j2] >= '0' && s[j2] <= '9') || s[j2] == '_'))
                        j2++;
                }
            }
            /* the literal without its underscores, whatever its length (a
             * fixed buffer had been written one byte past its end by a float
             * of 63 digits before its point; found by a libFuzzer run) */
            tok *k = emit(p, is_float ? T_FLOAT : T_INT, *line);
            char small[64], *num = j2 - i < sizeof small ? small : malloc(j2 - i + 1);
            if (!num)
                pfail(p, *line, "out of memory reading a numeric literal");
            size_t m = 0;
            for (size_t q = i; q < j2; q++)
                if (s[q] != '_')
                    num[m++] = s[q];
            num[m] = 0;
            unsigned long long v = 0;
            if (is_float)
                k->f = strtod(num, NULL);
            else
                v = strtoull(num, NULL, 10);
            int too_large = !is_float && (m > 19 || v > INT64_MAX);
            char shown[48]; /* what the refusal quotes, num being freed first */
            if (too_large)
                snprintf(shown, sizeof shown, "%.40s%s", num, m > 40 ? "..." : "");
            if (num != small)
                free(num);
            if (too_large)
                pfail(p, *line, "integer literal %s is too large", shown);
            if (!is_float)
                k->i = (int64_t)v;
            i = j2;
        } else if (c == '\'' || c == '"') {
            size_t j2 = i + 1;
            int l0 = *line;
            while (j2 < n && s[j2] != c) {
                if (s[j2] == '\\' && j2 + 1 < n)
                    j2++;
                j2++;
            }
            if (j2 >= n)
                pfail(p, l0, "unterminated string literal");
            tok *k = emit(p, T_STR, l0);
            k->str = unescape(p, s + i + 1, j2 - i - 1, l0);
            *line += count_lines(s, i, j2);
            i = j2 + 1;
        } else {
            size_t len = 0;
            for (int o = 0; ops2[o]; o++)
                if (i + 1 < n && s[i] == ops2[o][0] && s[i + 1] == ops2[o][1])
                    len = 2;
            if (!len && strchr(ops1, c))
                len = 1;
            if (!len)
                pfail(p, *line, "unexpected character '%c'", c);
            if (c == '(' || c == '[' || c == '{')
                depth++;
            else if (c == ')' || c == ']' || c == '}') {
                if (depth == 0)
                    pfail(p, *line, "unexpected '%c'", c);
                depth--;
            }
            tok *k = emit(p, T_OP, *line);
            k->s = s + i;
            k->n = len;
            i += len;
        }
    }
}

/* Matches "{%[-+]? raw [-+]?%}" (or endraw) at s[i]; returns the end or 0. */
static size_t raw_tag(const char *s, size_t n, size_t i, const char *word, char *sign, char *esign)
{
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%')
        return 0;
    size_t j = i + 2;
    *sign = j < n && (s[j] == '-' || s[j] == '+') ? s[j++] : 0;
    j = skip_space(s, n, j);
    size_t w = strlen(word);
    if (j + w > n || memcmp(s + j, word, w))
        return 0;
    j = skip_space(s, n, j + w);
    *esign = j < n && (s[j] == '-' || s[j] == '+') ? s[j++] : 0;
    if (j + 2 > n || s[j] != '%' || s[j + 1] != '}')
        return 0;
    return j + 2;
}

static size_t after_block_end(const char *s, size_t n, size_t e, char esign, int *line)
{
    if (esign == '-') {
        size_t f = skip_space(s, n, e);
        *line += count_lines(s, e, f);
        return f;
    }
    if (esign != '+' && e < n && s[e] == '\n') {
        (*line)++;
        return e + 1;
    }
    return e;
}

static void lex(parser *p, const char *s, size_t n)
{
    size_t i = 0;
    int line = 1, ls = 1;
    while (i < n) {
        size_t t = i;
        while (t + 1 < n && !(s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#')))
            t++;
        if (t + 1 >= n) {
            emit_text(p, s + i, n - i, line);
            return;
        }
        char kind = s[t + 1], sign = 0, esign = 0;
        if (t + 2 < n && (s[t + 2] == '-' || s[t + 2] == '+'))
            sign = s[t + 2];
        size_t raw_end = kind == '%' ? raw_tag(s, n, t, "raw", &sign, &esign) : 0;
        size_t keep = lead_text(s, i, t, sign, kind != '{', ls);
        emit_text(p, s + i, keep, line);
        line += count_lines(s, i, t);
        ls = 0;
        if (raw_end) {
            /* trim_blocks does not apply after {% raw %}, only a '-' does */
            size_t e = esign == '-' ? after_block_end(s, n, raw_end, esign, &line) : raw_end;
            size_t j = e;
            char s2 = 0, es2 = 0;
            size_t end = 0;
            for (; j < n; j++)
                if (s[j] == '{' && (end = raw_tag(s, n, j, "endraw", &s2, &es2)))
                    break;
            if (!end)
                pfail(p, line, "missing {%% endraw %%}");
            size_t body = lead_text(s, e, j, s2, 1, 0);
            emit_text(p, s + e, body, line);
            line += count_lines(s, e, j);
            i = after_block_end(s, n, end, es2, &line);
            ls = i > 0 && s[i - 1] == '\n';
            continue;
        }
        size_t j = t + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t c = j;
            while (c + 1 < n && !(s[c] == '#' && s[c + 1] == '}'))
                c++;
            if (c + 1 >= n)
                pfail(p, line, "missing end of comment tag");
            char cs = c > j && (s[c - 1] == '-' || s[c - 1] == '+') ? s[c - 1] : 0;
            line += count_lines(s, j, c);
            i = after_block_end(s, n, c + 2, cs, &line);
            ls = i > 0 && s[i - 1] == '\n';
            continue;
        }
        emit(p, kind == '%' ? T_BBEGIN : T_VBEGIN, line);
        i = lex_tag(p, s, n, j, kind == '%', &line, &ls);
    }
}

/* ---- parser -------------------------------------------------------------------------- */

static tok *cur(parser *p) { return &p->t[p->i]; }

static int is_op(const tok *k, const char *op)
{
    return k->t == T_OP && k->n == strlen(op) && !memcmp(k->s, op, k->n);
}

static int is_name(const tok *k, const char *w)
{
    return k->t == T_NAME && k->n == strlen(w) && !memcmp(k->s, w, k->n);
}

static const char *describe(const tok *k, char *buf, size_t n)
{
    switch (k->t) {
    case T_EOF: return "end of template";
    case T_BEND: return "end of statement block";
    case T_VEND: return "end of print statement";
    case T_STR: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    case T_NAME: case T_OP: snprintf(buf, n, "'%.*s'", (int)k->n, k->s); return buf;
    default: return "text";
    }
}

static _Noreturn void unexpected(parser *p, const char *want)
{
    char b[80];
    pfail(p, cur(p)->line, "expected %s, got %s", want, describe(cur(p), b, sizeof b));
}

static void expect_op(parser *p, const char *op)
{
    if (!is_op(cur(p), op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        unexpected(p, w);
    }
    p->i++;
}

static jstr *expect_name(parser *p)
{
    if (cur(p)->t != T_NAME)
        unexpected(p, "a name");
    tok *k = &p->t[p->i++];
    return pstr(p, k->s, k->n);
}

static jnode *node(parser *p, int kind, int line)
{
    jnode *n = palloc(p, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = line;
    p->line = line;
    return n;
}

typedef struct kids { jnode **v; int n, cap; } kids;

static void push(parser *p, kids *k, jnode *n)
{
    if (k->n == k->cap) {
        int cap = k->cap ? k->cap * 2 : 4;
        jnode **v = palloc(p, (size_t)cap * sizeof *v);
        if (k->n)
            memcpy(v, k->v, (size_t)k->n * sizeof *v);
        k->v = v;
        k->cap = cap;
    }
    k->v[k->n++] = n;
}

static void set_kids(jnode *n, const kids *k)
{
    n->kids = k->v;
    n->nkids = k->n;
}

static jnode *expr(parser *p, int with_cond);
static jnode *unary(parser *p, int with_filter);
static jnode *primary(parser *p);
static jnode *postfix(parser *p, jnode *n);
static jnode *filter_expr(parser *p, jnode *n);

static void enter(parser *p)
{
    if (++p->depth > 200)
        pfail(p, cur(p)->line, "expression nested deeper than 200");
}

/* (args) after '(' : positional then name=value */
static void call_args(parser *p, jnode *call)
{
    kids k = {0};
    expect_op(p, "(");
    while (!is_op(cur(p), ")")) {
        if (k.n)
            expect_op(p, ",");
        if (is_op(cur(p), ")"))
            break;
        if (is_op(cur(p), "*") || is_op(cur(p), "**"))
            pfail(p, cur(p)->line, "*args and **kwargs in calls are not supported");
        if (cur(p)->t == T_NAME && is_op(&p->t[p->i + 1], "=")) {
            jnode *kw = node(p, N_KWARG, cur(p)->line);
            kw->name = expect_name(p);
            p->i++;
            kw->a = expr(p, 1);
            push(p, &k, kw);
        } else {
            if (k.n && k.v[k.n - 1]->kind == N_KWARG)
                pfail(p, cur(p)->line, "positional argument follows keyword argument");
            push(p, &k, expr(p, 1));
        }
    }
    p->i++;
    set_kids(call, &k);
}

static jstr *dotted_name(parser *p)
{
    jstr *s = expect_name(p);
    while (is_op(cur(p), ".") && p->t[p->i + 1].t == T_NAME) {
        p->i++;
        jstr *t = expect_name(p);
        char *b = palloc(p, s->n + t->n + 2);
        memcpy(b, s->p, s->n);
        b[s->n] = '.';
        memcpy(b + s->n + 1, t->p, t->n);
        s = pstr(p, b, s->n + t->n + 1);
    }
    return s;
}

static jnode *filter_one(parser *p, jnode *in)
{
    jnode *f = node(p, N_FILTER, cur(p)->line);
    f->a = in;
    f->name = dotted_name(p);
    if (!p->cond && !jx_has_filter(f->name->p))
        pfail(p, f->line, "No filter named '%s'.", f->name->p);
    if (is_op(cur(p), "("))
        call_args(p, f);
    return f;
}

static jnode *filter_expr(parser *p, jnode *n)
{
    for (;;) {
        tok *k = cur(p);
        if (is_op(k, "|")) {
            p->i++;
            n = filter_one(p, n);
        } else if (is_name(k, "is")) {
            p->i++;
            jnode *t = node(p, N_TEST, k->line);
            t->a = n;
            if (is_name(cur(p), "not")) {
                p->i++;
                t->op = 1;
            }
            t->name = dotted_name(p);
            if (!p->cond && !jx_has_test(t->name->p))
                pfail(p, t->line, "No test named '%s'.", t->name->p);
            tok *c = cur(p);
            if (is_op(c, "(")) {
                call_args(p, t);
            } else if ((c->t == T_NAME || c->t == T_STR || c->t == T_INT || c->t == T_FLOAT ||
                        is_op(c, "[") || is_op(c, "{")) &&
                       !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                if (is_name(c, "is"))
                    pfail(p, c->line, "You cannot chain multiple tests with is");
                kids a = {0};
                push(p, &a, postfix(p, primary(p)));
                set_kids(t, &a);
            }
            n = t;
        } else if (is_op(k, "(")) {
            jnode *c = node(p, N_CALL, k->line);
            c->a = n;
            call_args(p, c);
            n = c;
        } else {
            return n;
        }
    }
}

static jnode *subscript(parser *p, jnode *n)
{
    tok *k = cur(p);
    if (is_op(k, ".")) {
        p->i++;
        tok *a = cur(p);
        if (a->t == T_NAME) {
            jnode *g = node(p, N_ATTR, k->line);
            g->a = n;
            g->name = expect_name(p);
            return g;
        }
        if (a->t == T_INT) {
            p->i++;
            jnode *g = node(p, N_INDEX, k->line);
            g->a = n;
            g->b = node(p, N_LIT, a->line);
            g->b->lit = jv_int(a->i);
            return g;
        }
        unexpected(p, "a name or number after '.'");
    }
    p->i++; /* '[' */
    kids items = {0};
    jnode *slice = NULL;
    for (;;) {
        jnode *parts[3] = {NULL, NULL, NULL};
        int np = 0, colon = 0;
        for (;;) {
            if (is_op(cur(p), ":")) {
                p->i++;
                colon = 1;
                if (++np > 2)
                    pfail(p, cur(p)->line, "too many ':' in a slice");
                continue;
            }
            if (is_op(cur(p), "]") || is_op(cur(p), ","))
                break;
            if (parts[np])
                unexpected(p, "':' or ']'");
            parts[np] = expr(p, 1);
        }
        jnode *it;
        if (colon) {
            it = node(p, N_SLICE, k->line);
            it->b = parts[0];
            it->c = parts[1];
            it->d = parts[2];
            slice = it;
        } else {
            if (!parts[0])
                unexpected(p, "an expression");
            it = parts[0];
        }
        push(p, &items, it);
        if (is_op(cur(p), ",")) {
            p->i++;
            continue;
        }
        break;
    }
    expect_op(p, "]");
    if (items.n > 1 && slice)   /* x[1:2, 3]: no slice values (the slice's a would stay NULL) */
        pfail(p, k->line, "a slice inside a tuple subscript is not supported");
    if (items.n == 1 && slice) {
        slice->a = n;
        return slice;
    }
    jnode *g = node(p, N_INDEX, k->line);
    g->a = n;
    if (items.n == 1) {
        g->b = items.v[0];
    } else {
        g->b = node(p, N_TUPLE, k->line);
        set_kids(g->b, &items);
    }
    return g;
}

static jnode *postfix(parser *p, jnode *n)
{
    for (;;) {
        tok *k = cur(p);
        if (is_op(k, ".") || is_op(k, "[")) {
            n = subscript(p, n);
        } else if (is_op(k, "(")) {
            jnode *c = node(p, N_CALL, k->line);
            c->a = n;
            call_args(p, c);
            n = c;
        } else {
            return n;
        }
    }
}

/* a tuple (or single expression) up to a closing token */
static jnode *tuple(parser *p, int with_cond, int explicit_parens)
{
    int line = cur(p)->line;
    kids k = {0};
    int comma = 0;
    for (;;) {
        tok *c = cur(p);
        if (k.n && (c->t == T_BEND || c->t == T_VEND || is_op(c, ")") || is_op(c, "]") ||
                    is_op(c, "}") || is_name(c, "in") || is_name(c, "recursive") ||
                    (!with_cond && is_name(c, "if"))))
            break;
        if (explicit_parens && is_op(c, ")") && !k.n)
            break;
        push(p, &k, expr(p, with_cond));
        if (!is_op(cur(p), ","))
            break;
        p->i++;
        comma = 1;
    }
    if (k.n == 1 && !comma)
        return k.v[0];
    if (!k.n && !explicit_parens)
        unexpected(p, "an expression");
    jnode *t = node(p, N_TUPLE, line);
    set_kids(t, &k);
    return t;
}

static jnode *primary(parser *p)
{
    tok *k = cur(p);
    enter(p);
    jnode *n;
    if (k->t == T_NAME) {
        p->i++;
        n = node(p, N_LIT, k->line);
        if (is_name(k, "true") || is_name(k, "True")) n->lit = jv_bool(1);
        else if (is_name(k, "false") || is_name(k, "False")) n->lit = jv_bool(0);
        else if (is_name(k, "none") || is_name(k, "None")) n->lit = jv_none();
        else {
            n->kind = N_NAME;
            n->name = pstr(p, k->s, k->n);
        }
    } else if (k->t == T_STR) {
        /* adjacent literals join, as in Python */
        size_t total = 0;
        int j = p->i;
        while (p->t[j].t == T_STR)
            total += p->t[j++].str->n;
        char *b = palloc(p, total + 1);
        size_t m = 0;
        while (cur(p)->t == T_STR) {
            memcpy(b + m, cur(p)->str->p, cur(p)->str->n);
            m += cur(p)->str->n;
            p->i++;
        }
        n = node(p, N_LIT, k->line);
        n->lit.t = JT_STR;
        n->lit.u.s = pstr(p, b, m);
    } else if (k->t == T_INT || k->t == T_FLOAT) {
        p->i++;
        n = node(p, N_LIT, k->line);
        n->lit = k->t == T_INT ? jv_int(k->i) : jv_float(k->f);
    } else if (is_op(k, "(")) {
        p->i++;
        n = tuple(p, 1, 1);
        expect_op(p, ")");
    } else if (is_op(k, "[")) {
        p->i++;
        n = node(p, N_LIST, k->line);
        kids items = {0};
        while (!is_op(cur(p), "]")) {
            if (items.n)
                expect_op(p, ",");
            if (is_op(cur(p), "]"))
                break;
            push(p, &items, expr(p, 1));
        }
        p->i++;
        set_kids(n, &items);
    } else if (is_op(k, "{")) {
        p->i++;
        n = node(p, N_DICT, k->line);
        kids items = {0};
        while (!is_op(cur(p), "}")) {
            if (items.n)
                expect_op(p, ",");
            if (is_op(cur(p), "}"))
                break;
            push(p, &items, expr(p, 1));
            expect_op(p, ":");
            push(p, &items, expr(p, 1));
        }
        p->i++;
        set_kids(n, &items);
    } else {
        unexpected(p, "an expression");
    }
    p->depth--;
    return n;
}

static jnode *unary(parser *p, int with_filter)
{
    tok *k = cur(p);
    enter(p);
    jnode *n;
    if (is_op(k, "-") || is_op(k, "+")) {
        p->i++;
        n = node(p, is_op(k, "-") ? N_NEG : N_POS, k->line);
        n->a = unary(p, 0);
    } else {
        n = primary(p);
    }
    n = postfix(p, n);
    if (with_filter)
        n = filter_expr(p, n);
    p->depth--;
    return n;
}

static jnode *binary(parser *p, jnode *a, int op, jnode *b, int line)
{
    jnode *n = node(p, N_BIN, line);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *power(parser *p)
{
    jnode *n = unary(p, 1);
    while (is_op(cur(p), "**")) {
        int line = cur(p)->line;
        p->i++;
        n = binary(p, n, 'p', unary(p, 1), line);
    }
    return n;
}

static jnode *math2(parser *p)
{
    jnode *n = power(p);
    for (;;) {
        tok *k = cur(p);
        int op = is_op(k, "*") ? '*' : is_op(k, "/") ? '/' : is_op(k, "//") ? 'f'
               : is_op(k, "%") ? '%' : 0;
        if (!op)
            return n;
        p->i++;
        n = binary(p, n, op, power(p), k->line);
    }
}

static jnode *concat(parser *p)
{
    jnode *n = math2(p);
    while (is_op(cur(p), "~")) {
        int line = cur(p)->line;
        p->i++;
        n = binary(p, n, '~', math2(p), line);
    }
    return n;
}

static jnode *math1(parser *p)
{
    jnode *n = concat(p);
    for (;;) {
        tok *k = cur(p);
        int op = is_op(k, "+") ? '+' : is_op(k, "-") ? '-' : 0;
        if (!op)
            return n;
        p->i++;
        n = binary(p, n, op, concat(p), k->line);
    }
}

static jnode *compare(parser *p)
{
    jnode *first = math1(p);
    kids k = {0};
    for (;;) {
        tok *t = cur(p);
        int op = is_op(t, "==") ? C_EQ : is_op(t, "!=") ? C_NE : is_op(t, "<") ? C_LT
               : is_op(t, "<=") ? C_LE : is_op(t, ">") ? C_GT : is_op(t, ">=") ? C_GE
               : is_name(t, "in") ? C_IN : 0;
        if (!op && is_name(t, "not") && is_name(&p->t[p->i + 1], "in")) {
            op = C_NOTIN;
            p->i++;
        }
        if (!op)
            break;
        p->i++;
        jnode *o = node(p, N_LIT, t->line);
        o->op = (uint8_t)op;
        push(p, &k, o);
        push(p, &k, math1(p));
    }
    if (!k.n)
        return first;
    jnode *n = node(p, N_CMP, first->line);
    n->a = first;
    set_kids(n, &k);
    return n;
}

static jnode *not_expr(parser *p)
{
    if (is_name(cur(p), "not")) {
        jnode *n = node(p, N_NOT, cur(p)->line);
        p->i++;
        enter(p);
        n->a = not_expr(p);
        p->depth--;
        return n;
    }
    return compare(p);
}

static jnode *and_expr(parser *p)
{
    jnode *n = not_expr(p);
    while (is_name(cur(p), "and")) {
        jnode *a = node(p, N_AND, cur(p)->line);
        p->i++;
        a->a = n;
        a->b = not_expr(p);
        n = a;
    }
    return n;
}

static jnode *or_expr(parser *p)
{
    jnode *n = and_expr(p);
    while (is_name(cur(p), "or")) {
        jnode *o = node(p, N_OR, cur(p)->line);
        p->i++;
        o->a = n;
        o->b = and_expr(p);
        n = o;
    }
    return n;
}

static jnode *expr(parser *p, int with_cond)
{
    enter(p);
    jnode *n = or_expr(p);
    while (with_cond && is_name(cur(p), "if")) {
        jnode *c = node(p, N_COND, cur(p)->line);
        p->i++;
        c->b = n;
        c->a = or_expr(p);
        if (is_name(cur(p), "else")) {
            p->i++;
            p->cond++;
            c->c = expr(p, 1);
            p->cond--;
        }
        n = c;
    }
    p->depth--;
    return n;
}

/* ---- statements ---------------------------------------------------------------------- */

static jnode *body(parser *p, const char *const *ends, const char **ended);

static void end_tag(parser *p)
{
    if (cur(p)->t != T_BEND)
        unexpected(p, "end of statement block");
    p->i++;
}

/* set / for / with targets: a name, ns.attr (set), or a tuple of targets
 * ("a, b", "(a, b)", "a, (b, c)"); n->kids get the list. */
static jnode *target(parser *p, int allow_attr);

static void target_list(parser *p, jnode *n, int allow_attr)
{
    kids k = {0};
    for (;;) {
        push(p, &k, target(p, allow_attr));
        if (!is_op(cur(p), ",") || is_op(&p->t[p->i + 1], ")"))
            break;
        p->i++;
    }
    if (is_op(cur(p), ",") && k.n)
        p->i++;
    set_kids(n, &k);
}

static jnode *target(parser *p, int allow_attr)
{
    if (is_op(cur(p), "(")) {
        jnode *t = node(p, N_TUPLE, cur(p)->line);
        p->i++;
        target_list(p, t, allow_attr);
        expect_op(p, ")");
        return t;
    }
    jnode *t = node(p, N_NAME, cur(p)->line);
    t->name = expect_name(p);
    if (allow_attr && is_op(cur(p), ".") && p->t[p->i + 1].t == T_NAME) {
        p->i++;
        jnode *g = node(p, N_ATTR, t->line);
        g->a = t;
        g->name = expect_name(p);
        t = g;
    }
    return t;
}

static void targets(parser *p, jnode *n, int allow_attr)
{
    target_list(p, n, allow_attr);
}

/* Whether a name is read anywhere under n (a macro's varargs / kwargs). */
static int reads_name(const jnode *n, const char *name)
{
    if (!n)
        return 0;
    if (n->kind == N_NAME && !strcmp(n->name->p, name))
        return 1;
    if (reads_name(n->a, name) || reads_name(n->b, name) || reads_name(n->c, name) ||
        reads_name(n->d, name))
        return 1;
    for (int i = 0; i < n->nkids; i++)
        if (reads_name(n->kids[i], name))
            return 1;
    return 0;
}

static jnode *stmt(parser *p, const char *const *ends, const char **ended)
{
    tok *k = cur(p);
    int line = k->line;
    if (k->t != T_NAME)
        unexpected(p, "a tag name");
    for (int e = 0; ends && ends[e]; e++)
        if (is_name(k, ends[e])) {
            p->i++;
            *ended = ends[e];
            return NULL;
        }
    p->i++;
    jnode *n;
    if (is_name(k, "if") || is_name(k, "elif")) {
        n = node(p, N_IF, line);
        n->a = expr(p, 0);
        end_tag(p);
        static const char *const e1[] = {"elif", "else", "endif", NULL};
        const char *how = NULL;
        p->cond++;
        n->b = body(p, e1, &how);
        p->cond--;
        if (!strcmp(how, "elif")) {
            p->i--; /* parse the elif as a nested if */
            p->cond++;
            jnode *nested = stmt(p, NULL, NULL);
            p->cond--;
            n->c = nested;
        } else if (!strcmp(how, "else")) {
            end_tag(p);
            static const char *const e2[] = {"endif", NULL};
            p->cond++;
            n->c = body(p, e2, &how);
            p->cond--;
            end_tag(p);
        } else {
            end_tag(p);
        }
        return n;
    }
    if (is_name(k, "for")) {
        n = node(p, N_FOR, line);
        targets(p, n, 0);
        if (!is_name(cur(p), "in"))
            unexpected(p, "'in'");
        p->i++;
        n->a = tuple(p, 0, 0);
        if (is_name(cur(p), "if")) {
            p->i++;
            n->d = expr(p, 1);
        }
        if (is_name(cur(p), "recursive"))
            pfail(p, line, "recursive for loops are not supported");
        end_tag(p);
        static const char *const e1[] = {"else", "endfor", NULL};
        const char *how = NULL;
        p->loops++;
        n->b = body(p, e1, &how);
        p->loops--;
        end_tag(p);
        if (!strcmp(how, "else")) {
            static const char *const e2[] = {"endfor", NULL};
            n->c = body(p, e2, &how);
            end_tag(p);
        }
        return n;
    }
    if (is_name(k, "set")) {
        n = node(p, N_SET, line);
        targets(p, n, 1);
        if (is_op(cur(p), "=")) {
            p->i++;
            n->a = tuple(p, 1, 0);
            end_tag(p);
            return n;
        }
        if (n->nkids != 1 || n->kids[0]->kind != N_NAME)
            unexpected(p, "'='");
        n->kind = N_SETBLOCK;
        n->name = n->kids[0]->name;
        if (is_op(cur(p), "|")) {
            p->i++;
            n->a = filter_expr(p, filter_one(p, NULL));
        }
        end_tag(p);
        static const char *const e[] = {"endset", NULL};
        const char *how = NULL;
        n->b = body(p, e, &how);
        end_tag(p);
        return n;
    }
    if (is_name(k, "macro") || is_name(k, "call")) {
        int is_call = is_name(k, "call");
        n = node(p, is_call ? N_CALLBLOCK : N_MACRO, line);
        if (!is_call)
            n->name = expect_name(p);
        kids params = {0};
        if (!is_call || is_op(cur(p), "(")) {
            expect_op(p, "(");
            while (!is_op(cur(p), ")")) {
                if (params.n)
                    expect_op(p, ",");
                jnode *a = node(p, N_NAME, cur(p)->line);
                a->name = expect_name(p);
                if (is_op(cur(p), "=")) {
                    p->i++;
                    a->kind = N_KWARG;
                    a->a = expr(p, 1);
                } else if (params.n && params.v[params.n - 1]->kind == N_KWARG) {
                    pfail(p, a->line, "non-default argument follows default argument");
                }
                push(p, &params, a);
            }
            p->i++;
        }
        set_kids(n, &params);
        if (is_call) {
            n->a = expr(p, 1);
            if (n->a->kind != N_CALL)
                pfail(p, line, "expected a call after {%% call %%}");
        }
        end_tag(p);
        static const char *const em[] = {"endmacro", NULL}, *const ec[] = {"endcall", NULL};
        const char *how = NULL;
        int loops = p->loops;
        p->loops = 0;
        n->b = body(p, is_call ? ec : em, &how);
        p->loops = loops;
        n->op = (uint8_t)(reads_name(n->b, "varargs") | reads_name(n->b, "kwargs") << 1);
        if (!is_call && cur(p)->t == T_NAME)
            p->i++; /* {% endmacro name %} */
        end_tag(p);
        return n;
    }
    if (is_name(k, "filter")) {
        n = node(p, N_FILTERBLOCK, line);
        n->a = filter_expr(p, filter_one(p, NULL));
        end_tag(p);
        static const char *const e[] = {"endfilter", NULL};
        const char *how = NULL;
        n->b = body(p, e, &how);
        end_tag(p);
        return n;
    }
    if (is_name(k, "generation")) {
        end_tag(p);
        static const char *const e[] = {"endgeneration", NULL};
        const char *how = NULL;
        n = body(p, e, &how);
        end_tag(p);
        return n;
    }
    if (is_name(k, "with")) {
        n = node(p, N_WITH, line);
        kids k2 = {0};
        while (cur(p)->t != T_BEND) {
            if (k2.n)
                expect_op(p, ",");
            jnode *a = node(p, N_KWARG, cur(p)->line);
            a->name = expect_name(p);
            expect_op(p, "=");
            a->a = expr(p, 1);
            push(p, &k2, a);
        }
        set_kids(n, &k2);
        end_tag(p);
        static const char *const e[] = {"endwith", NULL};
        const char *how = NULL;
        n->b = body(p, e, &how);
        end_tag(p);
        return n;
    }
    if (is_name(k, "break") || is_name(k, "continue")) {
        if (!p->loops)
            pfail(p, line, "'%.*s' outside loop", (int)k->n, k->s);
        n = node(p, is_name(k, "break") ? N_BREAK : N_CONTINUE, line);
        end_tag(p);
        return n;
    }
    pfail(p, line, "Encountered unknown tag '%.*s'.", (int)k->n, k->s);
}

/* Statements up to one of the end tags (whose name it consumes, *ended
 * set), or to the end of the template when ends is NULL. */
static jnode *body(parser *p, const char *const *ends, const char **ended)
{
    jnode *b = node(p, N_BODY, cur(p)->line);
    kids k = {0};
    int line0 = cur(p)->line;
    for (;;) {
        tok *t = cur(p);
        if (t->t == T_EOF) {
            if (ends) {
                char want[128] = "";
                for (int e = 0; ends[e]; e++)
                    snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'",
                             e ? " or " : "", ends[e]);
                pfail(p, t->line, "Unexpected end of template. Jinja was looking for %s "
                      "(the block opened near line %d).", want, line0);
            }
            break;
        }
        if (t->t == T_TEXT) {
            jnode *n = node(p, N_TEXT, t->line);
            n->lit.t = JT_STR;
            n->lit.u.s = t->str;
            push(p, &k, n);
            p->i++;
        } else if (t->t == T_VBEGIN) {
            p->i++;
            jnode *n = node(p, N_OUT, t->line);
            n->a = tuple(p, 1, 0);
            if (cur(p)->t != T_VEND)
                unexpected(p, "end of print statement");
            p->i++;
            push(p, &k, n);
        } else if (t->t == T_BBEGIN) {
            p->i++;
            jnode *n = stmt(p, ends, ended);
            if (!n)
                break;
            push(p, &k, n);
        } else {
            unexpected(p, "text or a tag");
        }
    }
    set_kids(b, &k);
    return b;
}

/* ---- entry points ----------------------------------------------------------------------------- */

int ms_jinja_parse(const char *src, size_t len, const char *name, ms_jinja **out, ms_err *err)
{
    *out = NULL;
    ms_jinja *t = calloc(1, sizeof *t);
    char *norm = malloc(len + 1);
    if (!t || !norm || !(t->name = strdup(name ? name : "template"))) {
        free(norm);
        if (t)
            free(t->name);
        free(t);
        return ms_err_set(err, MS_E_NOMEM, "out of memory reading template %s", name);
    }
    /* newlines to "\n"; one trailing newline dropped (keep_trailing_newline off) */
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            norm[n++] = src[i];
        }
    }
    if (n && norm[n - 1] == '\n')
        n--;
    parser p = {.r = &t->region, .err = err, .name = t->name};
    if (setjmp(p.fail)) {
        free(p.t);
        free(norm);
        ms_jinja_free(t);
        return -1;
    }
    lex(&p, norm, n);
    emit(&p, T_EOF, p.nt ? p.t[p.nt - 1].line : 1);
    t->root = body(&p, NULL, NULL);
    free(p.t);
    free(norm);
    *out = t;
    return 0;
}

void ms_jinja_free(ms_jinja *t)
{
    if (!t)
        return;
    jr_free(&t->region);
    free(t->name);
    free(t);
}
