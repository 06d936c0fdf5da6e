/* The Jinja interpreter's shared pieces (jinja.h is its interface):
 *  - values (jv): Python's None/bool/int/float/str/list/tuple/dict plus
 *    Jinja's Undefined, namespace, loop and callables, all allocated in the
 *    render's region and freed with it;
 *  - the template tree (jnode) the parser builds and the evaluator walks;
 *  - the render state (jctx), whose errors unwind with longjmp to
 *    ms_jinja_render (everything lives in the region, so nothing leaks).
 * jinja_parse.c: lexer and parser. jinja_value.c: the region, strings,
 * printing as Python, tojson, comparisons. jinja_eval.c: statements and
 * expressions. jinja_builtins.c: filters, tests, methods and globals. */
#ifndef MS_RUNTIME_JINJA_INTERNAL_H
#define MS_RUNTIME_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/jinja.h"

/* ---- the region: a bump allocator freed all at once --------------------------- */

typedef struct jblock jblock;
typedef struct jregion {
    jblock *head;
    size_t used;       /* bytes handed out, for the memory cap */
} jregion;

/* ---- values ---------------------------------------------------------------- */

typedef enum {
    JT_UNDEF, JT_NONE, JT_BOOL, JT_INT, JT_FLOAT, JT_STR, JT_LIST, JT_DICT, JT_NS, JT_LOOP,
    JT_FUNC,
} jtype;

typedef struct jstr { size_t n; char p[]; } jstr;   /* UTF-8, NUL-terminated */
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jloop jloop;

typedef struct jv {
    uint8_t t;          /* jtype */
    uint8_t safe;       /* JT_STR marked safe (Markup): escape leaves it, + escapes the other */
    union {
        int64_t i;      /* JT_BOOL, JT_INT */
        double f;
        jstr *s;
        jlist *l;
        jdict *d;       /* JT_DICT, JT_NS */
        jfunc *fn;
        jloop *loop;
        const char *why; /* JT_UNDEF: the message using it as a value gives (may be NULL) */
    } u;
} jv;

struct jlist { int64_t n, cap; jv *v; int tuple; };
struct jdict { int64_t n, cap; jv *k, *v; };

/* ---- the template tree ---------------------------------------------------------- */

typedef enum {
    /* expressions */
    N_LIT,      /* lit */
    N_NAME,     /* name */
    N_LIST,     /* kids */
    N_TUPLE,    /* kids */
    N_DICT,     /* kids: key, value, key, value... */
    N_ATTR,     /* a.name */
    N_INDEX,    /* a[b] */
    N_SLICE,    /* a[b:c:d], each may be NULL */
    N_CALL,     /* a(kids), kwargs as N_KWARG kids */
    N_KWARG,    /* name=a */
    N_FILTER,   /* a|name(kids); a NULL inside a filter block: the block's text */
    N_TEST,     /* a is [not] name(kids); op = 1 when negated */
    N_NOT, N_NEG, N_POS,  /* a */
    N_BIN,      /* a op b: '+', '-', '*', '/', 'f' (//), '%', 'p' (**), '~' */
    N_AND, N_OR,          /* a, b */
    N_CMP,      /* a, then kids: (N_LIT op holder, operand)...; op codes below */
    N_COND,     /* b if a else c (c may be NULL) */
    /* statements */
    N_TEXT,     /* lit */
    N_OUT,      /* {{ a }} */
    N_BODY,     /* kids */
    N_IF,       /* if a: b else c */
    N_FOR,      /* for targets(kids) in a [if d]: b else c */
    N_SET,      /* targets(kids: N_NAME or N_ATTR, several to unpack) = a */
    N_SETBLOCK, /* name = body b, then the filter chain a (an N_FILTER over NULL, or NULL) */
    N_MACRO,    /* name(params: kids of N_NAME or N_KWARG with default) body b;
                   op: 1 the body reads varargs, 2 kwargs */
    N_CALLBLOCK,/* call a (an N_CALL) with caller(params: kids) body b */
    N_FILTERBLOCK, /* filter chain a over body b */
    N_BREAK, N_CONTINUE,
    N_WITH,     /* with kids (N_KWARG) in a new scope: body b */
} jkind;

