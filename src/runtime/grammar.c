/* Grammar-constrained decoding: JSON documents that follow a JSON schema.
 *
 * Why by hand: no Debian C library compiles JSON schemas into token masks
 * (llama.cpp's GBNF machinery is C++ inside llama.cpp; outlines and
 * xgrammar are Python/C++). The method is llama.cpp's: the schema becomes a
 * context-free grammar over bytes (rules of alternatives of sequences of
 * byte sets and rule references, right-recursive), and a position in the
 * output is a set of parse stacks. A token is allowed when its bytes can be
 * fed from the current stacks without all of them dying. The vocabulary is
 * sorted by bytes once (ms_vocab_index), so the walk for a mask shares
 * prefixes and prunes a whole subtree at its first impossible byte; masks
 * are cached by parse state, which repeats while a string or number is being
 * written.
 *
 * Schema subset: type (string, number, integer, boolean, null, object,
 * array, or a list of them), properties / required / additionalProperties
 * (false or absent: no other keys; true or a schema: any other key), items,
 * minItems / maxItems, enum, const, anyOf / oneOf, $ref to #/$defs or
 * #/definitions. Properties come in the schema's order, optional ones may
 * be left out. Annotations (title, description, default, examples, format,
 * $schema, strict, ...) are ignored; validation keywords this grammar does
 * not enforce (pattern, minLength, minimum, ...) are refused, naming their
 * path. Whitespace between tokens is bounded (a newline and up to 16
 * spaces), so a model cannot run away in blanks. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "runtime/grammar.h"

/* ---- the grammar ------------------------------------------------------------------ */

enum { E_END = 0, E_CHARS, E_RULE };

typedef struct gelem {
    uint8_t kind;
    int32_t rule;
    uint8_t set[32];   /* E_CHARS: the bytes it takes */
} gelem;

typedef struct grule {
    gelem **alt;       /* each ends with E_END */
    int n_alt, cap;
} grule;

struct ms_grammar {
    grule *rules;
    int n_rules, cap;
    int root;
};

typedef struct gseq { gelem *e; int n, cap; } gseq;

typedef struct build {
    ms_grammar *g;
    const json_t *doc;         /* the whole schema, for $ref */
    json_t *refs;              /* "#/$defs/X" -> rule index */
    ms_err *err;
    int failed;
    int depth;
    int ws, value, string;     /* shared rules */
} build;

static int new_rule(build *b)
{
    ms_grammar *g = b->g;
    if (g->n_rules == g->cap) {
        int cap = g->cap ? g->cap * 2 : 32;
        grule *r = realloc(g->rules, (size_t)cap * sizeof *r);
        if (!r) {
            b->failed = 1;
            return 0;
        }
        g->rules = r;
        g->cap = cap;
    }
    memset(&g->rules[g->n_rules], 0, sizeof(grule));
    return g->n_rules++;
}

static void seq_push(build *b, gseq *s, gelem e)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        gelem *p = realloc(s->e, (size_t)cap * sizeof *p);
        if (!p) {
            b->failed = 1;
            return;
        }
        s->e = p;
        s->cap = cap;
    }
    s->e[s->n++] = e;
}

static void chars(build *b, gseq *s, const char *spec)
{
    /* spec: bytes, with "a-z" ranges and a leading '^' for the complement */
    gelem e = {.kind = E_CHARS};
    int neg = spec[0] == '^';
    const unsigned char *p = (const unsigned char *)spec + neg;
    while (*p) {
        unsigned lo = *p, hi = *p;
        if (p[1] == '-' && p[2]) {
            hi = p[2];
            p += 3;
        } else {
            p++;
        }
        for (unsigned c = lo; c <= hi; c++)
            e.set[c >> 3] |= (uint8_t)(1u << (c & 7));
    }
    if (neg)
        for (int i = 0; i < 32; i++)
            e.set[i] = (uint8_t)~e.set[i];
    seq_push(b, s, e);
}

static void byte(build *b, gseq *s, unsigned char c)
{
    gelem e = {.kind = E_CHARS};
    e.set[c >> 3] |= (uint8_t)(1u << (c & 7));
    seq_push(b, s, e);
}

static void lit(build *b, gseq *s, const char *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        byte(b, s, (unsigned char)t[i]);
}

static void ref(build *b, gseq *s, int rule)
{
    gelem e = {.kind = E_RULE, .rule = rule};
    seq_push(b, s, e);
}

/* Adds the sequence as an alternative of rule r (taking it over). */
static void add_alt(build *b, int r, gseq *s)
{
    gelem end = {.kind = E_END};
    seq_push(b, s, end);
    if (b->failed) {
        free(s->e);
        *s = (gseq){0};
        return;
    }
    grule *g = &b->g->rules[r];
    if (g->n_alt == g->cap) {
        int cap = g->cap ? g->cap * 2 : 2;
        gelem **a = realloc(g->alt, (size_t)cap * sizeof *a);
        if (!a) {
            b->failed = 1;
            free(s->e);
            *s = (gseq){0};
            return;
        }
        g->alt = a;
        g->cap = cap;
    }
    g->alt[g->n_alt++] = s->e;
    *s = (gseq){0};
}

static void add_empty(build *b, int r)
{
    gseq s = {0};
    add_alt(b, r, &s);
}

/* ---- JSON pieces ----------------------------------------------------------------------- */

