/* The large sections of tokenizer.json: model.vocab (~200k entries) and
 * model.merges (~450k pairs), read by a small strict JSON scanner straight
 * into hash tables (a general DOM parser spends most of a second on them).
 *
 * Refused: a value of the wrong JSON type, a duplicate token or id in the
 * vocab, an id outside 0 .. 2^24-1, a merge that is not two tokens of the
 * vocab ("a b" string form: exactly one space, as HF's parser) or whose
 * concatenation is not in the vocab, and a pair listed twice. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer.h"

#define MAX_ID (1 << 24)

/* ---- JSON scanning ----------------------------------------------------------------- */

const char *ms_json_skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static const char *hex4(const char *p, const char *end, uint32_t *v)
{
    if (end - p < 4)
        return NULL;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return NULL;
        *v = *v << 4 | (uint32_t)h;
    }
    return p + 4;
}

const char *ms_json_scan_string(const char *p, const char *end, ms_buf *out)
{
    if (p >= end || *p != '"')
        return NULL;
    p++;
    for (;;) {
        const char *run = p;
        while (p < end && *p != '"' && *p != '\\' && (uint8_t)*p >= 0x20)
            p++;
        if (p > run) {
            if (ms_utf8_valid_prefix((const uint8_t *)run, (size_t)(p - run)) != (size_t)(p - run))
                return NULL;
            if (ms_buf_put(out, run, (size_t)(p - run)))
                return NULL;
        }
        if (p >= end || (uint8_t)*p < 0x20)
            return NULL;
        if (*p == '"')
            return p + 1;
        /* escape */
        if (++p >= end)
            return NULL;
        char c = *p++, e;
        switch (c) {
        case '"': e = '"'; break;
        case '\\': e = '\\'; break;
        case '/': e = '/'; break;
        case 'b': e = '\b'; break;
        case 'f': e = '\f'; break;
        case 'n': e = '\n'; break;
        case 'r': e = '\r'; break;
        case 't': e = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (!(p = hex4(p, end, &cp)))
                return NULL;
            if (cp >= 0xDC00 && cp < 0xE000)
                return NULL; /* lone trailing surrogate */
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, end, &lo) ||
                    lo < 0xDC00 || lo >= 0xE000)
                    return NULL; /* lone leading surrogate */
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            uint8_t b[4];
            if (ms_buf_put(out, b, ms_utf8_put(b, cp)))
                return NULL;
            continue;
        }
        default: return NULL;
        }
        if (ms_buf_put(out, &e, 1))
            return NULL;
    }
}

/* Position after the closing quote of the string whose opening quote is at
 * p, or NULL; escapes are honoured, the content is not checked. */
static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end;) {
        const char *q = memchr(p, '"', (size_t)(end - p));
        if (!q)
            return NULL;
        size_t bs = 0; /* a quote preceded by an odd run of backslashes is escaped */
        while (q - bs > p && q[-1 - (ptrdiff_t)bs] == '\\')
            bs++;
        if (!(bs & 1))
            return q + 1;
        p = q + 1;
    }
    return NULL;
}