/* comparison op codes (N_CMP) */
enum { C_EQ = 1, C_NE, C_LT, C_LE, C_GT, C_GE, C_IN, C_NOTIN };

typedef struct jnode jnode;
struct jnode {
    uint8_t kind, op;
    int line;
    jv lit;
    jstr *name;
    jnode *a, *b, *c, *d;
    jnode **kids;
    int nkids;
};

struct ms_jinja {
    jregion region;      /* the tree */
    jnode *root;
    char *name;
};

/* ---- the render state ---------------------------------------------------------------- */

typedef struct jbuf { char *p; size_t n, cap; } jbuf;

typedef struct jscope jscope;
struct jscope { jscope *parent; jdict vars; };

struct jfunc {
    int kind;              /* JF_* */
    const char *name;
    const jnode *macro;    /* JF_MACRO: N_MACRO (or N_CALLBLOCK for caller) */
    jscope *closure;       /* JF_MACRO: the scope it was defined in */
    jv caller;             /* JF_MACRO: the caller() a call block passes, or undefined */
    jv self;               /* JF_METHOD: the object; JF_CYCLE: the loop */
    int id;                /* JF_METHOD / JF_GLOBAL: which one */
};
enum { JF_MACRO = 1, JF_METHOD, JF_GLOBAL, JF_CYCLE, JF_CHANGED };

struct jloop {
    int64_t index0, length;
    jlist *items;
    int depth;
    int has_changed;   /* loop.changed() was called: its last arguments */
    jv changed;
};

typedef struct jctx {
    jregion *r;
    jmp_buf fail;
    ms_err *err;
    const char *name;      /* the template's name for messages */
    int line;              /* the line being evaluated */
    int64_t steps, max_steps;
    size_t max_output;
    int64_t now;
    int depth;             /* macro calls / nested evaluation */
    int brk;               /* 1 break, 2 continue pending */
    jscope *scope;
    jdict *globals;        /* the render variables */
    jbuf *out;
} jctx;

/* ---- jinja_value.c --------------------------------------------------------------- */

void *jr_alloc(jregion *r, size_t n);     /* NULL when out of memory */
void jr_free(jregion *r);