/* ws: nothing, a space, or a newline and up to 16 spaces */
static int ws_rule(build *b)
{
    if (b->ws)
        return b->ws;
    int r = new_rule(b), sp = new_rule(b);
    b->ws = r;
    add_empty(b, r);
    gseq s = {0};
    byte(b, &s, ' ');
    add_alt(b, r, &s);
    byte(b, &s, '\n');
    ref(b, &s, sp);
    add_alt(b, r, &s);
    /* sp: up to 16 spaces, unrolled so that no rule recurses on blanks */
    int prev = new_rule(b);
    add_empty(b, prev);
    for (int k = 0; k < 15; k++) {
        int nr = new_rule(b);
        add_empty(b, nr);
        byte(b, &s, ' ');
        ref(b, &s, prev);
        add_alt(b, nr, &s);
        prev = nr;
    }
    add_empty(b, sp);
    byte(b, &s, ' ');
    ref(b, &s, prev);
    add_alt(b, sp, &s);
    return r;
}

static int string_rule(build *b)
{
    if (b->string)
        return b->string;
    int r = new_rule(b), body = new_rule(b), ch = new_rule(b);
    b->string = r;
    gseq s = {0};
    byte(b, &s, '"');
    ref(b, &s, body);
    byte(b, &s, '"');
    add_alt(b, r, &s);
    add_empty(b, body);
    ref(b, &s, ch);
    ref(b, &s, body);
    add_alt(b, body, &s);
    /* any byte but '"', '\\' and the controls; or an escape */
    chars(b, &s, "^\"\\\x01-\x1f");
    add_alt(b, ch, &s);
    byte(b, &s, '\\');
    chars(b, &s, "\"\\/bfnrt");
    add_alt(b, ch, &s);
    byte(b, &s, '\\');
    byte(b, &s, 'u');
    for (int i = 0; i < 4; i++)
        chars(b, &s, "0-9a-fA-F");
    add_alt(b, ch, &s);
    /* and NUL, which "^...\x01" left in: take it out */
    b->g->rules[ch].alt[0][0].set[0] &= (uint8_t)~1u;
    return r;
}

static int digits_rule(build *b)
{
    int r = new_rule(b);
    gseq s = {0};
    chars(b, &s, "0-9");
    add_alt(b, r, &s);
    chars(b, &s, "0-9");
    ref(b, &s, r);
    add_alt(b, r, &s);
    return r;
}

static int number_rule(build *b, int integer)
{
    int r = new_rule(b), intp = new_rule(b), digits = digits_rule(b);
    int frac = new_rule(b), exp = new_rule(b), sign = new_rule(b);
    gseq s = {0};
    add_empty(b, sign);
    byte(b, &s, '-');
    add_alt(b, sign, &s);
    byte(b, &s, '0');
    add_alt(b, intp, &s);
    chars(b, &s, "1-9");
    add_alt(b, intp, &s);
    chars(b, &s, "1-9");
    ref(b, &s, digits);
    add_alt(b, intp, &s);
    add_empty(b, frac);
    add_empty(b, exp);
    if (!integer) {
        byte(b, &s, '.');
        ref(b, &s, digits);
        add_alt(b, frac, &s);
        chars(b, &s, "eE");
        chars(b, &s, "-+");
        ref(b, &s, digits);
        add_alt(b, exp, &s);
        chars(b, &s, "eE");
        ref(b, &s, digits);
        add_alt(b, exp, &s);
    }
    ref(b, &s, sign);
    ref(b, &s, intp);
    ref(b, &s, frac);
    ref(b, &s, exp);
    add_alt(b, r, &s);
    return r;
}

static int literal_rule(build *b, const char *t)
{
    int r = new_rule(b);
    gseq s = {0};
    lit(b, &s, t, strlen(t));
    add_alt(b, r, &s);
    return r;
}

/* '[' ws (item (ws ',' ws item)*)? ws ']' with min / max items (max < 0: no
 * maximum); after(k) is what may follow the k-th item, unrolled up to the
 * bound that matters. */
static int array_rule(build *b, int item, int64_t min, int64_t max)
{
    int r = new_rule(b), ws = ws_rule(b);
    if (min < 0 || (max >= 0 && max < min)) {
        b->failed = 1;
        ms_err_set(b->err, MS_E_ARG, "schema: minItems %lld / maxItems %lld are not a range",
                   (long long)min, (long long)max);
        return r;
    }
    if (min > 64 || max > 64) {
        b->failed = 1;
        ms_err_set(b->err, MS_E_ARG, "schema: minItems / maxItems above 64 are not supported");
        return r;
    }
    gseq s = {0};
    if (max != 0) {
        int64_t top = max >= 0 ? max : (min > 1 ? min : 1);
        int after = new_rule(b);
        add_empty(b, after);
        if (max < 0) { /* after(top) = ε | ws ',' ws item after(top) */
            ref(b, &s, ws);
            byte(b, &s, ',');
            ref(b, &s, ws);
            ref(b, &s, item);
            ref(b, &s, after);
            add_alt(b, after, &s);
        }
        for (int64_t k = top - 1; k >= 1; k--) {
            int a = new_rule(b);
            if (k >= min)
                add_empty(b, a);
            ref(b, &s, ws);
            byte(b, &s, ',');
            ref(b, &s, ws);
            ref(b, &s, item);
            ref(b, &s, after);
            add_alt(b, a, &s);
            after = a;
        }
        byte(b, &s, '[');
        ref(b, &s, ws);
        ref(b, &s, item);
        ref(b, &s, after);
        ref(b, &s, ws);
        byte(b, &s, ']');
        add_alt(b, r, &s);
    }
    if (min == 0) {
        byte(b, &s, '[');
        ref(b, &s, ws);
        byte(b, &s, ']');
        add_alt(b, r, &s);
    }
    return r;
}