const char *ms_json_skip_value(const char *p, const char *end, int depth)
{
    p = ms_json_skip_ws(p, end);
    if (p >= end || depth > 128)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = ms_json_skip_ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (!(p = ms_json_skip_value(p, end, depth + 1)))
                    return NULL;
                p = ms_json_skip_ws(p, end);
                if (p >= end || *p++ != ':')
                    return NULL;
            }
            if (!(p = ms_json_skip_value(p, end, depth + 1)))
                return NULL;
            p = ms_json_skip_ws(p, end);
            if (p >= end)
                return NULL;
            if (*p == close)
                return p + 1;
            if (*p++ != ',')
                return NULL;
        }
    }
    /* number or literal */
    const char *s = p;
    while (p < end && (strchr("+-.eE", *p) || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z')))
        p++;
    return p > s ? p : NULL;
}

/* ---- string arena and hashing ------------------------------------------------------- */

int64_t ms_tok_str_add(struct ms_tokenizer *tok, const void *s, size_t n)
{
    if (tok->strs_cap - tok->strs_n < n + 1) {
        size_t cap = tok->strs_cap ? tok->strs_cap : 1 << 20;
        while (cap - tok->strs_n < n + 1)
            cap *= 2;
        char *p = realloc(tok->strs, cap);
        if (!p)
            return -1;
        tok->strs = p;
        tok->strs_cap = cap;
    }
    int64_t off = (int64_t)tok->strs_n;
    if (n) /* an empty key has no bytes, maybe not even a buffer */
        memcpy(tok->strs + off, s, n);
    tok->strs[off + (int64_t)n] = 0;
    tok->strs_n += n + 1;
    return off;
}

static uint64_t hash_bytes(const void *s, size_t n)
{
    const uint8_t *p = s;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 33; /* finalizer of MurmurHash3: every output bit depends on every byte */
    h *= 0xff51afd7ed558ccdull;
    return h ^ h >> 33;
}

static uint64_t hash_pair(int32_t a, int32_t b)
{
    uint64_t x = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ x >> 33;
}

static uint32_t table_size(int64_t n)
{
    uint32_t cap = 1024;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

int32_t ms_tok_vocab_find(const struct ms_tokenizer *tok, const void *s, size_t n)
{
    if (!tok->vocab_slots)
        return -1;
    uint64_t h = hash_bytes(s, n);
    uint32_t i = (uint32_t)h & tok->vocab_mask, tag = (uint32_t)(h >> 32);
    for (;;) {
        const ms_vocab_slot *v = &tok->vocab_slots[i];
        if (v->id < 0)
            return -1;
        if (v->tag == tag && v->len == n && !memcmp(tok->strs + v->off, s, n))
            return v->id;
        i = (i + 1) & tok->vocab_mask;
    }
}

const ms_merge_slot *ms_tok_merge_find(const struct ms_tokenizer *tok, int32_t a, int32_t b)
{
    uint32_t i = (uint32_t)hash_pair(a, b) & tok->merges_mask;
    for (;;) {
        const ms_merge_slot *s = &tok->merges[i];
        if (s->a < 0)
            return NULL;
        if (s->a == a && s->b == b)
            return s;
        i = (i + 1) & tok->merges_mask;
    }
}

/* ---- model.vocab ------------------------------------------------------------------- */

typedef struct vocab_entry {
    uint32_t off, len;
    int32_t id;
} vocab_entry;

static int vocab_fail(const struct ms_tokenizer *tok, ms_err *err, const char *what,
                      const char *at, const char *base)
{
    return ms_err_set(err, MS_E_FORMAT, "%s: model.vocab: %s (byte %lld of the section)",
                      tok->path, what, (long long)(at - base));
}

/* Parses the object into entries (strings go to tok->strs). */
static int vocab_scan(struct ms_tokenizer *tok, const char *base, size_t n, vocab_entry **out,
                      int64_t *n_out, ms_err *err)
{
    const char *p = base, *end = base + n;
    vocab_entry *e = NULL;
    int64_t ne = 0, cap = 0;
    ms_buf key = {0};
    int rc = -1;
    p = ms_json_skip_ws(p, end);
    if (p >= end || *p++ != '{') {
        vocab_fail(tok, err, "expected a JSON object of token -> id", p, base);
        goto done;
    }
    p = ms_json_skip_ws(p, end);
    if (p < end && *p == '}')
        p++;
    else for (;;) {
        key.n = 0;
        const char *q = ms_json_scan_string(p, end, &key);
        if (!q) {
            vocab_fail(tok, err, "expected a token string (valid UTF-8)", p, base);
            goto done;
        }
        p = ms_json_skip_ws(q, end);
        if (p >= end || *p++ != ':') {
            vocab_fail(tok, err, "expected ':' after a token", p, base);
            goto done;
        }
        p = ms_json_skip_ws(p, end);
        int64_t id = 0;
        const char *d = p;
        while (p < end && *p >= '0' && *p <= '9' && id < MAX_ID)
            id = id * 10 + (*p++ - '0');
        if (p == d || id >= MAX_ID || (p < end && (*p == '.' || *p == 'e' || *p == 'E'))) {
            vocab_fail(tok, err, "expected an id, an integer in 0 .. 16777215", d, base);
            goto done;
        }
        if (ne == cap) {
            cap = cap ? 2 * cap : 65536;
            vocab_entry *ge = realloc(e, (size_t)cap * sizeof *e);
            if (!ge) {
                ms_err_set(err, MS_E_NOMEM, "%s: out of memory reading model.vocab", tok->path);
                goto done;
            }
            e = ge;
        }
        int64_t off = ms_tok_str_add(tok, key.p, key.n);
        if (off < 0 || off > UINT32_MAX) {
            ms_err_set(err, MS_E_NOMEM, "%s: out of memory reading model.vocab", tok->path);
            goto done;
        }
        e[ne++] = (vocab_entry){(uint32_t)off, (uint32_t)key.n, (int32_t)id};
        p = ms_json_skip_ws(p, end);
        if (p < end && *p == ',') {
            p = ms_json_skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') {
            p++;
            break;
        }
        vocab_fail(tok, err, "expected ',' or '}'", p, base);
        goto done;
    }
    if (ms_json_skip_ws(p, end) != end) {
        vocab_fail(tok, err, "unexpected text after the object", p, base);
        goto done;
    }
    rc = 0;
done:
    ms_buf_free(&key);
    if (rc)
        free(e);
    else
        *out = e, *n_out = ne;
    return rc;
}

int ms_tok_read_vocab(struct ms_tokenizer *tok, const char *base, size_t n, ms_err *err)
{
    vocab_entry *e;
    int64_t ne;
    if (vocab_scan(tok, base, n, &e, &ne, err))
        return -1;
    if (ne == 0) {
        free(e);
        return ms_err_set(err, MS_E_FORMAT, "%s: model.vocab is empty", tok->path);
    }
    int32_t max_id = -1;
    for (int64_t i = 0; i < ne; i++)
        if (e[i].id > max_id)
            max_id = e[i].id;
    tok->n_vocab = (int32_t)ne;
    tok->n_ids = max_id + 1;
    tok->vocab_mask = table_size(ne) - 1;
    tok->vocab_slots = malloc(((size_t)tok->vocab_mask + 1) * sizeof *tok->vocab_slots);
    tok->vocab_off = calloc((size_t)max_id + 1, sizeof *tok->vocab_off);
    tok->vocab_len = malloc(((size_t)max_id + 1) * sizeof *tok->vocab_len);
    if (!tok->vocab_slots || !tok->vocab_off || !tok->vocab_len) {
        free(e);
        return ms_err_set(err, MS_E_NOMEM, "%s: out of memory for the vocabulary", tok->path);
    }
    memset(tok->vocab_len, 0xFF, ((size_t)max_id + 1) * sizeof *tok->vocab_len);
    memset(tok->vocab_slots, 0xFF, ((size_t)tok->vocab_mask + 1) * sizeof *tok->vocab_slots);
    int rc = 0;
    for (int64_t i = 0; i < ne && !rc; i++) {
        const vocab_entry *v = &e[i];
        const char *s = tok->strs + v->off;
        if (tok->vocab_len[v->id] != UINT32_MAX)
            rc = ms_err_set(err, MS_E_FORMAT, "%s: model.vocab: id %d is given to two tokens "
                            "(\"%s\" and \"%s\")", tok->path, v->id,
                            tok->strs + tok->vocab_off[v->id], s);
        else if (ms_tok_vocab_find(tok, s, v->len) >= 0)
            rc = ms_err_set(err, MS_E_FORMAT, "%s: model.vocab: the token \"%s\" is listed twice",
                            tok->path, s);
        if (rc)
            break;
        tok->vocab_off[v->id] = v->off;
        tok->vocab_len[v->id] = v->len;
        uint64_t h = hash_bytes(s, v->len);
        uint32_t k = (uint32_t)h & tok->vocab_mask;
        while (tok->vocab_slots[k].id >= 0)
            k = (k + 1) & tok->vocab_mask;
        tok->vocab_slots[k] = (ms_vocab_slot){(uint32_t)(h >> 32), v->id, v->off, v->len};
    }
    free(e);
    return rc;
}

/* ---- model.merges ------------------------------------------------------------------ */

static int merges_fail(const struct ms_tokenizer *tok, ms_err *err, int64_t rank, const char *what)
{
    return ms_err_set(err, MS_E_FORMAT, "%s: model.merges[%lld]: %s", tok->path, (long long)rank,
                      what);
}

/* Reads one merge (string "a b" or array ["a", "b"]) into a and b (appended,
 * NUL-separated in pair: a at 0, b at *b_off). */
static const char *merge_scan(const char *p, const char *end, ms_buf *pair, size_t *b_off)
{
    pair->n = 0;
    if (p < end && *p == '"') {
        p = ms_json_scan_string(p, end, pair);
        if (!p)
            return NULL;
        uint8_t *sp = memchr(pair->p, ' ', pair->n);
        if (!sp || memchr(sp + 1, ' ', pair->n - (size_t)(sp + 1 - pair->p)))
            return NULL;
        *sp = 0;
        *b_off = (size_t)(sp + 1 - pair->p);
        return p;
    }
    if (p >= end || *p++ != '[')
        return NULL;
    p = ms_json_skip_ws(p, end);
    if (!(p = ms_json_scan_string(p, end, pair)) || ms_buf_put(pair, "", 1))
        return NULL;
    *b_off = pair->n;
    p = ms_json_skip_ws(p, end);
    if (p >= end || *p++ != ',')
        return NULL;
    p = ms_json_skip_ws(p, end);
    if (!(p = ms_json_scan_string(p, end, pair)))
        return NULL;
    p = ms_json_skip_ws(p, end);
    if (p >= end || *p++ != ']')
        return NULL;
    return p;
}

static int merge_add(struct ms_tokenizer *tok, int64_t rank, const ms_buf *pair, size_t b_off,
                     ms_buf *cat, ms_err *err)
{
    const char *a = (const char *)pair->p, *b = (const char *)pair->p + b_off;
    size_t na = b_off - 1, nb = pair->n - b_off;
    int32_t ia = ms_tok_vocab_find(tok, a, na), ib = ms_tok_vocab_find(tok, b, nb);
    cat->n = 0;
    if (ms_buf_put(cat, a, na) || ms_buf_put(cat, b, nb))
        return ms_err_set(err, MS_E_NOMEM, "%s: out of memory reading model.merges", tok->path);
    int32_t im = ms_tok_vocab_find(tok, cat->p, cat->n);
    if (ia < 0 || ib < 0 || im < 0) {
        char what[160];
        snprintf(what, sizeof what, "the token \"%.*s\" is not in model.vocab",
                 (int)(ia < 0 ? na : ib < 0 ? nb : cat->n > 100 ? 100 : cat->n),
                 ia < 0 ? a : ib < 0 ? b : (const char *)cat->p);
        return merges_fail(tok, err, rank, what);
    }
    uint32_t i = (uint32_t)hash_pair(ia, ib) & tok->merges_mask;
    while (tok->merges[i].a >= 0) {
        if (tok->merges[i].a == ia && tok->merges[i].b == ib)
            return merges_fail(tok, err, rank, "this pair is already listed");
        i = (i + 1) & tok->merges_mask;
    }
    tok->merges[i] = (ms_merge_slot){ia, ib, (int32_t)rank, im};
    return 0;
}

/* Commas at the top level of the array whose '[' precedes p, plus one: the
 * number of elements (an upper bound if the text turns out malformed). */
static int64_t count_elements(const char *p, const char *end)
{
    int64_t n = 1;
    int depth = 0;
    for (; p < end; p++) {
        char c = *p;
        if (c == '"') {
            const char *q = skip_string(p, end);
            if (!q)
                break;
            p = q - 1;
        } else if (c == '[' || c == '{') {
            depth++;
        } else if (c == ']' || c == '}') {
            if (--depth < 0)
                break;
        } else if (c == ',' && depth == 0) {
            n++;
        }
    }
    return n;
}

int ms_tok_read_merges(struct ms_tokenizer *tok, const char *base, size_t n, ms_err *err)
{
    const char *p = ms_json_skip_ws(base, base + n), *end = base + n;
    if (p >= end || *p++ != '[')
        return ms_err_set(err, MS_E_FORMAT, "%s: model.merges: expected a JSON array", tok->path);
    int64_t count = count_elements(p, end);
    tok->merges_mask = table_size(count) - 1;
    tok->merges = malloc(((size_t)tok->merges_mask + 1) * sizeof *tok->merges);
    if (!tok->merges)
        return ms_err_set(err, MS_E_NOMEM, "%s: out of memory for model.merges", tok->path);
    memset(tok->merges, 0xFF, ((size_t)tok->merges_mask + 1) * sizeof *tok->merges);
    ms_buf pair = {0}, cat = {0};
    int64_t rank = 0;
    int rc = 0;
    p = ms_json_skip_ws(p, end);
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;; rank++) {
            size_t b_off;
            const char *q = merge_scan(p, end, &pair, &b_off);
            if (!q) {
                rc = merges_fail(tok, err, rank, "expected \"a b\" (one space) or [\"a\", \"b\"]");
                break;
            }
            if ((rc = merge_add(tok, rank, &pair, b_off, &cat, err)))
                break;
            p = ms_json_skip_ws(q, end);
            if (p < end && *p == ',') {
                p = ms_json_skip_ws(p + 1, end);
                continue;
            }
            if (p < end && *p == ']') {
                p++;
                rank++;
                break;
            }
            rc = merges_fail(tok, err, rank, "expected ',' or ']' after the merge");
            break;
        }
    }
    if (!rc && ms_json_skip_ws(p, end) != end)
        rc = ms_err_set(err, MS_E_FORMAT, "%s: model.merges: unexpected text after the array",
                        tok->path);
    tok->n_merges = (int32_t)rank;
    ms_buf_free(&pair);
    ms_buf_free(&cat);
    return rc;
}