/* Raises a template error at the current line; never returns. */
_Noreturn void jx_fail(jctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *jx_alloc(jctx *x, size_t n);       /* fails the render when out of memory */
void jx_step(jctx *x);                   /* counts a step; fails past the budget */

static inline jv jv_undef(const char *why) { jv v = {.t = JT_UNDEF}; v.u.why = why; return v; }
static inline jv jv_none(void) { jv v = {.t = JT_NONE}; return v; }
static inline jv jv_bool(int b) { jv v = {.t = JT_BOOL}; v.u.i = b != 0; return v; }
static inline jv jv_int(int64_t i) { jv v = {.t = JT_INT}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {.t = JT_FLOAT}; v.u.f = f; return v; }
jv jv_str(jctx *x, const char *s, size_t n);
jv jv_cstr(jctx *x, const char *s);
jstr *js_new(jregion *r, const char *s, size_t n);   /* NULL when out of memory */
jv jv_list(jctx *x, int64_t cap);
jv jv_dict(jctx *x);
void jl_push(jctx *x, jlist *l, jv v);
/* Dictionary lookup by Python equality; returns the slot or -1. */
int64_t jd_find(const jdict *d, jv key);
jv *jd_get(const jdict *d, const char *key);   /* string key; NULL when absent */
void jd_set(jctx *x, jdict *d, jv key, jv val);
void jd_setc(jctx *x, jdict *d, const char *key, jv val);

/* buffers (the render region holds them) */
void jb_put(jctx *x, jbuf *b, const char *s, size_t n);
static inline void jb_puts(jctx *x, jbuf *b, const char *s);
void jb_putc(jctx *x, jbuf *b, char c);
jv jb_take(jctx *x, jbuf *b);      /* the buffer as a string value */

/* Python's str(v) and repr(v) appended to b. */
void jv_print(jctx *x, jbuf *b, jv v);
void jv_repr(jctx *x, jbuf *b, jv v);
jv jv_to_str(jctx *x, jv v);       /* str(v) as a value (strings pass through) */
/* json.dumps(v, ensure_ascii, indent (NULL: none), separators, sort_keys) */
void jv_json(jctx *x, jbuf *b, jv v, int ensure_ascii, const char *indent, const char *item_sep,
             const char *key_sep, int sort_keys);
const char *jv_type_name(jv v);    /* Python's type name: 'str', 'dict', 'NoneType'... */

int jv_truthy(jv v);
int jv_eq(jv a, jv b);             /* Python == */
/* Python <: -1, 0, 1 ordering, failing with a TypeError message when unordered. */
int jv_cmp(jctx *x, jv a, jv b);
int jv_is_num(jv v);               /* bool, int or float */
double jv_num(jv v);

/* strings as code points */
int64_t ju_len(const char *s, size_t n);           /* code points */
size_t ju_offset(const char *s, size_t n, int64_t k); /* byte offset of code point k */
int ju_isspace(uint32_t cp);                       /* Python's str.isspace for one code point */
/* Unicode simple case mapping and classes (glibc's C.UTF-8 tables; ASCII
 * only if that locale cannot be loaded). */
uint32_t ju_upper(uint32_t cp);
uint32_t ju_lower(uint32_t cp);
int ju_isupper(uint32_t cp);
int ju_islower(uint32_t cp);
int ju_isalpha(uint32_t cp);
int ju_isdigit(uint32_t cp);
size_t ju_next(const char *s, size_t n, uint32_t *cp);   /* 1..4; invalid bytes as U+FFFD, 1 */

jv jv_from_json(jctx *x, const json_t *j);

/* ---- jinja_eval.c --------------------------------------------------------------------- */

jv jx_eval(jctx *x, const jnode *n);
void jx_exec(jctx *x, const jnode *n);
/* Calls a callable value with positional args and keyword (names, values). */
jv jx_call(jctx *x, jv fn, const jv *args, int nargs, const jstr *const *kwn, const jv *kwv,
           int nkw);
/* Python's iter(v) as a list (dict: keys; str: characters); fails when not iterable. */
jlist *jx_iter(jctx *x, jv v);
/* obj.name and obj[key] with Jinja's sandboxed getattr / getitem rules. */
jv jx_getattr(jctx *x, jv obj, const char *name, size_t n);
jv jx_getitem(jctx *x, jv obj, jv key);
/* Fails when v is undefined ("'x' is undefined"), for operations that need a value. */
void jx_need(jctx *x, jv v);

/* ---- jinja_builtins.c ---------------------------------------------------------------- */

typedef struct jargs {
    const jv *v; int n;                      /* positional */
    const jstr *const *kn; const jv *kv; int nk;  /* keyword */
} jargs;

jv jx_filter(jctx *x, const char *name, jv in, const jargs *a);
int jx_test(jctx *x, const char *name, jv in, const jargs *a);
int jx_has_filter(const char *name);
int jx_has_test(const char *name);
/* A method of a str / list / dict value by name (a JT_FUNC), or 0 when the
 * type has no such attribute; *unsafe set for methods the sandbox refuses. */
int jx_method(jctx *x, jv self, const char *name, jv *out);
jv jx_call_method(jctx *x, const jfunc *f, const jargs *a);
/* The globals: range, namespace, dict, raise_exception, strftime_now, ... */
int jx_global(jctx *x, const char *name, jv *out);
jv jx_call_global(jctx *x, const jfunc *f, const jargs *a);

static inline void jb_puts(jctx *x, jbuf *b, const char *s)
{
    jb_put(x, b, s, __builtin_strlen(s));
}

#endif