/* '{' ws (key ws ':' ws value (ws ',' ws key ws ':' ws value)*)? ws '}' */
static int free_object_rule(build *b, int value)
{
    int r = new_rule(b), ws = ws_rule(b), str = string_rule(b), member = new_rule(b),
        tail = new_rule(b);
    gseq s = {0};
    ref(b, &s, str);
    ref(b, &s, ws);
    byte(b, &s, ':');
    ref(b, &s, ws);
    ref(b, &s, value);
    add_alt(b, member, &s);
    add_empty(b, tail);
    ref(b, &s, ws);
    byte(b, &s, ',');
    ref(b, &s, ws);
    ref(b, &s, member);
    ref(b, &s, tail);
    add_alt(b, tail, &s);
    byte(b, &s, '{');
    ref(b, &s, ws);
    ref(b, &s, member);
    ref(b, &s, tail);
    ref(b, &s, ws);
    byte(b, &s, '}');
    add_alt(b, r, &s);
    byte(b, &s, '{');
    ref(b, &s, ws);
    byte(b, &s, '}');
    add_alt(b, r, &s);
    return r;
}

static int any_value(build *b)
{
    if (b->value)
        return b->value;
    int r = new_rule(b);
    b->value = r;
    gseq s = {0};
    int parts[] = {free_object_rule(b, r), array_rule(b, r, 0, -1), string_rule(b),
                   number_rule(b, 0), literal_rule(b, "true"), literal_rule(b, "false"),
                   literal_rule(b, "null")};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        ref(b, &s, parts[i]);
        add_alt(b, r, &s);
    }
    return r;
}

/* ---- schemas ------------------------------------------------------------------------- */

static int schema_rule(build *b, const json_t *sc, const char *path);

static int fail_at(build *b, const char *path, const char *what)
{
    if (!b->failed)
        ms_err_set(b->err, MS_E_ARG, "schema %s: %s", path, what);
    b->failed = 1;
    return new_rule(b);
}

/* The JSON text of a value as a literal (enum, const). */
static int const_rule(build *b, const json_t *v)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    int r = new_rule(b);
    if (!t) {
        b->failed = 1;
        return r;
    }
    gseq s = {0};
    lit(b, &s, t, strlen(t));
    add_alt(b, r, &s);
    free(t);
    return r;
}

static int object_rule(build *b, const json_t *sc, const char *path)
{
    const json_t *props = json_object_get(sc, "properties");
    const json_t *req = json_object_get(sc, "required");
    const json_t *addl = json_object_get(sc, "additionalProperties");
    if (props && !json_is_object(props))
        return fail_at(b, path, "\"properties\" must be an object");
    if (!props || !json_object_size(props)) {
        if (json_is_false(addl))
            return literal_rule(b, "{}");
        int value = json_is_object(addl) ? schema_rule(b, addl, path) : any_value(b);
        return free_object_rule(b, value);
    }
    if (addl && !json_is_false(addl))
        return fail_at(b, path, "properties with additionalProperties other than false are not "
                       "supported (list every property)");
    size_t n = json_object_size(props), k = 0;
    const char **names = calloc(n, sizeof *names);
    int *vals = calloc(n, sizeof *vals), *need = calloc(n, sizeof *need);
    int r = new_rule(b);
    if (!names || !vals || !need) {
        free(names);
        free(vals);
        free(need);
        b->failed = 1;
        return r;
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)props, key, v) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s.properties.%s", path, key);
        names[k] = key;
        vals[k] = schema_rule(b, v, sub);
        for (size_t i = 0; json_is_array(req) && i < json_array_size(req); i++)
            if (json_is_string(json_array_get(req, i)) &&
                !strcmp(json_string_value(json_array_get(req, i)), key))
                need[k] = 1;
        k++;
    }
    /* rest(i, first): the members from i on; `first` when none was written */
    int ws = ws_rule(b);
    int *rest[2];
    rest[0] = calloc(n + 1, sizeof(int));
    rest[1] = calloc(n + 1, sizeof(int));
    if (!rest[0] || !rest[1]) {
        b->failed = 1;
    } else {
        for (int f = 0; f < 2; f++) {
            rest[f][n] = new_rule(b);
            add_empty(b, rest[f][n]);
        }
        for (size_t i = n; i-- > 0;) {
            for (int f = 0; f < 2; f++) {
                int rr = rest[f][i] = new_rule(b);
                gseq s = {0};
                if (!f) {
                    ref(b, &s, ws);
                    byte(b, &s, ',');
                    ref(b, &s, ws);
                }
                json_t *ks = json_string(names[i]);
                char *kt = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
                json_decref(ks);
                if (kt)
                    lit(b, &s, kt, strlen(kt));
                free(kt);
                ref(b, &s, ws);
                byte(b, &s, ':');
                ref(b, &s, ws);
                ref(b, &s, vals[i]);
                ref(b, &s, rest[0][i + 1]);
                add_alt(b, rr, &s);
                if (!need[i]) {
                    ref(b, &s, rest[f][i + 1]);
                    add_alt(b, rr, &s);
                }
            }
        }
        gseq s = {0};
        byte(b, &s, '{');
        ref(b, &s, ws);
        ref(b, &s, rest[1][0]);
        ref(b, &s, ws);
        byte(b, &s, '}');
        add_alt(b, r, &s);
    }
    for (size_t i = 0; json_is_array(req) && i < json_array_size(req); i++) {
        const char *q = json_string_value(json_array_get(req, i));
        if (!q || !json_object_get(props, q)) {
            char why[320];
            snprintf(why, sizeof why, "\"required\" names \"%.200s\", which is not in "
                     "\"properties\"", q ? q : "?");
            fail_at(b, path, why);
        }
    }
    free(rest[0]);
    free(rest[1]);
    free(names);
    free(vals);
    free(need);
    return r;
}

