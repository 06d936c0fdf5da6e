/* Encode: text bytes -> ids, following HF tokenizers step by step (see the
 * pipeline in tokenizer.h). Every call owns its scratch state (PCRE2 match
 * data, piece lists, BPE heap, word cache), so the tokenizer stays read-only.
 *
 * Details that decide token-exactness (each one is HF's behaviour):
 *  - added tokens: leftmost-longest match; a match that is skipped (a special
 *    token with parse_special off, a single_word token inside a word) is
 *    still consumed, the scan resumes after it (aho-corasick's iterator);
 *  - each Split regex runs on one piece at a time (lookarounds never see the
 *    neighbours); empty pieces are dropped; an empty match right after the
 *    previous match is skipped (the onig crate's find_iter);
 *  - BPE: ignore_merges first looks the whole pre-token up in the vocab;
 *    merges are applied lowest rank first, leftmost first on ties, from a
 *    heap whose stale entries are detected by the merged id only (Word::
 *    merge_all), which matters when two pairs merge into the same token. */
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer.h"

typedef struct piece {
    const uint8_t *p;
    size_t n;
} piece;

typedef struct pvec {
    piece *v;
    size_t n, cap;
} pvec;

typedef struct match {
    size_t s, e;
    int m;
} match;

typedef struct bpe_sym {
    int32_t id;
    int32_t prev, next;  /* -1 at the ends */
    int32_t alive;
} bpe_sym;

typedef struct bpe_item {
    int32_t rank, pos, id;
} bpe_item;

/* Word cache: pre-token bytes -> ids, for pre-tokens up to CACHE_KEY_MAX bytes. */
#define CACHE_SLOTS 16384
#define CACHE_KEY_MAX 128

typedef struct cache_slot {
    uint64_t hash;
    uint32_t key_off, key_len;  /* key_len 0: empty slot */
    uint32_t ids_off, ids_len;
} cache_slot;

typedef struct enc {
    const struct ms_tokenizer *tok;
    ms_err *err;
    int parse_special;
    ms_buf *collect;            /* ms_tok_pretokens: pre-tokens go here, no BPE */

    int32_t *ids;
    int64_t n_ids, cap_ids;

    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;

    pvec lv[MS_TOK_MAX_STEPS];  /* pieces of each pre-tokenizer level */
    match *mv;
    size_t n_mv, cap_mv;
    ms_buf pfx;                 /* ByteLevel add_prefix_space copy */
    ms_buf norm;                /* normalized piece */
    ms_buf mapped;              /* byte-level string of a pre-token */

    bpe_sym *sym;
    size_t cap_sym;
    bpe_item *heap;
    size_t n_heap, cap_heap;

    cache_slot *cache;
    uint32_t cache_used;
    ms_buf cache_keys;
    int32_t *cache_ids;
    size_t n_cache_ids, cap_cache_ids;
} enc;

