/* Oniguruma -> PCRE2 pattern rewriting for tokenizer.json Split regexes.
 *
 * HF tokenizers compiles Split patterns with Oniguruma (Ruby syntax, UTF-8);
 * we compile them with PCRE2 (PCRE2_UTF | PCRE2_UCP). Most of the syntax
 * means the same in both; these constructs do not, and are rewritten:
 *   \s  Oniguruma: U+0009-U+000D, U+0085 and Zs/Zl/Zp. PCRE2 with UCP adds
 *       U+180E (via \h), so \s -> [\t-\r\x{85}\p{Z}] and \S -> its complement.
 *   \w  Oniguruma (measured on the reference): Alphabetic, Mark,
 *       Decimal_Number, Connector_Punctuation, and U+00B2 U+00B3 U+00B9
 *       U+00BC-U+00BE (a Latin-1 quirk); PCRE2: \p{L}, \p{N} and '_'.
 *   \p{X} (a general category), \d (= \p{Nd}): the reference's Oniguruma has
 *       a newer Unicode than Debian 12's PCRE2 (14.0), so the code points it
 *       puts in X that PCRE2 does not know are added: [\p{X}<extras>]
 *       (tokenizer_unicode_data.c). Other properties (scripts, ...) are
 *       refused, their tables could not be matched.
 *   \h  Oniguruma: a hex digit (PCRE2: horizontal space) -> [0-9a-fA-F].
 *   \v  Oniguruma: U+000B (PCRE2: vertical space class) -> \x{0B}.
 *   \uHHHH (Oniguruma) -> \x{HHHH}.
 *   .   never matches \n in Oniguruma -> [^\n] whatever PCRE2's newline setting.
 *   {,n} (Oniguruma: {0,n}; PCRE2 10.42: literal) -> {0,n}.
 *   (?i:...) / (?i) are kept: both engines fold case with Unicode simple
 *       case folding ("'ſ" matches (?i:'s) in both); a \p class under (?i)
 *       is refused (PCRE2 never folds \p{Lu}; Oniguruma's rule differs).
 * Refused (the reason names the construct): \b \B \A \z \Z \G \R \X \K and
 * other escapes not listed, ^ and $ outside a class (Ruby: line anchors),
 * nested classes, class intersection &&, POSIX brackets, inline options
 * other than i, and any (?...) group other than (?: (?= (?! (?<= (?<! (?>. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer.h"

#define ONIG_SPACE "\\t-\\r\\x{85}\\p{Z}"

typedef struct rx {
    const char *p, *end;
    ms_buf *out;
    char *why;
    size_t why_cap;
    int ci[64];   /* case-insensitive flag per open group; ci[0] = top level */
    int depth;
    uint32_t *ext; /* extra ranges (lo, hi) of the class being written */
    size_t n_ext, cap_ext;
} rx;

static int put(rx *r, const char *s)
{
    return ms_buf_put(r->out, s, strlen(s));
}

static int refuse(rx *r, const char *what)
{
    snprintf(r->why, r->why_cap, "%s", what);
    return -1;
}

/* Copies one whole UTF-8 character (or byte) at r->p. */
static int copy_char(rx *r)
{
    size_t k = 1;
    while (r->p + k < r->end && ((uint8_t)r->p[k] & 0xC0) == 0x80)
        k++;
    int rc = ms_buf_put(r->out, r->p, k);
    r->p += k;
    return rc;
}

/* Appends \p{cat} to the class being written and queues the ranges the
 * reference adds to it; -1 when cat is not a general category, -2 on OOM. */
static int category_items(rx *r, const char *cat, size_t n)
{
    static const char WORD[] = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
    for (int i = 0; i < ms_n_regex_extras; i++) {
        const ms_regex_extra *x = &ms_regex_extras[i];
        if (strlen(x->category) != n || memcmp(x->category, cat, n))
            continue;
        if (!strcmp(x->category, "w") ? put(r, WORD)
                                      : put(r, "\\p{") || put(r, x->category) || put(r, "}"))
            return -2;
        size_t need = r->n_ext + 2 * (size_t)x->n;
        if (need > r->cap_ext) {
            size_t cap = need * 2;
            uint32_t *p = realloc(r->ext, cap * sizeof *p);
            if (!p)
                return -2;
            r->ext = p;
            r->cap_ext = cap;
        }
        memcpy(r->ext + r->n_ext, x->ranges, 2 * (size_t)x->n * sizeof *x->ranges);
        r->n_ext += 2 * (size_t)x->n;
        return 0;
    }
    return -1;
}