static const char *const ignored_keys[] = {
    "title", "description", "default", "examples", "format", "$schema", "$id", "$comment",
    "strict", "name", "deprecated", "readOnly", "writeOnly", "nullable", "type", "properties",
    "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
    "anyOf", "oneOf", "$ref", "$defs", "definitions", "allOf", NULL};

static int typed_rule(build *b, const json_t *sc, const char *type, const char *path)
{
    if (!strcmp(type, "string")) return string_rule(b);
    if (!strcmp(type, "number")) return number_rule(b, 0);
    if (!strcmp(type, "integer")) return number_rule(b, 1);
    if (!strcmp(type, "boolean")) {
        int r = new_rule(b);
        gseq s = {0};
        lit(b, &s, "true", 4);
        add_alt(b, r, &s);
        lit(b, &s, "false", 5);
        add_alt(b, r, &s);
        return r;
    }
    if (!strcmp(type, "null")) return literal_rule(b, "null");
    if (!strcmp(type, "object")) return object_rule(b, sc, path);
    if (!strcmp(type, "array")) {
        const json_t *items = json_object_get(sc, "items");
        char sub[512];
        snprintf(sub, sizeof sub, "%s.items", path);
        int item = items ? schema_rule(b, items, sub) : any_value(b);
        const json_t *mn = json_object_get(sc, "minItems"), *mx = json_object_get(sc, "maxItems");
        return array_rule(b, item, json_is_integer(mn) ? json_integer_value(mn) : 0,
                          json_is_integer(mx) ? json_integer_value(mx) : -1);
    }
    char why[160];
    snprintf(why, sizeof why, "unknown type \"%.60s\"", type);
    return fail_at(b, path, why);
}

static int schema_rule(build *b, const json_t *sc, const char *path)
{
    if (b->failed)
        return 0;
    if (++b->depth > 64) {
        b->depth--;
        return fail_at(b, path, "nested deeper than 64");
    }
    int r;
    if (json_is_true(sc) || (json_is_object(sc) && !json_object_size(sc))) {
        r = any_value(b);
        goto done;
    }
    if (!json_is_object(sc)) {
        r = fail_at(b, path, "a schema must be an object (or true)");
        goto done;
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)sc, key, v) {
        int known = 0;
        for (int i = 0; ignored_keys[i]; i++)
            known |= !strcmp(ignored_keys[i], key);
        if (!known) {
            char why[200];
            snprintf(why, sizeof why, "the keyword \"%.60s\" is not supported by constrained "
                     "decoding", key);
            r = fail_at(b, path, why);
            goto done;
        }
    }
    const json_t *rf = json_object_get(sc, "$ref");
    if (rf) {
        const char *p = json_string_value(rf);
        const json_t *known = p ? json_object_get(b->refs, p) : NULL;
        if (known) {
            r = (int)json_integer_value(known);
            goto done;
        }
        const json_t *target = NULL;
        if (p && !strncmp(p, "#/$defs/", 8))
            target = json_object_get(json_object_get(b->doc, "$defs"), p + 8);
        else if (p && !strncmp(p, "#/definitions/", 14))
            target = json_object_get(json_object_get(b->doc, "definitions"), p + 14);
        else if (p && !strcmp(p, "#"))
            target = b->doc;
        if (!target) {
            r = fail_at(b, path, "$ref must name #, #/$defs/NAME or #/definitions/NAME");
            goto done;
        }
        /* a rule for the target, known before it is built (recursion) */
        r = new_rule(b);
        json_object_set_new(b->refs, p, json_integer(r));
        int t = schema_rule(b, target, p);
        gseq s = {0};
        ref(b, &s, t);
        add_alt(b, r, &s);
        goto done;
    }
    const json_t *alts = json_object_get(sc, "anyOf");
    if (!alts)
        alts = json_object_get(sc, "oneOf");
    const json_t *all = json_object_get(sc, "allOf");
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1) {
            r = fail_at(b, path, "allOf with more than one schema is not supported");
            goto done;
        }
        r = schema_rule(b, json_array_get(all, 0), path);
        goto done;
    }
    const json_t *en = json_object_get(sc, "enum"), *cn = json_object_get(sc, "const");
    if (cn) {
        r = const_rule(b, cn);
        goto done;
    }
    r = new_rule(b);
    gseq s = {0};
    if (en) {
        if (!json_is_array(en) || !json_array_size(en)) {
            r = fail_at(b, path, "enum must be a non-empty list");
            goto done;
        }
        for (size_t i = 0; i < json_array_size(en); i++) {
            ref(b, &s, const_rule(b, json_array_get(en, i)));
            add_alt(b, r, &s);
        }
        goto done;
    }
    if (alts) {
        if (!json_is_array(alts) || !json_array_size(alts)) {
            r = fail_at(b, path, "anyOf / oneOf must be a non-empty list");
            goto done;
        }
        for (size_t i = 0; i < json_array_size(alts); i++) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s.anyOf[%zu]", path, i);
            ref(b, &s, schema_rule(b, json_array_get(alts, i), sub));
            add_alt(b, r, &s);
        }
        goto done;
    }
    const json_t *ty = json_object_get(sc, "type");
    if (json_is_string(ty)) {
        ref(b, &s, typed_rule(b, sc, json_string_value(ty), path));
        add_alt(b, r, &s);
    } else if (json_is_array(ty) && json_array_size(ty)) {
        for (size_t i = 0; i < json_array_size(ty); i++) {
            const char *t = json_string_value(json_array_get(ty, i));
            if (!t) {
                r = fail_at(b, path, "type lists must hold strings");
                goto done;
            }
            ref(b, &s, typed_rule(b, sc, t, path));
            add_alt(b, r, &s);
        }
    } else if (json_object_get(sc, "properties")) {
        ref(b, &s, object_rule(b, sc, path));
        add_alt(b, r, &s);
    } else {
        ref(b, &s, any_value(b));
        add_alt(b, r, &s);
    }
