/* A seeded, bounded mutation fuzzer for the Jinja interpreter (jinja.h).
 *
 * Two cases:
 *  - jinja_fuzz_templates: the release templates (MS_TEMPLATES, else
 *    ../shared/templates or /work/shared/templates) and the feature cases
 *    tests/runtime/jinja_cases/ *.jinja, mutated (bytes flipped, set, inserted
 *    and deleted; slices of other templates spliced in; Jinja fragments,
 *    filter and method calls, NULs, invalid UTF-8, long strings and deep
 *    nesting inserted), parsed, and rendered over an unmutated request;
 *  - jinja_fuzz_vars: the unmutated templates rendered over the requests
 *    (tests/runtime/chat_requests/ *.json, jinja_cases/ *.json) mutated as
 *    JSON (values replaced by other types, keys dropped or added, elements
 *    and messages duplicated), as variables the way template.c builds them.
 * Each iteration checks: a parse or render succeeds or fails with
 * "fuzz, line N: ..."; the output is NUL-terminated and within the cap; every
 * 16th input renders twice with the same result; no parse or render takes
 * over 2 s. Crashes, leaks and undefined behaviour are the sanitizers' part:
 * `make asan` runs this binary too.
 *
 * Bounded: each render has a step budget and an output cap, so no template
 * can loop forever (SIGALRM catches a hang inside one step); the run stops
 * after MS_FUZZ_SECONDS (default 20, half per case) or MS_FUZZ_ITERS
 * iterations per case, whichever comes first. Deterministic: iteration I of
 * a case draws from its own generator, seeded from MS_FUZZ_SEED, the case
 * and I, over the sorted corpus. To reproduce "FAIL ... (seed S, iteration I)":
 *     MS_FUZZ_SEED=S MS_FUZZ_ONLY=I build-asan/tests/runtime/test_jinja_fuzz
 * runs only iteration I of each case. The input is also written to $MS_TMP
 * (else /tmp) as jinja_fuzz_fail_<case>_<I>.jinja and .json (variables);
 * tests/run.sh removes its MS_TMP at the end, so rerun the binary alone. */
#include <ctype.h>
#include <glob.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "runtime/jinja.h"
#include "test.h"

#define MAX_SRC (256u << 10)   /* a mutated template stays under this */
#define MAX_FILES 512
#define SLOW_S 2.0             /* a parse or render longer than this fails */
#define HANG_S 20              /* SIGALRM: a render that never returns */
#define N(a) (sizeof(a) / sizeof *(a))

typedef struct { char *p; size_t n, cap; } buf;
static buf tmpl[MAX_FILES];
static ms_jinja *parsed[MAX_FILES];   /* the unmutated templates (NULL: refused) */
static json_t *reqs[MAX_FILES];
static int ntmpl, nshared, nreq;

static uint64_t seed, rs;             /* the run's seed; the iteration's state */
static const char *cur_case = "";     /* what the iteration works on, for reports */
static long cur_iter = -1;
static const buf *cur_src;
static const json_t *cur_vars;
static double slowest;                /* the longest render so far, seconds */