static int oom(enc *e)
{
    return ms_err_set(e->err, MS_E_NOMEM, "out of memory while encoding");
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int emit(enc *e, int32_t id)
{
    if (e->n_ids == e->cap_ids) {
        int64_t cap = e->cap_ids ? 2 * e->cap_ids : 1024;
        int32_t *p = realloc(e->ids, (size_t)cap * sizeof *p);
        if (!p)
            return oom(e);
        e->ids = p;
        e->cap_ids = cap;
    }
    e->ids[e->n_ids++] = id;
    return 0;
}

/* ---- BPE ---------------------------------------------------------------------------- */

static int heap_less(const bpe_item *a, const bpe_item *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(enc *e, int32_t rank, int32_t pos, int32_t id)
{
    if (grow((void **)&e->heap, &e->cap_heap, e->n_heap + 1, sizeof *e->heap))
        return oom(e);
    size_t i = e->n_heap++;
    bpe_item it = {rank, pos, id};
    while (i > 0 && heap_less(&it, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = it;
    return 0;
}

static bpe_item heap_pop(enc *e)
{
    bpe_item top = e->heap[0], last = e->heap[--e->n_heap];
    size_t i = 0, n = e->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && heap_less(&e->heap[c + 1], &e->heap[c]))
            c++;
        if (!heap_less(&e->heap[c], &last))
            break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n)
        e->heap[i] = last;
    return top;
}

static int push_pair(enc *e, int32_t pos)
{
    const bpe_sym *s = e->sym;
    if (pos < 0 || s[pos].next < 0)
        return 0;
    const ms_merge_slot *m = ms_tok_merge_find(e->tok, s[pos].id, s[s[pos].next].id);
    return m ? heap_push(e, m->rank, pos, m->id) : 0;
}

static int add_sym(enc *e, size_t *n, int32_t id)
{
    if (grow((void **)&e->sym, &e->cap_sym, *n + 1, sizeof *e->sym))
        return oom(e);
    e->sym[*n] = (bpe_sym){id, (int32_t)*n - 1, -1, 1};
    if (*n > 0)
        e->sym[*n - 1].next = (int32_t)*n;
    (*n)++;
    return 0;
}

/* Initial symbols of a pre-token (BPE::merge_word): one per byte-level char,
 * else byte_fallback's <0xXX> tokens, else unk (fused when fuse_unk), else
 * nothing. Returns the number of symbols or -1. */
static int64_t initial_symbols(enc *e, const uint8_t *s, size_t n)
{
    const struct ms_tokenizer *tok = e->tok;
    size_t ns = 0;
    int unk_pending = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = tok->byte_id[s[i]];
        if (id >= 0) {
            if (unk_pending && add_sym(e, &ns, tok->unk_id))
                return -1;
            unk_pending = 0;
            if (add_sym(e, &ns, id))
                return -1;
            continue;
        }
        if (tok->byte_fallback && tok->byte_fb_n[s[i]]) {
            for (int k = 0; k < tok->byte_fb_n[s[i]]; k++)
                if (add_sym(e, &ns, tok->byte_fb[s[i]][k]))
                    return -1;
            continue;
        }
        if (tok->unk_id >= 0) {
            if (unk_pending && !tok->fuse_unk && add_sym(e, &ns, tok->unk_id))
                return -1;
            unk_pending = 1;
        }
    }
    if (unk_pending && add_sym(e, &ns, tok->unk_id))
        return -1;
    return (int64_t)ns;
}

/* BPE of one pre-token (raw bytes; the byte-level mapping is implicit in
 * byte_id), ids appended to e->ids. */
static int bpe_word(enc *e, const uint8_t *s, size_t n)
{
    int64_t ns = initial_symbols(e, s, n);
    if (ns < 0)
        return -1;
    e->n_heap = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        if (push_pair(e, i))
            return -1;
    bpe_sym *sym = e->sym;
    while (e->n_heap) {
        bpe_item top = heap_pop(e);
        bpe_sym *a = &sym[top.pos];
        if (!a->alive || a->next < 0)
            continue;
        const ms_merge_slot *m = ms_tok_merge_find(e->tok, a->id, sym[a->next].id);
        if (!m || m->id != top.id)
            continue; /* stale entry */
        bpe_sym *b = &sym[a->next];
        a->id = top.id;
        b->alive = 0;
        a->next = b->next;
        if (b->next >= 0)
            sym[b->next].prev = top.pos;
        if (push_pair(e, a->prev) || push_pair(e, top.pos))
            return -1;
        sym = e->sym;
    }
    for (int32_t i = 0; ns > 0 && i >= 0; i = sym[i].next)
        if (emit(e, sym[i].id))
            return -1;
    return 0;
}

static uint64_t hash_key(const uint8_t *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h ^ h >> 31;
}

static cache_slot *cache_find(enc *e, const uint8_t *s, size_t n, uint64_t h)
{
    uint32_t i = (uint32_t)h & (CACHE_SLOTS - 1);
    for (;;) {
        cache_slot *c = &e->cache[i];
        if (!c->key_len ||
            (c->hash == h && c->key_len == n && !memcmp(e->cache_keys.p + c->key_off, s, n)))
            return c;
        i = (i + 1) & (CACHE_SLOTS - 1);
    }
}

/* One pre-token -> ids: ignore_merges lookup, cache, BPE. */
static int encode_word(enc *e, const uint8_t *s, size_t n)
{
    const struct ms_tokenizer *tok = e->tok;
    if (e->collect) {
        if (ms_buf_reserve(e->collect, 2 * n + 1))
            return oom(e);
        for (size_t i = 0; i < n; i++)
            e->collect->n += ms_utf8_put(e->collect->p + e->collect->n, ms_bytelevel_cp(s[i]));
        e->collect->p[e->collect->n++] = 0;
        return 0;
    }
    if (tok->ignore_merges) {
        e->mapped.n = 0;
        if (ms_buf_reserve(&e->mapped, 2 * n))
            return oom(e);
        for (size_t i = 0; i < n; i++)
            e->mapped.n += ms_utf8_put(e->mapped.p + e->mapped.n, ms_bytelevel_cp(s[i]));
        int32_t id = ms_tok_vocab_find(tok, e->mapped.p, e->mapped.n);
        if (id >= 0)
            return emit(e, id);
    }
    if (n > CACHE_KEY_MAX)
        return bpe_word(e, s, n);
    if (!e->cache && !(e->cache = calloc(CACHE_SLOTS, sizeof *e->cache)))
        return oom(e);
    uint64_t h = hash_key(s, n);
    cache_slot *c = cache_find(e, s, n, h);
    if (c->key_len) {
        for (uint32_t i = 0; i < c->ids_len; i++)
            if (emit(e, e->cache_ids[c->ids_off + i]))
                return -1;
        return 0;
    }
    int64_t first = e->n_ids;
    if (bpe_word(e, s, n))
        return -1;
    if (e->cache_used >= CACHE_SLOTS / 2) { /* full: start over */
        memset(e->cache, 0, CACHE_SLOTS * sizeof *e->cache);
        e->cache_used = 0;
        e->cache_keys.n = 0;
        e->n_cache_ids = 0;
        c = cache_find(e, s, n, h);
    }
    size_t k = (size_t)(e->n_ids - first);
    if (grow((void **)&e->cache_ids, &e->cap_cache_ids, e->n_cache_ids + k, sizeof *e->cache_ids))
        return oom(e);
    *c = (cache_slot){h, (uint32_t)e->cache_keys.n, (uint32_t)n, (uint32_t)e->n_cache_ids,
                      (uint32_t)k};
    if (ms_buf_put(&e->cache_keys, s, n))
        return oom(e);
    if (k) /* a word of no ids (an empty piece) may come before any id */
        memcpy(e->cache_ids + e->n_cache_ids, e->ids + first, k * sizeof *e->ids);
    e->n_cache_ids += k;
    e->cache_used++;
    return 0;
}

/* ---- pre-tokenizer -------------------------------------------------------------------- */

static int push_match(enc *e, size_t s, size_t end, int m)
{
    if (grow((void **)&e->mv, &e->cap_mv, e->n_mv + 1, sizeof *e->mv))
        return oom(e);
    e->mv[e->n_mv++] = (match){s, end, m};
    return 0;
}

/* The regex's matches over [s, s+n) as (span, is_match) covering it all. */
static int find_matches(enc *e, const pcre2_code *re, const uint8_t *s, size_t n)
{
    e->n_mv = 0;
    size_t last_end = 0, prev = 0;
    int have_last = 0;
    size_t last_match_end = 0;
    while (re && last_end <= n) {
        int rc = pcre2_match(re, s, n, last_end, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return ms_err_set(e->err, MS_E_UNSUPPORTED, "%s: pre-tokenizer regex failed on a "
                              "piece of %zu bytes: %s", e->tok->path, n, (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = ov[0], me = ov[1];
        if (ms == me && have_last && last_match_end == me) {
            uint32_t cp;
            size_t k = last_end < n ? ms_utf8_next(s + last_end, n - last_end, &cp) : 1;
            last_end += k ? k : 1;
            continue;
        }
        last_end = me;
        last_match_end = me;
        have_last = 1;
        if (prev != ms && push_match(e, prev, ms, 0))
            return -1;
        if (push_match(e, ms, me, 1))
            return -1;
        prev = me;
    }
    if (prev != n && push_match(e, prev, n, 0))
        return -1;
    return 0;
}

static int push_piece(enc *e, pvec *v, const uint8_t *p, size_t n)
{
    if (grow((void **)&v->v, &v->cap, v->n + 1, sizeof *v->v))
        return oom(e);
    v->v[v->n++] = (piece){p, n};
    return 0;
}

/* Pieces of [s, s+n) under one step's regex and behavior (NormalizedString::split). */
static int split_piece(enc *e, const ms_pretok_step *st, const uint8_t *s, size_t n, pvec *out)
{
    out->n = 0;
    if (find_matches(e, st->re, s, n))
        return -1;
    match *mv = e->mv;
    size_t nm = e->n_mv;
    if (st->invert)
        for (size_t i = 0; i < nm; i++)
            mv[i].m = !mv[i].m;
    /* merge in place into mv[0..k) with m = 0 (keep) or 1 (remove) */
    size_t k = 0;
    int prev = 0;
    switch (st->behavior) {
    case MS_SPLIT_REMOVED:
        k = nm;
        break;
    case MS_SPLIT_ISOLATED:
        for (size_t i = 0; i < nm; i++)
            mv[i].m = 0;
        k = nm;
        break;
    case MS_SPLIT_CONTIGUOUS:
    case MS_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < nm; i++) {
            match x = mv[i];
            int join = st->behavior == MS_SPLIT_CONTIGUOUS ? x.m == prev : x.m && !prev;
            if (join && k > 0)
                mv[k - 1].e = x.e;
            else
                mv[k++] = (match){x.s, x.e, 0};
            prev = x.m;
        }
        break;
    case MS_SPLIT_MERGED_NEXT:
        /* fold from the end, writing pieces from the end of mv */
        k = nm;
        for (size_t i = nm; i-- > 0;) {
            match x = mv[i];
            if (x.m && !prev && k < nm)
                mv[k].s = x.s;
            else
                mv[--k] = (match){x.s, x.e, 0};
            prev = x.m;
        }
        memmove(mv, mv + k, (nm - k) * sizeof *mv);
        k = nm - k;
        break;
    }
    for (size_t i = 0; i < k; i++)
        if (!mv[i].m && mv[i].e > mv[i].s && push_piece(e, out, s + mv[i].s, mv[i].e - mv[i].s))
            return -1;
    return 0;
}

/* Runs pre-tokenizer steps step.. on one piece, then BPE on each result. */
static int pretokenize(enc *e, const uint8_t *s, size_t n, int step)
{
    const struct ms_tokenizer *tok = e->tok;
    if (n == 0)
        return 0;
    if (step == tok->n_steps)
        return encode_word(e, s, n);
    const ms_pretok_step *st = &tok->steps[step];
    if (st->kind == MS_PRETOK_BYTELEVEL && st->add_prefix_space && s[0] != ' ') {
        e->pfx.n = 0;
        if (ms_buf_put(&e->pfx, " ", 1) || ms_buf_put(&e->pfx, s, n))
            return oom(e);
        s = e->pfx.p;
        n = e->pfx.n;
    }
    if (st->kind == MS_PRETOK_BYTELEVEL && !st->re)
        return pretokenize(e, s, n, step + 1);
    pvec *v = &e->lv[step];
    if (split_piece(e, st, s, n, v))
        return -1;
    for (size_t i = 0; i < v->n; i++)
        if (pretokenize(e, v->v[i].p, v->v[i].n, step + 1))
            return -1;
    return 0;
}

/* ---- added tokens ------------------------------------------------------------------- */

static int is_white_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Start of the last code point of [s, s+n) (n > 0, valid UTF-8). */
static size_t last_cp_start(const uint8_t *s, size_t n)
{
    size_t i = n - 1;
    while (i > 0 && (s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

/* Whether the code point at s is a word character as the regex crate's \w
 * (Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control). */
static int is_word_at(const struct ms_tokenizer *tok, enc *e, const uint8_t *s, size_t n)
{
    return pcre2_match(tok->word_re, s, n, 0, PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, e->md,
                       e->mctx) >= 0;
}

typedef int (*text_fn)(enc *e, const uint8_t *s, size_t n);

/* AddedVocabulary::find_matches + split_with_indices over one piece: added
 * tokens of trie t become ids, the text between them goes to fn. */
static int split_added(enc *e, const ms_trie *t, const uint8_t *s, size_t n, text_fn fn)
{
    const struct ms_tokenizer *tok = e->tok;
    size_t start_offset = 0, i = 0;
    while (t->nodes && i < n) {
        if (!t->first[s[i]]) {
            i++;
            continue;
        }
        int32_t node = 0, best = -1;
        size_t best_end = 0;
        for (size_t j = i; j < n; j++) {
            int32_t c = t->nodes[node].child;
            while (c >= 0 && t->nodes[c].byte != s[j])
                c = t->nodes[c].sibling;
            if (c < 0)
                break;
            node = c;
            if (t->nodes[c].added >= 0) {
                best = t->nodes[c].added;
                best_end = j + 1;
            }
        }
        if (best < 0) {
            i++;
            continue;
        }
        const ms_added *a = &tok->added[best];
        size_t ms = i, me = best_end;
        i = best_end;
        if (a->special && !e->parse_special)
            continue;
        if (a->single_word) {
            int start_space = ms == 0 || !is_word_at(tok, e, s + last_cp_start(s, ms),
                                                      ms - last_cp_start(s, ms));
            int stop_space = me == n || !is_word_at(tok, e, s + me, n - me);
            if (!start_space || !stop_space)
                continue;
        }
        if (a->lstrip) {
            size_t ns = ms;
            uint32_t cp;
            while (ns > 0) {
                size_t k = last_cp_start(s, ns);
                ms_utf8_next(s + k, ns - k, &cp);
                if (!is_white_space(cp))
                    break;
                ns = k;
            }
            ms = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            uint32_t cp;
            size_t k;
            while (me < n && (k = ms_utf8_next(s + me, n - me, &cp)) && is_white_space(cp))
                me += k;
        }
        if (start_offset < ms && fn(e, s + start_offset, ms - start_offset))
            return -1;
        if (emit(e, a->id))
            return -1;
        start_offset = me;
    }
    if (start_offset < n && fn(e, s + start_offset, n - start_offset))
        return -1;
    return 0;
}

static int after_normalized_added(enc *e, const uint8_t *s, size_t n)
{
    return pretokenize(e, s, n, 0);
}

/* A piece between non-normalized added tokens: normalize it, then split on
 * the normalized added tokens. */
static int normalize_piece(enc *e, const uint8_t *s, size_t n)
{
    if (e->tok->normalizer == MS_TOK_NORM_NFC) {
        e->norm.n = 0;
        if (ms_nfc(s, n, &e->norm))
            return oom(e);
        s = e->norm.p;
        n = e->norm.n;
    }
    return split_added(e, &e->tok->trie_norm, s, n, after_normalized_added);
}

/* ---- entry ---------------------------------------------------------------------------- */

static void enc_free(enc *e)
{
    pcre2_match_data_free(e->md);
    pcre2_match_context_free(e->mctx);
    pcre2_jit_stack_free(e->jit);
    for (int i = 0; i < MS_TOK_MAX_STEPS; i++)
        free(e->lv[i].v);
    free(e->mv);
    ms_buf_free(&e->pfx);
    ms_buf_free(&e->norm);
    ms_buf_free(&e->mapped);
    free(e->sym);
    free(e->heap);
    free(e->cache);
    ms_buf_free(&e->cache_keys);
    free(e->cache_ids);
}

/* Common start of a call: valid UTF-8 text (lossy copy in *valid when
 * needed) and the PCRE2 match state. */
static int enc_start(enc *e, const char **text, size_t *len, ms_buf *valid)
{
    if (ms_utf8_valid_prefix((const uint8_t *)*text, *len) != *len) {
        if (ms_utf8_lossy((const uint8_t *)*text, *len, valid))
            return oom(e);
        *text = (const char *)valid->p;
        *len = valid->n;
    }
    e->md = pcre2_match_data_create(1, NULL);
    e->mctx = pcre2_match_context_create(NULL);
    e->jit = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!e->md || !e->mctx || !e->jit)
        return oom(e);
    pcre2_jit_stack_assign(e->mctx, NULL, e->jit);
    return 0;
}

int ms_tok_encode(const struct ms_tokenizer *tok, const char *text, size_t len, int parse_special,
                  int32_t **ids, int64_t *n_ids, ms_err *err)
{
    *ids = NULL;
    *n_ids = 0;
    enc e = {.tok = tok, .err = err, .parse_special = parse_special};
    ms_buf valid = {0};
    int rc = -1;
    if (enc_start(&e, &text, &len, &valid) ||
        split_added(&e, &tok->trie_raw, (const uint8_t *)text, len, normalize_piece))
        goto done;
    if (!e.ids && !(e.ids = malloc(sizeof *e.ids))) {
        oom(&e);
        goto done;
    }
    *ids = e.ids;
    *n_ids = e.n_ids;
    e.ids = NULL;
    rc = 0;
done:
    free(e.ids);
    enc_free(&e);
    ms_buf_free(&valid);
    return rc;
}

int ms_tok_pretokens(const struct ms_tokenizer *tok, const char *text, size_t len, ms_buf *out,
                     ms_err *err)
{
    enc e = {.tok = tok, .err = err, .collect = out};
    ms_buf valid = {0};
    int rc = enc_start(&e, &text, &len, &valid);
    if (!rc && tok->normalizer == MS_TOK_NORM_NFC) {
        if (ms_nfc((const uint8_t *)text, len, &e.norm))
            rc = oom(&e);
        text = (const char *)e.norm.p;
        len = e.norm.n;
    }
    if (!rc)
        rc = pretokenize(&e, (const uint8_t *)text, len, 0);
    enc_free(&e);
    ms_buf_free(&valid);
    return rc;
}