done:
    b->depth--;
    return r;
}

void ms_grammar_free(ms_grammar *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_rules; i++) {
        for (int a = 0; a < g->rules[i].n_alt; a++)
            free(g->rules[i].alt[a]);
        free(g->rules[i].alt);
    }
    free(g->rules);
    free(g);
}

/* Ends a build: the grammar in *out, or the error (out of memory when the
 * build said nothing) with the grammar freed. */
static int build_end(build *b, ms_grammar **out, ms_error *err)
{
    json_decref(b->refs);
    if (b->failed) {
        if (!err->msg[0])
            ms_err_set(err, MS_E_NOMEM, "out of memory building a grammar");
        ms_grammar_free(b->g);
        return -1;
    }
    *out = b->g;
    return 0;
}

int ms_grammar_json(int n, const char *const *prefixes, const char *const *schemas,
                    const char *suffix, ms_grammar **out, ms_error *err)
{
    *out = NULL;
    ms_grammar *g = calloc(1, sizeof *g);
    if (!g)
        return ms_err_set(err, MS_E_NOMEM, "out of memory building a grammar");
    build b = {.g = g, .err = err, .refs = json_object()};
    int root = new_rule(&b), ws = ws_rule(&b);
    g->root = root;
    for (int i = 0; i < n && !b.failed; i++) {
        json_t *doc = NULL;
        int body;
        if (schemas && schemas[i]) {
            json_error_t je;
            doc = json_loads(schemas[i], JSON_DECODE_ANY, &je);
            if (!doc) {
                ms_err_set(err, MS_E_ARG, "schema: not JSON (line %d: %s)", je.line, je.text);
                b.failed = 1;
                break;
            }
            b.doc = doc;
            json_object_clear(b.refs);
            body = schema_rule(&b, doc, "$");
        } else {
            body = free_object_rule(&b, any_value(&b)); /* json_object: any object */
        }
        gseq s = {0};
        if (prefixes && prefixes[i])
            lit(&b, &s, prefixes[i], strlen(prefixes[i]));
        else
            ref(&b, &s, ws);
        ref(&b, &s, body);
        if (suffix)
            lit(&b, &s, suffix, strlen(suffix));
        add_alt(&b, root, &s);
        json_decref(doc);
        b.doc = NULL;
    }
    return build_end(&b, out, err);
}

/* ---- Qwen3-Coder's XML calls ----------------------------------------------------------- */

/* A parameter's text value: anything but "</" (which starts the closing
 * tag), so the value cannot swallow "</parameter>". */
static int xml_text_rule(build *b)
{
    int r = new_rule(b), ch = new_rule(b);
    gseq s = {0};
    add_empty(b, r);
    ref(b, &s, ch);
    ref(b, &s, r);
    add_alt(b, r, &s);
    chars(b, &s, "^<");
    add_alt(b, ch, &s);
    byte(b, &s, '<');
    chars(b, &s, "^/");
    add_alt(b, ch, &s);
    b->g->rules[ch].alt[0][0].set[0] &= (uint8_t)~1u; /* no NUL */
    b->g->rules[ch].alt[1][1].set[0] &= (uint8_t)~1u;
    return r;
}

const ms_xml_syntax ms_xml_qwen3_coder = {"<tool_call>\n<function=", ">\n", "<parameter=",
                                          ">\n", "\n</parameter>\n", "</function>\n</tool_call>"};
const ms_xml_syntax ms_xml_glm45 = {"<tool_call>", "\n", "<arg_key>", "</arg_key>\n<arg_value>",
                                    "</arg_value>\n", "</tool_call>"};

/* call_open NAME name_end, then each parameter as arg_open K key_end VALUE
 * value_end in the schema's order (optional ones may be left out; strings
 * as text, other types as JSON), then call_close. */