static int cmp_range(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Writes the queued ranges, merged, just before the class closes: after all
 * of its \p items, so that a character of a category never scans them. */
static int flush_extras(rx *r)
{
    if (r->n_ext)
        qsort(r->ext, r->n_ext / 2, 2 * sizeof *r->ext, cmp_range);
    size_t i = 0;
    while (i < r->n_ext) {
        uint32_t lo = r->ext[i], hi = r->ext[i + 1];
        for (i += 2; i < r->n_ext && r->ext[i] <= hi + 1; i += 2)
            if (r->ext[i + 1] > hi)
                hi = r->ext[i + 1];
        char b[32];
        if (lo == hi)
            snprintf(b, sizeof b, "\\x{%X}", lo);
        else
            snprintf(b, sizeof b, "\\x{%X}-\\x{%X}", lo, hi);
        if (put(r, b))
            return -1;
    }
    r->n_ext = 0;
    return 0;
}

/* One or more categories (space separated in cats) as a class or as class
 * items: negate -> [^...]; in_class -> bare items (negate refused). */
static int categories(rx *r, const char *cats, int negate, int in_class)
{
    if (in_class && negate)
        return refuse(r, "a negated class escape (\\P, \\D, \\W) inside a character class");
    if (!in_class && put(r, negate ? "[^" : "["))
        return -1;
    for (const char *c = cats; *c;) {
        size_t n = strcspn(c, " ");
        if (category_items(r, c, n))
            return -1;
        c += n + (c[n] == ' ');
    }
    return in_class ? 0 : flush_extras(r) || put(r, "]") ? -1 : 0;
}

/* \p{X}, \pX, \P{X}; r->p just after the 'p' or 'P'. */
static int property(rx *r, int negate, int in_class)
{
    char name[16];
    size_t n = 0;
    if (r->p < r->end && *r->p == '{') {
        const char *close = memchr(r->p, '}', (size_t)(r->end - r->p));
        if (!close || (size_t)(close - r->p - 1) >= sizeof name)
            return refuse(r, "a malformed \\p{...}");
        n = (size_t)(close - r->p - 1);
        memcpy(name, r->p + 1, n);
        r->p = close + 1;
    } else if (r->p < r->end && isalpha((unsigned char)*r->p)) {
        name[n++] = *r->p++;
    } else {
        return refuse(r, "a malformed \\p");
    }
    name[n] = 0;
    int rc = categories(r, name, negate, in_class);
    if (rc && !r->why[0]) {
        char what[64];
        snprintf(what, sizeof what, "the property \\p{%s} (only general categories)", name);
        return refuse(r, what);
    }
    return rc;
}

/* \uHHHH -> \x{HHHH}; r->p at the 'u'. */
static int unicode_escape(rx *r)
{
    if (r->end - r->p < 5)
        return refuse(r, "a truncated \\u escape");
    for (int i = 1; i <= 4; i++)
        if (!isxdigit((unsigned char)r->p[i]))
            return refuse(r, "a malformed \\u escape");
    char b[16];
    snprintf(b, sizeof b, "\\x{%.4s}", r->p + 1);
    r->p += 5;
    return put(r, b);
}

/* An escape (r->p just after the backslash); in_class: inside [...]. */
static int escape(rx *r, int in_class)
{
    if (r->p >= r->end)
        return refuse(r, "a trailing backslash");
    char c = *r->p;
    int ci = r->ci[r->depth];
    if (!isalnum((unsigned char)c)) { /* an escaped punctuation or other character */
        if (ms_buf_put(r->out, "\\", 1))
            return -1;
        return copy_char(r);
    }
    if (c == 'u')
        return unicode_escape(r);
    r->p++;
    switch (c) {
    case 's': return put(r, in_class ? ONIG_SPACE : "[" ONIG_SPACE "]");
    case 'S':
        if (in_class)
            return refuse(r, "\\S inside a character class");
        return put(r, "[^" ONIG_SPACE "]");
    case 'w':
    case 'W':
        return categories(r, "w", c == 'W', in_class);
    case 'd':
    case 'D':
        return categories(r, "Nd", c == 'D', in_class);
    case 'h': return put(r, in_class ? "0-9a-fA-F" : "[0-9a-fA-F]");
    case 'H':
        if (in_class)
            return refuse(r, "\\H inside a character class");
        return put(r, "[^0-9a-fA-F]");
    case 'v': return put(r, "\\x{0B}");
    case 'p':
    case 'P':
        if (ci)
            return refuse(r, "\\p under (?i)");
        return property(r, c == 'P', in_class);
    case 'x': case 'n': case 'r': case 't': case 'f': case 'e':
    case 'a': case '0': case '1': case '2': case '3': case '4': case '5': case '6':
    case '7': case '8': case '9': {
        char b[3] = {'\\', c, 0};
        return put(r, b);
    }
    default: {
        char what[48];
        snprintf(what, sizeof what, "the escape \\%c", c);
        return refuse(r, what);
    }
    }
}

static int char_class(rx *r)
{
    r->p++; /* '[' */
    if (put(r, "["))
        return -1;
    if (r->p < r->end && *r->p == '^') {
        r->p++;
        if (put(r, "^"))
            return -1;
    }
    int first = 1;
    while (r->p < r->end) {
        char c = *r->p;
        if (c == ']' && !first) {
            r->p++;
            return flush_extras(r) || put(r, "]") ? -1 : 0;
        }
        first = 0;
        if (c == '\\') {
            r->p++;
            if (escape(r, 1))
                return -1;
        } else if (c == '[') {
            return refuse(r, r->p + 1 < r->end && r->p[1] == ':'
                                 ? "a POSIX bracket expression" : "a nested character class");
        } else if (c == '&' && r->p + 1 < r->end && r->p[1] == '&') {
            return refuse(r, "a class intersection (&&)");
        } else if (copy_char(r)) {
            return -1;
        }
    }
    return refuse(r, "an unterminated character class");
}

/* "(?" constructs; r->p at '('. */
static int group_open(rx *r)
{
    if (r->depth + 1 >= (int)(sizeof r->ci / sizeof r->ci[0]))
        return refuse(r, "groups nested too deeply");
    int ci = r->ci[r->depth];
    const char *p = r->p + 1;
    if (p >= r->end || *p != '?') {
        r->p++;
        r->ci[++r->depth] = ci;
        return put(r, "(");
    }
    static const char *const kept[] = {"?:", "?=", "?!", "?<=", "?<!", "?>"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        size_t k = strlen(kept[i]);
        if ((size_t)(r->end - p) >= k && !memcmp(p, kept[i], k)) {
            r->p = p + k;
            r->ci[++r->depth] = ci;
            return put(r, "(") || put(r, kept[i]) ? -1 : 0;
        }
    }
    if (r->end - p >= 3 && !memcmp(p, "?i:", 3)) {
        r->p = p + 3;
        r->ci[++r->depth] = 1;
        return put(r, "(?i:");
    }
    if (r->end - p >= 3 && !memcmp(p, "?i)", 3)) {
        r->p = p + 3;
        r->ci[r->depth] = 1; /* to the end of the enclosing group */
        return put(r, "(?i)");
    }
    return refuse(r, "a (?...) group other than (?: (?= (?! (?<= (?<! (?> (?i:");
}

int ms_onig_to_pcre2(const char *pattern, ms_buf *out, char *why, size_t why_cap)
{
    rx r = {.p = pattern, .end = pattern + strlen(pattern), .out = out, .why = why,
            .why_cap = why_cap};
    why[0] = 0;
    int rc = 0;
    while (r.p < r.end) {
        char c = *r.p;
        if (c == '\\') {
            r.p++;
            rc = escape(&r, 0);
        } else if (c == '[') {
            rc = char_class(&r);
        } else if (c == '(') {
            rc = group_open(&r);
        } else if (c == ')') {
            if (r.depth == 0) {
                rc = refuse(&r, "an unbalanced ')'");
                break;
            }
            r.depth--;
            r.p++;
            rc = put(&r, ")");
        } else if (c == '^' || c == '$') {
            rc = refuse(&r, "an anchor ^ or $ (line anchors in Oniguruma)");
        } else if (c == '.') {
            r.p++;
            rc = put(&r, "[^\\n]");
        } else if (c == '{' && r.p + 1 < r.end && r.p[1] == ',') {
            r.p += 2;
            rc = put(&r, "{0,");
        } else {
            rc = copy_char(&r);
        }
        if (rc)
            break;
    }
    if (!rc && r.depth != 0)
        rc = refuse(&r, "an unclosed group");
    if (!rc)
        rc = ms_buf_put(out, "", 1); /* NUL-terminate */
    free(r.ext);
    return rc ? -1 : 0;
}