static uint64_t next(void)   /* splitmix64 */
{
    uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static size_t rnd(size_t n) { return n ? (size_t)(next() % n) : 0; }
#define PICK(a) ((a)[rnd(N(a))])

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void put(buf *b, size_t at, const char *s, size_t n)   /* inserts s at `at` */
{
    if (b->n + n > MAX_SRC)
        return;
    if (b->n + n + 1 > b->cap) {   /* also allocates an empty buffer */
        b->cap = (b->n + n + 1) * 2;
        if (!(b->p = realloc(b->p, b->cap)))
            abort();
    }
    memmove(b->p + at + n, b->p + at, b->n - at);
    if (n)
        memcpy(b->p + at, s, n);
    b->n += n;
}
static void puts_at(buf *b, size_t at, const char *s) { put(b, at, s, strlen(s)); }

/* ---- failures ---------------------------------------------------------------------- */

static int fail_at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail_at(const char *fmt, ...)
{
    va_list ap;
    printf("FAIL jinja_fuzz_%s: ", cur_case);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf(" (seed %llu, iteration %ld)\n", (unsigned long long)seed, cur_iter);
    const char *dir = getenv("MS_TMP");
    char base[1024], path[1100];
    snprintf(base, sizeof base, "%s/jinja_fuzz_fail_%s_%ld", dir && *dir ? dir : "/tmp", cur_case,
             cur_iter);
    snprintf(path, sizeof path, "%s.jinja", base);
    FILE *f = cur_src ? fopen(path, "wb") : NULL;
    if (f) {
        fwrite(cur_src->p, 1, cur_src->n, f);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s.json", base);
    if (cur_vars)
        json_dump_file(cur_vars, path, JSON_INDENT(1) | JSON_ENCODE_ANY);
    printf("     reproduce: MS_FUZZ_SEED=%llu MS_FUZZ_ONLY=%ld "
           "build-asan/tests/runtime/test_jinja_fuzz; input: %s.{jinja,json}\n",
           (unsigned long long)seed, cur_iter, base);
    fflush(stdout);
    return -1;
}

/* A sanitizer report, a crash or a hang: say which iteration before dying.
 * ASan calls the death callback; UBSan only calls __ubsan_on_report. */
extern void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));
static void on_death(void)
{
    static int said;
    if (cur_iter >= 0 && !said++)
        fail_at("crashed, hung or a sanitizer report (see stderr)");
}
void __ubsan_on_report(void);
void __ubsan_on_report(void) { on_death(); }
static void on_signal(int sig)
{
    on_death();
    if (sig == SIGALRM)
        _exit(1);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- one render, checked -------------------------------------------------------------- */

static int msg_ok(const ms_error *e)   /* "fuzz, line N: ..." */
{
    return !strncmp(e->msg, "fuzz, line ", 11) && isdigit((unsigned char)e->msg[11]);
}

typedef struct { int rc; char *out; size_t len; ms_error err; } result;

static int render1(const ms_jinja *t, const json_t *vars, result *r)
{
    ms_jinja_env env = {.now = 1768435200, .max_steps = 200000, .max_output = 1u << 20};
    memset(r, 0, sizeof *r);
    double t0 = now_s();
    alarm(HANG_S);
    r->rc = ms_jinja_render(t, vars, &env, &r->out, &r->len, &r->err);
    alarm(0);
    double dt = now_s() - t0;
    slowest = dt > slowest ? dt : slowest;
    if (dt > SLOW_S)
        return fail_at("one render took %.2f s", dt);
    if (r->rc == 0 && (!r->out || r->out[r->len] || r->len > env.max_output))
        return fail_at("rendered %zu bytes: no buffer, no NUL or past the cap", r->len);
    if (r->rc && (r->rc != -1 || r->out))
        return fail_at("failed with status %d, output %p", r->rc, (void *)r->out);
    if (r->rc && !msg_ok(&r->err))
        return fail_at("render error without \"fuzz, line N\": %.300s", r->err.msg);
    return 0;
}

/* Renders t over vars, every 16th iteration twice (the results must agree). */
static int render_checked(const ms_jinja *t, const json_t *vars, long *errors)
{
    result a, b;
    int bad = render1(t, vars, &a);
    if (!bad && cur_iter % 16 == 0) {
        bad = render1(t, vars, &b);
        if (!bad && (a.rc != b.rc || a.len != b.len || (a.rc == 0 && memcmp(a.out, b.out, a.len))
                     || strcmp(a.err.msg, b.err.msg)))
            bad = fail_at("two renders of the same input differ");
        free(b.out);
    }
    *errors += !bad && a.rc;
    free(a.out);
    return bad;
}

/* ---- mutations of templates --------------------------------------------------------------- */

static const char *const frags[] = {
    "{%", "%}", "{{", "}}", "{#", "#}", "-%}", "{%-", "{{-", "-}}", "{%+", "+%}", "endfor",
    "endif", "{% for x in y %}", "{% if %}", "{% set ns.a = 1 %}", "loop.index", "**", "//", "~",
    "|tojson(indent=2)", "|map(attribute='a')",
    "'\\u00e9'", "raise_exception('x')", "{% macro m(a, b=1) %}", "{% call m(1) %}", "caller()",
    "range(100000)", "{% break %}", "{% raw %}", "{% endraw %}", "((((((((", "{% endfor %}",
    "{% endif %}", "{% endmacro %}", "{% endcall %}", "{% else %}", "{% elif x %}", "{% continue %}",
    "{{ x }}", "{% set x = y %}", "{% set ns = namespace(a=[], b=0) %}", "{% set x %}",
    "{% endset %}", "{% for k, v in x.items() %}", "{% for m in messages if m.role %}",
    "{% filter upper %}", "{% endfilter %}", "{% generation %}", "{% endgeneration %}",
    "{% with a = 1 %}", "{% endwith %}", "{% call(a) m(1) %}", "messages", "message['content']",
    "tools", "add_generation_prompt", "bos_token", "loop.last", "loop.previtem",
    "loop.cycle('a', 'b')", "loop.changed(x)", "loop.revindex0", "loop.depth", " is defined",
    " is not none", " is string", " is mapping", " is divisibleby(0)", " is sameas none", " in ",
    " not in ", " and ", " or ", " not ", " if x else ", "[0]", "[-1]", "[1:]", "[::-1]", "[::0]",
    "[x]", ".__class__", "_x", "9223372036854775807", "-9223372036854775808", "4294967295",
    "99999999999999999999", "1e308", "1e309", "-0.0", "0.1", "1/0", "1 % 0", "2 ** 64", "(-1) ** 3",
    "10 ** 10 ** 10", "'a' * 1000000", "[1] * 1000000", "none", "None", "True", "false",
    "{'a': 1, 'b': [1, 2]}", "[1, 2, 3]", "(1,)", "()", "'\\x00'", "'\\U0010ffff'", "'\\uD800'",
    "\"\\\"\"", "'\\", "strftime_now('%Y-%m-%d %%')", "namespace()", "dict(a=1)", "range(0, 10, 0)",
    "'%5.2f %s %d %r %c %x %%' % (1.5, 2, 3, 4, 65, 255)", "'%(a)s %-9.3e' % {'a': 1}", "'%99999d'",
    "'{0:>8} {1:+.3e} {a!r:^9} {{}}'.format(1, 2.5, a=3)", "'{:S}'", "'{9}'", "{:", ":", "!r}",
    "{{ {1: 2, none: 3, 1.5: 4, true: 5}|tojson }}", /* the output cap, then the memory cap: */
    "{% for i in range(1000) %}{{ 'x' * 2000 }}{% endfor %}",
    "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(99) %}{% set ns.s = ns.s ~ i %}",
    "*args", "**kwargs", "varargs", "kwargs", "self", "=", ",", "|", "(", ")", "[", "]", "{", "}",
    "'", "\"", "\n", "\r\n", "\r", "  ", "\t",
};
static const char *const calls[] = {   /* filters and methods, called with random arguments */
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "first", "float", "format", "indent", "int", "items", "join", "last", "length",
    "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round",
    "safe", "select", "selectattr", "slice", "sort", "string", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "wordcount", "strip", "lstrip", "split", "rsplit",
    "startswith", "endswith", "find", "rfind", "index", "splitlines", "isdigit", "ljust", "rjust",
    "zfill", "swapcase", "get", "keys", "values", "copy", "append", "update", "pop",
};
static const char *const args[] = {
    "", "()", "(1)", "(-1)", "(0)", "(2, 'x')", "('a')", "('a', 'bb')", "('')", "('', 'x', -1)",
    "(attribute='a')", "('role', 'equalto', 'user')", "(indent=2)", "(indent=2, sort_keys=true)",
    "(9223372036854775807)", "(-9223372036854775808)", "(1, 2, 3, 4, 5)", "(none)", "([])",
    "(start=1.5)", "(true, true)", "(reverse=true, attribute='0')", "('odd')", "(x, y=z)",
    "(100000000)", "('\\n', 2)", "(first=true, blank=true)", "(case_sensitive=true)",
};

static void mutate_template(buf *b)
{
    static const char *const bad_utf8[] = {"\xff", "\xc3", "\xe2\x82", "\xf4\x90\x80\x80",
                                          "\xed\xa0\x80", "\xc0\xaf", "\x80\x80", "\xf0\x9f\x98"};
    static const char *const nests[] = {"(", "[", "{", "((1,", "{% if x %}", "{% for x in y %}",
                                       "{{ (", "-", "not ", "x|", "x.", "[[", "{'a':", "m("};
    char tmp[4096];
    for (int i = 1 + (int)rnd(rnd(8) ? 3 : 32); i; i--) {
        size_t at = rnd(b->n + 1), k;
        if (rnd(2)) {   /* often at the next tag */
            const char *q = memchr(b->p + at, '{', b->n - at);
            at = q ? (size_t)(q - b->p) + rnd(4) : at;
            at = at > b->n ? b->n : at;
        }
        const buf *o = &tmpl[rnd(ntmpl)];
        switch (rnd(11)) {
        case 0: if (at < b->n) b->p[at] ^= (char)(1u << rnd(8)); break;
        case 1:
            if (at < b->n)
                b->p[at] = rnd(2) ? (char)rnd(256) : "{}%#-+()[]'\"|.,~*/\n\r\\"[rnd(21)];
            break;
        case 2: case 3: puts_at(b, at, PICK(frags)); break;
        case 7: put(b, at, "", 1); break;   /* a NUL */
        case 8: puts_at(b, at, PICK(bad_utf8)); break;
        case 4:   /* a filter or a method call */
            snprintf(tmp, sizeof tmp, "%s%s%s", rnd(2) ? "|" : ".", PICK(calls), PICK(args));
            puts_at(b, at, tmp);
            break;
        case 5:   /* a range deleted (sometimes replaced by a fragment) */
            k = 1 + rnd(rnd(4) ? 16 : b->n / 4 + 1);
            k = at + k > b->n ? b->n - at : k;
            memmove(b->p + at, b->p + at + k, b->n - at - k);
            b->n -= k;
            if (rnd(2))
                puts_at(b, at, PICK(frags));
            break;
        case 6: {   /* a slice of another template, or of itself again */
            if (rnd(2))
                o = b;
            size_t from = rnd(o->n + 1);
            k = rnd((o->n - from < 512 ? o->n - from : 512) + 1);
            memcpy(tmp, o->p + from, k);
            put(b, at, tmp, k);
            break;
        }
        case 9:   /* a long string literal or text */
            memset(tmp, "ax{%'\\\xc3\xa9"[rnd(8)], sizeof tmp);
            for (k = 1 + rnd(rnd(4) ? 100 : 20000); k; k -= k < sizeof tmp ? k : sizeof tmp)
                put(b, at, tmp, k < sizeof tmp ? k : sizeof tmp);
            if (rnd(2))
                put(b, at, "'", 1);
            break;
        default: {   /* deep nesting */
            const char *s = PICK(nests);
            for (k = 1 + rnd(rnd(2) ? 20 : 400); k; k--)
                puts_at(b, at, s);
        }
        }
    }
}

/* ---- mutations of variables --------------------------------------------------------------- */

static const char *const keys[] = {
    "role", "content", "tool_calls", "function", "arguments", "name", "reasoning_content",
    "thinking", "type", "text", "tools", "parameters", "properties", "description", "id",
    "tool_call_id", "enable_thinking", "reasoning_effort", "add_generation_prompt", "messages",
    "bos_token", "eos_token", "builtin_tools", "model_identity", "channel", "recipient", "a",
};

static json_t *rand_value(int depth)
{
    static const int64_t ints[] = {0, 1, -1, 2, 7, 100000, INT64_MAX, INT64_MIN, -4294967296};
    static const double reals[] = {0.0, -0.0, 0.5, -1.5, 1e308, -1e308, 5e-324, 3.0, 1e16};
    static const char *const strs[] = {
        "", "user", "assistant", "system", "tool", "developer", "function", "h\xc3\xa9llo",
        "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", "\xf0\x9f\x8e\x89", "\xe2\x80\xae\xe2\x80\x8b",
        "{{ x }}{% if %}", "<|im_end|>", "</think>", "<think>\n", "<|channel|>analysis",
        "\n\n  \t", "{\"a\": 1}", "'\"\\", "low", "high", "None", "true", "%s %d {0} {:x}"};
    char tmp[8192];
    json_t *v, *w;
    size_t k = 1 + rnd(sizeof tmp - 1);
    switch (rnd(depth < 3 ? 14 : 11)) {
    case 0: return json_null();
    case 1: return json_boolean(rnd(2));
    case 2: return json_integer(PICK(ints));
    case 3: return json_integer((json_int_t)next());
    case 4: return json_real(PICK(reals));
    case 5: return json_string(PICK(strs));
    case 6: return memset(tmp, "a {\n\xe9"[rnd(4)], k), json_stringn(tmp, k);   /* long */
    case 7: return json_stringn("a\0b", 3);
    case 8: return json_object();
    case 9: return json_array();
    case 10:   /* deep nesting (jansson parses up to 2048 levels) */
        v = json_integer(1);
        for (k = 1 + rnd(rnd(2) ? 50 : 2000); k; k--) {
            if (rnd(2))
                json_array_append_new(w = json_array(), v);
            else
                json_object_set_new(w = json_object(), "content", v);
            v = w;
        }
        return v;
    case 11:   /* a message-like object */
        v = json_object();
        json_object_set_new(v, "role", json_string(strs[1 + rnd(6)]));
        json_object_set_new(v, PICK(keys), rand_value(depth + 1));
        return v;
    case 12:
        for (v = json_array(), k = rnd(5); k; k--)
            json_array_append_new(v, rand_value(depth + 1));
        return v;
    default:
        for (v = json_object(), k = rnd(4); k; k--)
            json_object_set_new(v, PICK(keys), rand_value(depth + 1));
        return v;
    }
}

static void containers(json_t *v, json_t **all, int *n, int depth)
{
    const char *k;
    json_t *e;
    size_t i;
    if (*n >= 4096 || depth > 64 || !(json_is_array(v) || json_is_object(v)))
        return;
    all[(*n)++] = v;
    if (json_is_array(v))
        json_array_foreach(v, i, e) containers(e, all, n, depth + 1);
    else
        json_object_foreach(v, k, e) containers(e, all, n, depth + 1);
}

static void mutate_json(json_t *root)
{
    static json_t *all[4096];
    for (int m = 1 + (int)rnd(6); m; m--) {
        int n = 0;
        containers(root, all, &n, 0);
        json_t *c = all[rnd(n)];
        size_t size = json_is_array(c) ? json_array_size(c) : json_object_size(c), i = rnd(size);
        json_t *v = rnd(4) ? rand_value(0) : json_deep_copy(all[rnd(n)]);
        if (json_is_array(c)) {
            switch (size ? rnd(4) : 3) {
            case 0: json_array_set(c, i, v); break;
            case 1: json_array_remove(c, i); break;
            case 2:   /* an element (a message) twice */
                if (size < 256)
                    json_array_insert_new(c, i, json_deep_copy(json_array_get(c, i)));
                break;
            default: json_array_append(c, v);
            }
        } else {
            void *it = json_object_iter(c);
            for (size_t j = 0; j < i && it; j++)
                it = json_object_iter_next(c, it);
            if (!it || !rnd(3)) {
                json_object_set(c, PICK(keys), v);
            } else if (rnd(2)) {
                json_object_iter_set(c, it, v);
            } else {
                char *key = strdup(json_object_iter_key(it));
                json_object_del(c, key);
                free(key);
            }
        }
        json_decref(v);
    }
}

/* The variables template.c gives a template for this request. */
static json_t *make_vars(const json_t *req)
{
    json_t *v = json_object(), *m = json_object_get(req, "messages"), *e;
    json_t *tools = json_object_get(req, "tools"), *kw = json_object_get(req, "chat_template_kwargs");
    const char *k;
    json_object_set_new(v, "messages", m ? json_deep_copy(m) : json_array());
    json_object_set_new(v, "tools", tools ? json_deep_copy(tools) : json_null());
    json_object_set_new(v, "add_generation_prompt", json_boolean(rnd(2)));
    if (rnd(4)) {   /* the options, as ms_template_opts or tokenizer_config.json give them */
        json_object_set_new(v, "bos_token", json_string("<BOS>"));
        json_object_set_new(v, "eos_token", json_string("<EOS>"));
    }
    if (!rnd(3)) {
        json_object_set_new(v, "enable_thinking", json_boolean(rnd(2)));
        json_object_set_new(v, "thinking", json_boolean(rnd(2)));
    }
    if (!rnd(4))
        json_object_set_new(v, "reasoning_effort", json_string(rnd(2) ? "low" : "high"));
    json_object_foreach(kw, k, e) json_object_set_new(v, k, json_deep_copy(e));
    return v;
}

/* ---- the corpus and the two cases --------------------------------------------------------- */

static void load(const char *dir, const char *pattern, int json)
{
    char path[1100];
    glob_t g;
    snprintf(path, sizeof path, "%s/%s", dir, pattern);
    if (glob(path, 0, NULL, &g))
        return;
    for (size_t i = 0; i < g.gl_pathc && ntmpl < MAX_FILES && nreq < MAX_FILES; i++) {
        FILE *f = json ? NULL : fopen(g.gl_pathv[i], "rb");
        json_t *j = json ? json_load_file(g.gl_pathv[i], 0, NULL) : NULL;
        char chunk[65536];
        size_t k;
        if (f) {
            put(&tmpl[ntmpl], 0, "", 0);
            while ((k = fread(chunk, 1, sizeof chunk, f)) > 0)
                put(&tmpl[ntmpl], tmpl[ntmpl].n, chunk, k);
            fclose(f);
            ntmpl++;
        }
        if (json_is_object(j))
            reqs[nreq++] = json_incref(j);
        json_decref(j);
    }
    globfree(&g);
}

/* Runs one case: iteration `only` alone, or until `iters` or the deadline. */
static void run_case(const char *name, int mutate, long iters, double deadline, long only)
{
    long it, parse_err = 0, render_err = 0;
    int bad = 0;
    double t0 = now_s();
    buf b = {0};
    cur_case = name;
    slowest = 0;
    for (it = only >= 0 ? only : 0; !bad && (only >= 0 ? it == only : it < iters); it++) {
        if (only < 0 && now_s() > deadline)
            break;
        cur_iter = it;
        rs = seed ^ ((uint64_t)mutate << 60) ^ ((uint64_t)it * 0x2545f4914f6cdd1dull);
        next();
        /* a third of the inputs from the release templates, when there are some */
        int ti = nshared && rnd(3) == 0 ? (int)rnd(nshared) : (int)rnd(ntmpl);
        while (!mutate && !parsed[ti])   /* the vars case needs a template that parses */
            ti = (int)rnd(ntmpl);
        json_t *vars = make_vars(reqs[rnd(nreq)]);
        b.n = 0;
        put(&b, 0, tmpl[ti].p, tmpl[ti].n);
        cur_src = &b;
        cur_vars = vars;
        if (mutate) {
            mutate_template(&b);
            ms_jinja *t = NULL;
            ms_error err = {0};
            double p0 = now_s();
            alarm(HANG_S);
            int rc = ms_jinja_parse(b.p, b.n, "fuzz", &t, &err);
            alarm(0);
            if (now_s() - p0 > SLOW_S)
                bad = fail_at("one parse took %.2f s", now_s() - p0);
            else if (rc && (rc != -1 || t || !msg_ok(&err)))
                bad = fail_at("parse error without \"fuzz, line N\" (%d): %.300s", rc, err.msg);
            else if (rc)
                parse_err++;
            else
                bad = render_checked(t, vars, &render_err);
            ms_jinja_free(t);
        } else {
            mutate_json(vars);
            bad = render_checked(parsed[ti], vars, &render_err);
        }
        cur_vars = NULL;
        json_decref(vars);
    }
    free(b.p);
    cur_src = NULL;
    cur_iter = -1;
    if (bad) {
        t_failed++;
        return;
    }
    long n = it - (only >= 0 ? only : 0);
    double dt = now_s() - t0;
    char perr[64] = "";
    if (mutate)
        snprintf(perr, sizeof perr, "%ld parse errors, ", parse_err);
    printf("PASS jinja_fuzz_%s: %ld iterations, %s%ld render errors, seed %llu (%.1f s, %.0f/s, "
           "slowest render %.0f ms)\n", name, n, perr, render_err, (unsigned long long)seed, dt,
           n / (dt > 0 ? dt : 1), slowest * 1e3);
    fflush(stdout);
    t_passed++;
}

int main(void)
{
    const char *s = getenv("MS_FUZZ_SEED");
    seed = s && *s ? strtoull(s, NULL, 0) : 20260115;
    const char *e = getenv("MS_FUZZ_SECONDS"), *it = getenv("MS_FUZZ_ITERS"),
               *on = getenv("MS_FUZZ_ONLY");
    double seconds = e && *e ? strtod(e, NULL) : 20;
    long iters = it && *it ? strtol(it, NULL, 0) : 1L << 40, only = on && *on ? atol(on) : -1;
    printf("jinja_fuzz: seed %llu, %.0f s\n", (unsigned long long)seed, seconds);

    const char *cand[] = {getenv("MS_TEMPLATES"), "../shared/templates", "/work/shared/templates"};
    struct stat st;
    for (int i = 0; i < 3 && !ntmpl; i++)
        if (cand[i] && *cand[i] && stat(cand[i], &st) == 0 && S_ISDIR(st.st_mode))
            load(cand[i], "*.jinja", 0);
    if (!(nshared = ntmpl))
        printf("SKIP jinja_fuzz_shared_templates: no release templates (MS_TEMPLATES, "
               "../shared/templates, /work/shared/templates); fuzzing the feature cases only\n");
    load("tests/runtime/jinja_cases", "*.jinja", 0);
    load("tests/runtime/chat_requests", "*.json", 1);
    load("tests/runtime/jinja_cases", "*.json", 1);
    int nparsed = 0;
    for (int i = 0; i < ntmpl; i++) {
        ms_error err;
        nparsed += !ms_jinja_parse(tmpl[i].p, tmpl[i].n, "fuzz", &parsed[i], &err);
    }
    if (!nparsed || !nreq) {
        printf("FAIL jinja_fuzz: no corpus (%d templates, %d parse, %d requests; run from the "
               "repo root)\n", ntmpl, nparsed, nreq);
        return 1;
    }

    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(on_death);
    else
        for (int i = 0; i < 5; i++)
            signal((int[]){SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}[i], on_signal);
    signal(SIGALRM, on_signal);

    double start = now_s();
    run_case("templates", 1, iters, start + seconds / 2, only);
    run_case("vars", 0, iters, start + seconds, only);

    for (int i = 0; i < ntmpl; i++) {
        ms_jinja_free(parsed[i]);
        free(tmpl[i].p);
    }
    for (int i = 0; i < nreq; i++)
        json_decref(reqs[i]);
    return t_finish();
}