int ms_grammar_xml_calls(const ms_xml_syntax *sx, int n, const char *const *names,
                         const char *const *schemas, const char *open, ms_grammar **out,
                         ms_error *err)
{
    *out = NULL;
    ms_grammar *g = calloc(1, sizeof *g);
    if (!g)
        return ms_err_set(err, MS_E_NOMEM, "out of memory building a grammar");
    build b = {.g = g, .err = err, .refs = json_object()};
    int root = new_rule(&b), text = xml_text_rule(&b);
    g->root = root;
    for (int t = 0; t < n && !b.failed; t++) {
        json_error_t je;
        json_t *doc = json_loads(schemas[t] ? schemas[t] : "{}", 0, &je);
        const json_t *props = json_object_get(doc, "properties");
        const json_t *req = json_object_get(doc, "required");
        if (!json_is_object(doc)) {
            ms_err_set(err, MS_E_ARG, "tool %s: parameters must be a JSON object", names[t]);
            b.failed = 1;
            json_decref(doc);
            break;
        }
        b.doc = doc;
        json_object_clear(b.refs);
        size_t np = json_object_size(props), k = 0;
        int *rest = calloc(np + 1, sizeof *rest), *val = calloc(np + 1, sizeof *val);
        int *need = calloc(np + 1, sizeof *need);
        const char **keys = calloc(np + 1, sizeof *keys);
        if (!rest || !val || !need || !keys) {
            b.failed = 1;
        } else {
            const char *key;
            const json_t *v;
            json_object_foreach((json_t *)props, key, v) {
                char path[300];
                snprintf(path, sizeof path, "%s.properties.%s", names[t], key);
                const char *ty = json_string_value(json_object_get(v, "type"));
                keys[k] = key;
                val[k] = ty && !strcmp(ty, "string") && !json_object_get(v, "enum")
                       ? text : schema_rule(&b, v, path);
                for (size_t i = 0; json_is_array(req) && i < json_array_size(req); i++)
                    need[k] |= !strcmp(json_string_value(json_array_get(req, i)) ?
                                       json_string_value(json_array_get(req, i)) : "", key);
                k++;
            }
            rest[np] = new_rule(&b);
            add_empty(&b, rest[np]);
            for (size_t i = np; i-- > 0;) {
                gseq s = {0};
                rest[i] = new_rule(&b);
                lit(&b, &s, sx->arg_open, strlen(sx->arg_open));
                lit(&b, &s, keys[i], strlen(keys[i]));
                lit(&b, &s, sx->key_end, strlen(sx->key_end));
                ref(&b, &s, val[i]);
                lit(&b, &s, sx->value_end, strlen(sx->value_end));
                ref(&b, &s, rest[i + 1]);
                add_alt(&b, rest[i], &s);
                if (!need[i]) {
                    ref(&b, &s, rest[i + 1]);
                    add_alt(&b, rest[i], &s);
                }
            }
            gseq s = {0};
            if (open)
                lit(&b, &s, open, strlen(open));
            lit(&b, &s, sx->call_open, strlen(sx->call_open));
            lit(&b, &s, names[t], strlen(names[t]));
            lit(&b, &s, sx->name_end, strlen(sx->name_end));
            ref(&b, &s, rest[0]);
            lit(&b, &s, sx->call_close, strlen(sx->call_close));
            add_alt(&b, root, &s);
        }
        free(rest);
        free(val);
        free(need);
        free(keys);
        json_decref(doc);
        b.doc = NULL;
    }
    return build_end(&b, out, err);
}

/* ---- parse stacks -------------------------------------------------------------------- */

typedef struct snode {
    const gelem *pos;
    const struct snode *next;
} snode;

/* A bump region with marks, for the stacks of a state and of a mask walk. */
typedef struct rchunk { struct rchunk *prev; size_t used, cap; _Alignas(16) char mem[]; } rchunk;
typedef struct region { rchunk *top; } region;
typedef struct rmark { rchunk *top; size_t used; } rmark;

static void *ralloc(region *r, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!r->top || r->top->cap - r->top->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        rchunk *c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->prev = r->top;
        c->used = 0;
        c->cap = cap;
        r->top = c;
    }
    void *p = r->top->mem + r->top->used;
    r->top->used += n;
    return p;
}

static rmark rmark_get(const region *r) { return (rmark){r->top, r->top ? r->top->used : 0}; }

static void rmark_reset(region *r, rmark m)
{
    while (r->top && r->top != m.top) {
        rchunk *p = r->top->prev;
        free(r->top);
        r->top = p;
    }
    if (r->top)
        r->top->used = m.used;
}

static void rfree(region *r)
{
    rmark_reset(r, (rmark){NULL, 0});
}

#define MAX_STACKS 512

typedef struct stacks {
    const snode **s;     /* NULL entry: the grammar is complete there */
    int n;
} stacks;

static int same_stack(const snode *a, const snode *b)
{
    while (a && b) {
        if (a == b)
            return 1;
        if (a->pos != b->pos)
            return 0;
        a = a->next;
        b = b->next;
    }
    return a == b;
}

typedef struct walker {
    const ms_grammar *g;
    region *r;
    const snode **buf;   /* output stacks being collected */
    int n, cap, overflow;
} walker;

static void add_stack(walker *w, const snode *s)
{
    for (int i = 0; i < w->n; i++)
        if (same_stack(w->buf[i], s))
            return;
    if (w->n == w->cap) {
        w->overflow = 1;
        return;
    }
    w->buf[w->n++] = s;
}

/* Expands a position until its top is a byte set (or the stack ends). */
static void expand(walker *w, const gelem *pos, const snode *rest, int depth)
{
    if (depth > 256) {
        w->overflow = 1;
        return;
    }
    while (pos->kind == E_END) {
        if (!rest) {
            add_stack(w, NULL);
            return;
        }
        pos = rest->pos;
        rest = rest->next;
    }
    if (pos->kind == E_CHARS) {
        snode *n = ralloc(w->r, sizeof *n);
        if (!n) {
            w->overflow = 1;
            return;
        }
        n->pos = pos;
        n->next = rest;
        add_stack(w, n);
        return;
    }
    const grule *ru = &w->g->rules[pos->rule];
    /* the continuation after the reference; a reference that ends its
     * sequence continues with `rest` itself (no node), so right recursion
     * (strings, digits) keeps the stack the same depth */
    const snode *cont = rest;
    if (pos[1].kind != E_END) {
        snode *c = ralloc(w->r, sizeof *c);
        if (!c) {
            w->overflow = 1;
            return;
        }
        c->pos = pos + 1;
        c->next = rest;
        cont = c;
    }
    for (int a = 0; a < ru->n_alt; a++)
        expand(w, ru->alt[a], cont, depth + 1);
}

/* The stacks after byte c (into out; n returned, -1 on overflow). */
static int step(const ms_grammar *g, region *r, const stacks *in, unsigned char c,
                const snode **out)
{
    walker w = {.g = g, .r = r, .buf = out, .cap = MAX_STACKS};
    for (int i = 0; i < in->n; i++) {
        const snode *s = in->s[i];
        if (!s || !(s->pos->set[c >> 3] & (1u << (c & 7))))
            continue;
        expand(&w, s->pos + 1, s->next, 0);
    }
    return w.overflow ? -1 : w.n;
}

/* ---- the matcher state --------------------------------------------------------------- */

struct ms_gstate {
    const ms_grammar *g;
    region keep;          /* the current stacks */
    region scratch;       /* mask walks */
    stacks cur;
    const snode **bufs;   /* MAX_STACKS per trie depth, for the mask walk */
    int buf_depth;
    /* mask cache: by state */
    struct mcache { uint64_t key; uint8_t *mask; } cache[32];
    int cache_next;
    int32_t n_ids;
};

static const snode *copy_stack(region *r, const snode *s)
{
    if (!s)
        return NULL;
    snode *n = ralloc(r, sizeof *n);
    if (!n)
        return NULL;
    n->pos = s->pos;
    n->next = copy_stack(r, s->next);
    return n;
}

int ms_gstate_new(const ms_grammar *g, ms_gstate **out, ms_error *err)
{
    *out = NULL;
    ms_gstate *st = calloc(1, sizeof *st);
    if (!st)
        return ms_err_set(err, MS_E_NOMEM, "out of memory for a grammar state");
    st->g = g;
    st->cur.s = calloc(MAX_STACKS, sizeof *st->cur.s);
    walker w = {.g = g, .r = &st->keep, .buf = st->cur.s, .cap = MAX_STACKS};
    const grule *root = &g->rules[g->root];
    for (int a = 0; st->cur.s && a < root->n_alt; a++)
        expand(&w, root->alt[a], NULL, 0);
    st->cur.n = w.n;
    if (!st->cur.s || w.overflow) {
        ms_gstate_free(st);
        return ms_err_set(err, MS_E_ARG, "the grammar is too ambiguous (more than %d parse "
                          "stacks)", MAX_STACKS);
    }
    *out = st;
    return 0;
}

void ms_gstate_free(ms_gstate *s)
{
    if (!s)
        return;
    rfree(&s->keep);
    rfree(&s->scratch);
    for (int i = 0; i < 32; i++)
        free(s->cache[i].mask);
    free(s->cur.s);
    free(s->bufs);
    free(s);
}

int ms_gstate_feed(ms_gstate *st, const char *bytes, size_t n)
{
    const snode **a = calloc(MAX_STACKS, sizeof *a), **b2 = calloc(MAX_STACKS, sizeof *b2);
    region tmp = {0};
    int ok = a && b2;
    stacks cur = st->cur;
    for (size_t i = 0; ok && i < n; i++) {
        const snode **dst = i % 2 ? b2 : a;
        int k = step(st->g, &tmp, &cur, (unsigned char)bytes[i], dst);
        if (k <= 0)
            ok = 0;
        cur = (stacks){dst, k};
    }
    if (ok) {
        /* keep copies in a fresh region; drop the old one */
        region keep = {0};
        for (int i = 0; i < cur.n; i++)
            st->cur.s[i] = copy_stack(&keep, cur.s[i]);
        st->cur.n = cur.n;
        rfree(&st->keep);
        st->keep = keep;
    }
    rfree(&tmp);
    free(a);
    free(b2);
    return ok;
}

int ms_gstate_complete(const ms_gstate *st)
{
    for (int i = 0; i < st->cur.n; i++)
        if (!st->cur.s[i])
            return 1;
    return 0;
}

int ms_gstate_more(const ms_gstate *st)
{
    for (int i = 0; i < st->cur.n; i++)
        if (st->cur.s[i])
            return 1;
    return 0;
}

/* ---- the vocabulary index ------------------------------------------------------------ */

struct ms_vocab_index {
    int32_t n;          /* ids covered */
    int32_t *order;     /* ids sorted by their bytes */
    uint8_t **bytes;    /* per id */
    uint32_t *len;
    int max_len;
};

static const ms_vocab_index *sort_vi;

static int by_bytes(const void *pa, const void *pb)
{
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint32_t la = sort_vi->len[a], lb = sort_vi->len[b], m = la < lb ? la : lb;
    int c = m ? memcmp(sort_vi->bytes[a], sort_vi->bytes[b], m) : 0;
    if (c)
        return c;
    return (la > lb) - (la < lb);
}

int ms_vocab_index_open(const ms_tokenizer *tok, ms_vocab_index **out, ms_error *err)
{
    *out = NULL;
    int32_t n = ms_tokenizer_n_ids(tok);
    ms_vocab_index *v = calloc(1, sizeof *v);
    if (!v)
        return ms_err_set(err, MS_E_NOMEM, "out of memory indexing the vocabulary");
    v->n = n;
    v->order = malloc((size_t)n * sizeof *v->order);
    v->bytes = calloc((size_t)n, sizeof *v->bytes);
    v->len = calloc((size_t)n, sizeof *v->len);
    if (!v->order || !v->bytes || !v->len) {
        ms_vocab_index_close(v);
        return ms_err_set(err, MS_E_NOMEM, "out of memory indexing the vocabulary");
    }
    for (int32_t i = 0; i < n; i++) {
        char *t = NULL;
        size_t len = 0;
        ms_error e2 = {0};
        if (ms_tokenizer_decode(tok, &i, 1, &t, &len, &e2) == 0) {
            v->bytes[i] = (uint8_t *)t;
            v->len[i] = (uint32_t)len;
            if ((int)len > v->max_len)
                v->max_len = (int)len;
        }
        v->order[i] = i;
    }
    sort_vi = v; /* qsort has no context argument; this runs once per tokenizer */
    qsort(v->order, (size_t)n, sizeof *v->order, by_bytes);
    sort_vi = NULL;
    *out = v;
    return 0;
}

void ms_vocab_index_close(ms_vocab_index *v)
{
    if (!v)
        return;
    for (int32_t i = 0; v->bytes && i < v->n; i++)
        free(v->bytes[i]);
    free(v->bytes);
    free(v->len);
    free(v->order);
    free(v);
}

/* ---- masks ------------------------------------------------------------------------------ */

static uint64_t state_key(const stacks *s)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)s->n;
    for (int i = 0; i < s->n; i++)
        for (const snode *p = s->s[i];; p = p->next) {
            h = (h ^ (uint64_t)(uintptr_t)(p ? p->pos : NULL)) * 1099511628211ull;
            if (!p)
                break;
        }
    return h;
}

typedef struct mwalk {
    const ms_vocab_index *v;
    ms_gstate *st;
    uint8_t *allow;
} mwalk;

/* Tokens order[lo, hi) share their first `depth` bytes, which took the
 * state to `cur` (non-empty): each ending here is allowed; the others are
 * grouped by their next byte. */
static void walk(mwalk *m, int32_t lo, int32_t hi, int depth, const stacks *cur)
{
    const ms_vocab_index *v = m->v;
    int32_t i = lo;
    while (i < hi && v->len[v->order[i]] == (uint32_t)depth) {
        if (depth > 0)
            m->allow[v->order[i]] = 1;
        i++;
    }
    while (i < hi) {
        unsigned char c = v->bytes[v->order[i]][depth];
        int32_t j = i + 1;
        while (j < hi && v->bytes[v->order[j]][depth] == c)
            j++;
        rmark mk = rmark_get(&m->st->scratch);
        const snode **dst = m->st->bufs + (size_t)(depth + 1) * MAX_STACKS;
        int k = step(m->st->g, &m->st->scratch, cur, c, dst);
        if (k > 0) {
            stacks nx = {dst, k};
            walk(m, i, j, depth + 1, &nx);
        }
        rmark_reset(&m->st->scratch, mk);
        i = j;
    }
}

int ms_gstate_mask(ms_gstate *st, const ms_vocab_index *v, uint8_t *allow, ms_error *err)
{
    uint64_t key = state_key(&st->cur);
    for (int i = 0; i < 32; i++)
        if (st->cache[i].mask && st->cache[i].key == key && st->n_ids == v->n) {
            memcpy(allow, st->cache[i].mask, (size_t)v->n);
            return 0;
        }
    if (!st->bufs || st->buf_depth < v->max_len + 2) {
        free(st->bufs);
        st->buf_depth = v->max_len + 2;
        st->bufs = calloc((size_t)st->buf_depth * MAX_STACKS, sizeof *st->bufs);
        if (!st->bufs)
            return ms_err_set(err, MS_E_NOMEM, "out of memory for a token mask");
    }
    memset(allow, 0, (size_t)v->n);
    mwalk m = {v, st, allow};
    walk(&m, 0, v->n, 0, &st->cur);
    rfree(&st->scratch);
    struct mcache *c = &st->cache[st->cache_next];
    st->cache_next = (st->cache_next + 1) % 32;
    if (!c->mask)
        c->mask = malloc((size_t)v->n);
    if (c->mask) {
        memcpy(c->mask, allow, (size_t)v->n);
        c->key = key;
        st->n_ids = v->n;
    }
    return 0;
}

int ms_vocab_index_feed(const ms_vocab_index *v, ms_gstate *s, int32_t id)
{
    if (id < 0 || id >= v->n || !v->len[id])
        return 0;
    return ms_gstate_feed(s, (const char *)v->bytes[id], v->len[id]);
}

int32_t ms_vocab_index_n(const ms_vocab_index *v)
{
    return v->n;
}
