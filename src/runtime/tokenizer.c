/* Tokenizer: opening MODEL_DIR/tokenizer.json, token lookup, decoding.
 *
 * Supported, exactly as HF tokenizers reads them:
 *   model        BPE: vocab, merges ("a b" or ["a", "b"]), unk_token, fuse_unk,
 *                byte_fallback, ignore_merges; dropout null or 0;
 *                continuing_subword_prefix / end_of_word_suffix null or "".
 *   added_tokens special and not, single_word, lstrip, rstrip, normalized; the
 *                id of each must be the one HF assigns (vocab id, else next).
 *   normalizer   null, NFC, or a Sequence of those.
 *   pre_tokenizer Split (Regex or String pattern, any behavior, invert) and
 *                ByteLevel (add_prefix_space, use_regex), alone or in a
 *                Sequence that ends with ByteLevel.
 *   decoder      ByteLevel.
 *   post_processor, truncation, padding: not applied (we never add BOS/EOS;
 *                the engine bounds the context itself).
 * Anything else is refused with the file, the field and what was found. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "runtime/tokenizer.h"

/* GPT-2's pre-tokenizer regex: ByteLevel's split when use_regex is true. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* A word character as the regex crate's Unicode \w (single_word tokens). */
static const char WORD_CLASS[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]";

/* A JSON value inside the file's text. */
typedef struct span {
    const char *p;
    size_t n;
} span;

static int read_file(const char *path, char **buf, size_t *len, ms_err *err)
{
    return ms_read_file(path, (size_t)1 << 30, buf, len, err);
}

/* Scans a JSON object and records the value span of each listed key.
 * Unknown keys are skipped (as HF does); a listed key given twice is refused. */
static int scan_object(const struct ms_tokenizer *tok, const char *what, span obj,
                       const char *const *keys, span *vals, int n_keys, ms_err *err)
{
    const char *p = ms_json_skip_ws(obj.p, obj.p + obj.n), *end = obj.p + obj.n;
    ms_buf key = {0};
    int rc = 0;
    for (int i = 0; i < n_keys; i++)
        vals[i] = (span){NULL, 0};
    if (p >= end || *p++ != '{') {
        return ms_err_set(err, MS_E_FORMAT, "%s: %s: expected a JSON object", tok->path, what);
    }
    p = ms_json_skip_ws(p, end);
    if (p < end && *p == '}')
        return 0;
    for (;;) {
        key.n = 0;
        const char *q = ms_json_scan_string(p, end, &key);
        if (q)
            q = ms_json_skip_ws(q, end);
        if (!q || q >= end || *q != ':') {
            rc = ms_err_set(err, MS_E_FORMAT, "%s: %s: malformed JSON near byte %lld of the file",
                            tok->path, what, (long long)(p - obj.p));
            break;
        }
        const char *v = ms_json_skip_ws(q + 1, end);
        const char *ve = ms_json_skip_value(v, end, 0);
        if (!ve) {
            rc = ms_err_set(err, MS_E_FORMAT, "%s: %s.%.*s: malformed JSON value", tok->path,
                            what, (int)key.n, (const char *)key.p);
            break;
        }
        for (int i = 0; i < n_keys; i++) {
            if (strlen(keys[i]) != key.n || memcmp(keys[i], key.p, key.n))
                continue;
            if (vals[i].p)
                rc = ms_err_set(err, MS_E_FORMAT, "%s: %s: the key \"%s\" appears twice",
                                tok->path, what, keys[i]);
            vals[i] = (span){v, (size_t)(ve - v)};
        }
        if (rc)
            break;
        p = ms_json_skip_ws(ve, end);
        if (p < end && *p == ',') {
            p = ms_json_skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}')
            break;
        rc = ms_err_set(err, MS_E_FORMAT, "%s: %s: expected ',' or '}' after \"%.*s\"", tok->path,
                        what, (int)key.n, (const char *)key.p);
        break;
    }
    ms_buf_free(&key);
    return rc;
}

/* Parses a small JSON value with jansson; NULL in *out for an absent key. */
static int load_small(const struct ms_tokenizer *tok, span s, const char *what, json_t **out,
                      ms_err *err)
{
    *out = NULL;
    if (!s.p)
        return 0;
    json_error_t je;
    *out = json_loadb(s.p, s.n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!*out)
        return ms_err_set(err, MS_E_FORMAT, "%s: %s: %s", tok->path, what, je.text);
    return 0;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    default: return "null";
    }
}

/* obj[key] as a boolean (absent or null: def). */
static int get_bool(const struct ms_tokenizer *tok, const json_t *obj, const char *what,
                    const char *key, int def, int *out, ms_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return ms_err_set(err, MS_E_FORMAT, "%s: %s.%s: expected true or false, found %s",
                          tok->path, what, key, type_name(v));
    *out = json_is_true(v);
    return 0;
}

/* A standalone value as a boolean (absent or null: false). */
static int value_bool(const struct ms_tokenizer *tok, const json_t *v, const char *what, int *out,
                      ms_err *err)
{
    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return ms_err_set(err, MS_E_FORMAT, "%s: %s: expected true or false, found %s",
                          tok->path, what, type_name(v));
    *out = json_is_true(v);
    return 0;
}

/* obj["type"] as a string, or NULL with err set. */
static const char *get_type(const struct ms_tokenizer *tok, const json_t *obj, const char *what,
                            ms_err *err)
{
    const json_t *t = json_is_object(obj) ? json_object_get(obj, "type") : NULL;
    if (!t || !json_is_string(t)) {
        ms_err_set(err, MS_E_FORMAT, "%s: %s: expected an object with a string \"type\"",
                   tok->path, what);
        return NULL;
    }
    return json_string_value(t);
}

/* ---- model -------------------------------------------------------------------------- */

static int read_model(struct ms_tokenizer *tok, span model, ms_err *err)
{
    static const char *const keys[] = {"type", "dropout", "unk_token", "continuing_subword_prefix",
                                       "end_of_word_suffix", "fuse_unk", "byte_fallback",
                                       "ignore_merges", "vocab", "merges"};
    enum { K_TYPE, K_DROPOUT, K_UNK, K_PREFIX, K_SUFFIX, K_FUSE, K_FALLBACK, K_IGNORE, K_VOCAB,
           K_MERGES, K_N };
    span v[K_N];
    if (scan_object(tok, "model", model, keys, v, K_N, err))
        return -1;
    json_t *j[K_VOCAB] = {0};
    int rc = 0;
    for (int i = 0; i < K_VOCAB && !rc; i++) {
        char what[64];
        snprintf(what, sizeof what, "model.%s", keys[i]);
        rc = load_small(tok, v[i], what, &j[i], err);
    }
    if (rc)
        goto done;
    if (!j[K_TYPE] || !json_is_string(j[K_TYPE]) || strcmp(json_string_value(j[K_TYPE]), "BPE")) {
        rc = ms_err_set(err, MS_E_UNSUPPORTED, "%s: model.type is %s%s%s; only \"BPE\" is supported",
                        tok->path, j[K_TYPE] && json_is_string(j[K_TYPE]) ? "\"" : "",
                        j[K_TYPE] ? (json_is_string(j[K_TYPE]) ? json_string_value(j[K_TYPE])
                                                               : type_name(j[K_TYPE]))
                                  : "absent",
                        j[K_TYPE] && json_is_string(j[K_TYPE]) ? "\"" : "");
        goto done;
    }
    if (j[K_DROPOUT] && !json_is_null(j[K_DROPOUT]) &&
        !(json_is_number(j[K_DROPOUT]) && json_number_value(j[K_DROPOUT]) == 0.0)) {
        rc = ms_err_set(err, MS_E_UNSUPPORTED, "%s: model.dropout is set; only null (no BPE "
                        "dropout) is supported", tok->path);
        goto done;
    }
    for (int k = K_PREFIX; k <= K_SUFFIX; k++) {
        if (j[k] && !json_is_null(j[k]) &&
            !(json_is_string(j[k]) && json_string_length(j[k]) == 0)) {
            rc = ms_err_set(err, MS_E_UNSUPPORTED, "%s: model.%s is %s; only null or \"\" is "
                            "supported (byte-level BPE)", tok->path, keys[k], type_name(j[k]));
            goto done;
        }
    }
    if ((rc = value_bool(tok, j[K_FUSE], "model.fuse_unk", &tok->fuse_unk, err)) ||
        (rc = value_bool(tok, j[K_FALLBACK], "model.byte_fallback", &tok->byte_fallback, err)) ||
        (rc = value_bool(tok, j[K_IGNORE], "model.ignore_merges", &tok->ignore_merges, err)))
        goto done;
    if (!v[K_VOCAB].p || !v[K_MERGES].p) {
        rc = ms_err_set(err, MS_E_FORMAT, "%s: model.%s is missing", tok->path,
                        v[K_VOCAB].p ? "merges" : "vocab");
        goto done;
    }
    if ((rc = ms_tok_read_vocab(tok, v[K_VOCAB].p, v[K_VOCAB].n, err)) ||
        (rc = ms_tok_read_merges(tok, v[K_MERGES].p, v[K_MERGES].n, err)))
        goto done;
    tok->unk_id = -1;
    if (j[K_UNK] && !json_is_null(j[K_UNK])) {
        if (!json_is_string(j[K_UNK])) {
            rc = ms_err_set(err, MS_E_FORMAT, "%s: model.unk_token: expected a string, found %s",
                            tok->path, type_name(j[K_UNK]));
            goto done;
        }
        const char *u = json_string_value(j[K_UNK]);
        tok->unk_id = ms_tok_vocab_find(tok, u, json_string_length(j[K_UNK]));
        if (tok->unk_id < 0) {
            rc = ms_err_set(err, MS_E_FORMAT, "%s: model.unk_token \"%s\" is not in model.vocab",
                            tok->path, u);
            goto done;
        }
    }
done:
    for (int i = 0; i < K_VOCAB; i++)
        json_decref(j[i]);
    return rc;
}

static int compile_regex(struct ms_tokenizer *tok, const char *what, const char *pattern,
                         int literal, pcre2_code **out, ms_err *err);

/* ---- added tokens -------------------------------------------------------------------- */

static int trie_add(ms_trie *t, const uint8_t *s, size_t n, int32_t added)
{
    if (!t->nodes) {
        t->cap = 64;
        if (!(t->nodes = malloc((size_t)t->cap * sizeof *t->nodes)))
            return -1;
        t->nodes[0] = (ms_trie_node){-1, -1, -1, 0};
        t->n = 1;
    }
    int32_t cur = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = t->nodes[cur].child;
        while (c >= 0 && t->nodes[c].byte != s[i])
            c = t->nodes[c].sibling;
        if (c < 0) {
            if (t->n == t->cap) {
                ms_trie_node *p = realloc(t->nodes, 2 * (size_t)t->cap * sizeof *p);
                if (!p)
                    return -1;
                t->nodes = p;
                t->cap *= 2;
            }
            c = t->n++;
            t->nodes[c] = (ms_trie_node){-1, t->nodes[cur].child, -1, s[i]};
            t->nodes[cur].child = c;
        }
        cur = c;
    }
    if (t->nodes[cur].added < 0) /* two tokens with one pattern: the first wins, as in HF */
        t->nodes[cur].added = added;
    t->first[s[0]] = 1;
    return 0;
}

/* The id HF's AddedVocabulary gives a new added token: its id if it is in the
 * vocabulary, else one past the highest added id (or the vocabulary size). */
static int32_t hf_added_id(const struct ms_tokenizer *tok, const char *content, int32_t max_added)
{
    int32_t id = ms_tok_vocab_find(tok, content, strlen(content));
    if (id >= 0)
        return id;
    if (max_added < 0)
        return tok->n_vocab;
    return max_added >= tok->n_vocab || tok->n_vocab == 0 ? max_added + 1 : tok->n_vocab;
}

static int read_one_added(struct ms_tokenizer *tok, const json_t *a, size_t i, ms_added *out,
                          ms_err *err)
{
    char what[64];
    snprintf(what, sizeof what, "added_tokens[%zu]", i);
    const json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
    if (!json_is_object(a) || !json_is_integer(id) || !json_is_string(content))
        return ms_err_set(err, MS_E_FORMAT, "%s: %s: expected an object with an integer \"id\" "
                          "and a string \"content\"", tok->path, what);
    if (json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 24))
        return ms_err_set(err, MS_E_FORMAT, "%s: %s: id %lld is outside 0 .. 16777215", tok->path,
                          what, (long long)json_integer_value(id));
    if (strlen(json_string_value(content)) != json_string_length(content))
        return ms_err_set(err, MS_E_UNSUPPORTED, "%s: %s: content holds a NUL character",
                          tok->path, what);
    int sw, ls, rs, nm, sp;
    if (get_bool(tok, a, what, "single_word", 0, &sw, err) ||
        get_bool(tok, a, what, "lstrip", 0, &ls, err) ||
        get_bool(tok, a, what, "rstrip", 0, &rs, err) ||
        get_bool(tok, a, what, "normalized", 1, &nm, err) ||
        get_bool(tok, a, what, "special", 0, &sp, err))
        return -1;
    *out = (ms_added){.id = (int32_t)json_integer_value(id), .special = (uint8_t)sp,
                      .single_word = (uint8_t)sw, .lstrip = (uint8_t)ls, .rstrip = (uint8_t)rs,
                      .normalized = (uint8_t)nm};
    if (!(out->content = strdup(json_string_value(content))))
        return ms_err_set(err, MS_E_NOMEM, "out of memory reading %s", what);
    return 0;
}

static int read_added(struct ms_tokenizer *tok, const json_t *arr, ms_err *err)
{
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr))
        return ms_err_set(err, MS_E_FORMAT, "%s: added_tokens: expected an array, found %s",
                          tok->path, type_name(arr));
    size_t n = json_array_size(arr);
    if (!(tok->added = calloc(n ? n : 1, sizeof *tok->added)))
        return ms_err_set(err, MS_E_NOMEM, "out of memory reading added_tokens");
    int32_t max_added = -1;
    for (size_t i = 0; i < n; i++) {
        ms_added a;
        if (read_one_added(tok, json_array_get(arr, i), i, &a, err))
            return -1;
        if (!a.content[0]) { /* HF ignores an empty token */
            free(a.content);
            continue;
        }
        for (int32_t k = 0; k < tok->n_added; k++)
            if (!strcmp(tok->added[k].content, a.content)) {
                free(a.content);
                return ms_err_set(err, MS_E_FORMAT, "%s: added_tokens[%zu]: \"%s\" is listed "
                                  "twice", tok->path, i, tok->added[k].content);
            }
        int32_t want = hf_added_id(tok, a.content, max_added);
        if (want != a.id) {
            ms_err_set(err, MS_E_FORMAT, "%s: added_tokens[%zu] \"%s\" has id %d, but HF "
                       "tokenizers assigns it id %d (vocab id, else the next free id)",
                       tok->path, i, a.content, a.id, want);
            free(a.content);
            return -1;
        }
        if (a.id > max_added)
            max_added = a.id;
        tok->added[tok->n_added++] = a;
    }
    return 0;
}

/* Patterns and tries; runs after the normalizer is known. Special tokens come
 * first in HF's tries, then the others, in file order (ties cannot happen:
 * contents are unique). */
static int build_tries(struct ms_tokenizer *tok, ms_err *err)
{
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < tok->n_added; i++) {
            ms_added *a = &tok->added[i];
            if (a->special != (pass == 0))
                continue;
            size_t n = strlen(a->content);
            if (a->normalized && tok->normalizer == MS_TOK_NORM_NFC) {
                ms_buf b = {0};
                if (ms_nfc((const uint8_t *)a->content, n, &b) || ms_buf_put(&b, "", 1)) {
                    ms_buf_free(&b);
                    return ms_err_set(err, MS_E_NOMEM, "out of memory building added tokens");
                }
                a->pattern = (char *)b.p;
                a->pattern_len = b.n - 1;
            } else {
                if (!(a->pattern = strdup(a->content)))
                    return ms_err_set(err, MS_E_NOMEM, "out of memory building added tokens");
                a->pattern_len = n;
            }
            if (a->single_word && !tok->word_re &&
                compile_regex(tok, "added_tokens (single_word)", WORD_CLASS, -1, &tok->word_re, err))
                return -1;
            ms_trie *t = a->normalized ? &tok->trie_norm : &tok->trie_raw;
            if (a->pattern_len && trie_add(t, (const uint8_t *)a->pattern, a->pattern_len, i))
                return ms_err_set(err, MS_E_NOMEM, "out of memory building added tokens");
        }
    }
    return 0;
}

/* ---- normalizer, pre-tokenizer, decoder ---------------------------------------------- */

static int read_normalizer(struct ms_tokenizer *tok, const json_t *n, const char *what, ms_err *err)
{
    if (!n || json_is_null(n))
        return 0;
    const char *type = get_type(tok, n, what, err);
    if (!type)
        return -1;
    if (!strcmp(type, "NFC")) {
        tok->normalizer = MS_TOK_NORM_NFC;
        return 0;
    }
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list))
            return ms_err_set(err, MS_E_FORMAT, "%s: %s.normalizers: expected an array",
                              tok->path, what);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char w[96];
            snprintf(w, sizeof w, "%s.normalizers[%zu]", what, i);
            int before = tok->normalizer;
            if (read_normalizer(tok, json_array_get(list, i), w, err))
                return -1;
            if (before != MS_TOK_NORM_NONE && tok->normalizer != MS_TOK_NORM_NONE)
                return ms_err_set(err, MS_E_UNSUPPORTED, "%s: %s: more than one NFC normalizer",
                                  tok->path, w);
        }
        return 0;
    }
    return ms_err_set(err, MS_E_UNSUPPORTED, "%s: %s has type \"%s\"; supported normalizers: "
                      "null, NFC, Sequence of those", tok->path, what, type);
}

static int compile_regex(struct ms_tokenizer *tok, const char *what, const char *pattern,
                         int literal, pcre2_code **out, ms_err *err)
{
    ms_buf pat = {0};
    char why[128] = "";
    if (literal) {
        if (ms_buf_put(&pat, pattern, strlen(pattern) + 1))
            return ms_err_set(err, MS_E_NOMEM, "out of memory compiling %s", what);
    } else if (literal < 0) { /* a PCRE2 pattern of ours */
        if (ms_buf_put(&pat, pattern, strlen(pattern) + 1))
            return ms_err_set(err, MS_E_NOMEM, "out of memory compiling %s", what);
        literal = 0;
    } else if (ms_onig_to_pcre2(pattern, &pat, why, sizeof why)) {
        ms_buf_free(&pat);
        if (!why[0])
            return ms_err_set(err, MS_E_NOMEM, "out of memory compiling %s", what);
        return ms_err_set(err, MS_E_UNSUPPORTED, "%s: %s: the regex uses %s, which is not "
                          "supported: %s", tok->path, what, why, pattern);
    }
    int code;
    PCRE2_SIZE off;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    *out = pcre2_compile((PCRE2_SPTR)pat.p, PCRE2_ZERO_TERMINATED, opts, &code, &off, NULL);
    ms_buf_free(&pat);
    if (!*out) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return ms_err_set(err, MS_E_FORMAT, "%s: %s: the regex does not compile (%s at offset "
                          "%zu): %s", tok->path, what, (const char *)msg, (size_t)off, pattern);
    }
    /* JIT when available; pcre2_match uses it transparently (speed only) */
    pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE);
    return 0;
}

static int read_split(struct ms_tokenizer *tok, const json_t *s, const char *what,
                      ms_pretok_step *st, ms_err *err)
{
    static const char *const behaviors[] = {"Removed", "Isolated", "MergedWithPrevious",
                                            "MergedWithNext", "Contiguous"};
    const json_t *pat = json_object_get(s, "pattern");
    const json_t *re = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
    const json_t *lit = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
    if (!json_is_string(re) && !json_is_string(lit))
        return ms_err_set(err, MS_E_FORMAT, "%s: %s.pattern: expected {\"Regex\": ...} or "
                          "{\"String\": ...}", tok->path, what);
    const json_t *beh = json_object_get(s, "behavior");
    st->behavior = -1;
    for (int i = 0; i < 5 && json_is_string(beh); i++)
        if (!strcmp(json_string_value(beh), behaviors[i]))
            st->behavior = i;
    if (st->behavior < 0)
        return ms_err_set(err, MS_E_UNSUPPORTED, "%s: %s.behavior: expected one of Removed, "
                          "Isolated, MergedWithPrevious, MergedWithNext, Contiguous", tok->path, what);
    if (get_bool(tok, s, what, "invert", 0, &st->invert, err))
        return -1;
    st->kind = MS_PRETOK_SPLIT;
    /* HF compiles a String pattern as the regex of the escaped string (an
     * empty one matches between every two characters) */
    return compile_regex(tok, what, json_string_value(re ? re : lit), lit != NULL, &st->re, err);
}

static int read_pretok(struct ms_tokenizer *tok, const json_t *p, const char *what, ms_err *err)
{
    if (!p || json_is_null(p))
        return ms_err_set(err, MS_E_UNSUPPORTED, "%s: pre_tokenizer is null; only byte-level BPE "
                          "(a ByteLevel pre-tokenizer) is supported", tok->path);
    const char *type = get_type(tok, p, what, err);
    if (!type)
        return -1;
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list))
            return ms_err_set(err, MS_E_FORMAT, "%s: %s.pretokenizers: expected an array",
                              tok->path, what);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char w[96];
            snprintf(w, sizeof w, "%s.pretokenizers[%zu]", what, i);
            if (read_pretok(tok, json_array_get(list, i), w, err))
                return -1;
        }
        return 0;
    }
    if (tok->n_steps == MS_TOK_MAX_STEPS)
        return ms_err_set(err, MS_E_UNSUPPORTED, "%s: %s: more than %d pre-tokenizer steps",
                          tok->path, what, MS_TOK_MAX_STEPS);
    if (tok->n_steps > 0 && tok->steps[tok->n_steps - 1].kind == MS_PRETOK_BYTELEVEL)
        return ms_err_set(err, MS_E_UNSUPPORTED, "%s: %s comes after ByteLevel; ByteLevel must be "
                          "the last pre-tokenizer step", tok->path, what);
    ms_pretok_step *st = &tok->steps[tok->n_steps];
    memset(st, 0, sizeof *st);
    int rc;
    if (!strcmp(type, "Split")) {
        rc = read_split(tok, p, what, st, err);
    } else if (!strcmp(type, "ByteLevel")) {
        int use_regex;
        st->kind = MS_PRETOK_BYTELEVEL;
        st->behavior = MS_SPLIT_ISOLATED;
        rc = get_bool(tok, p, what, "add_prefix_space", 1, &st->add_prefix_space, err) ||
             get_bool(tok, p, what, "use_regex", 1, &use_regex, err);
        if (!rc && use_regex)
            rc = compile_regex(tok, what, GPT2_PATTERN, 0, &st->re, err);
    } else {
        return ms_err_set(err, MS_E_UNSUPPORTED, "%s: %s has type \"%s\"; supported "
                          "pre-tokenizers: Split, ByteLevel, Sequence of those", tok->path, what,
                          type);
    }
    tok->n_steps++; /* counted even on failure so that close frees st->re */
    return rc;
}

static int read_decoder(const struct ms_tokenizer *tok, const json_t *d, ms_err *err)
{
    if (!d || json_is_null(d))
        return ms_err_set(err, MS_E_UNSUPPORTED, "%s: decoder is null; only the ByteLevel decoder "
                          "is supported", tok->path);
    const char *type = get_type(tok, d, "decoder", err);
    if (!type)
        return -1;
    if (strcmp(type, "ByteLevel"))
        return ms_err_set(err, MS_E_UNSUPPORTED, "%s: decoder has type \"%s\"; only ByteLevel is "
                          "supported", tok->path, type);
    return 0;
}

/* ---- per-id tables --------------------------------------------------------------------- */

/* Bytes a token string decodes to under HF's ByteLevel decoder: every char
 * mapped back through the byte alphabet, or, when one char is outside it, the
 * string's own UTF-8 bytes. */
static int decoded_bytes(const char *s, size_t n, ms_buf *out)
{
    size_t start = out->n;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = ms_utf8_next((const uint8_t *)s + i, n - i, &cp);
        int b = k ? ms_bytelevel_byte(cp) : -1;
        if (b < 0) {
            out->n = start;
            return ms_buf_put(out, s, n);
        }
        uint8_t byte = (uint8_t)b;
        if (ms_buf_put(out, &byte, 1))
            return -1;
        i += k;
    }
    return 0;
}

/* Per-id tables once the vocabulary and the added tokens are known: the
 * token string of each id (added content first, as HF's id_to_token), its
 * flags and its decoded bytes. */
static int build_id_tables(struct ms_tokenizer *tok, ms_err *err)
{
    int32_t n_vocab_ids = tok->n_ids;
    for (int32_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].id >= tok->n_ids)
            tok->n_ids = tok->added[i].id + 1;
    size_t n = (size_t)tok->n_ids ? (size_t)tok->n_ids : 1;
    uint32_t *vo = realloc(tok->vocab_off, n * sizeof *vo);
    if (vo)
        tok->vocab_off = vo;
    uint32_t *vl = realloc(tok->vocab_len, n * sizeof *vl);
    if (vl)
        tok->vocab_len = vl;
    tok->id_flags = calloc(n, 1);
    tok->str_off = malloc(n * sizeof *tok->str_off);
    tok->str_len = malloc(n * sizeof *tok->str_len);
    tok->dec_off = malloc(n * sizeof *tok->dec_off);
    tok->dec_len = malloc(n * sizeof *tok->dec_len);
    if (!vo || !vl || !tok->id_flags || !tok->str_off || !tok->str_len || !tok->dec_off ||
        !tok->dec_len)
        return ms_err_set(err, MS_E_NOMEM, "out of memory for %d token ids", tok->n_ids);
    for (int32_t id = n_vocab_ids; id < tok->n_ids; id++) {
        tok->vocab_off[id] = 0;
        tok->vocab_len[id] = UINT32_MAX;
    }
    for (int32_t id = 0; id < tok->n_ids; id++) {
        tok->str_len[id] = tok->vocab_len[id];
        tok->str_off[id] = tok->vocab_off[id];
        tok->id_flags[id] = tok->vocab_len[id] != UINT32_MAX ? MS_ID_PRESENT : 0;
    }
    for (int32_t i = 0; i < tok->n_added; i++) {
        const ms_added *a = &tok->added[i];
        int64_t off = ms_tok_str_add(tok, a->content, strlen(a->content));
        if (off < 0 || off > UINT32_MAX)
            return ms_err_set(err, MS_E_NOMEM, "out of memory for added tokens");
        tok->str_off[a->id] = (uint32_t)off;
        tok->str_len[a->id] = (uint32_t)strlen(a->content);
        tok->id_flags[a->id] = MS_ID_PRESENT | MS_ID_ADDED | (a->special ? MS_ID_SPECIAL : 0);
    }
    ms_buf dec = {0};
    for (int32_t id = 0; id < tok->n_ids; id++) {
        tok->dec_off[id] = (uint32_t)dec.n;
        tok->dec_len[id] = 0;
        if (!(tok->id_flags[id] & MS_ID_PRESENT))
            continue;
        if (decoded_bytes(tok->strs + tok->str_off[id], tok->str_len[id], &dec) ||
            dec.n > UINT32_MAX) {
            ms_buf_free(&dec);
            return ms_err_set(err, MS_E_NOMEM, "out of memory for the decoding table");
        }
        tok->dec_len[id] = (uint32_t)dec.n - tok->dec_off[id];
    }
    tok->dec = dec.p;
    tok->dec_n = dec.n;
    return 0;
}

/* Initial BPE symbols of each byte: its byte-level char, else byte_fallback. */
static void build_byte_table(struct ms_tokenizer *tok)
{
    for (int b = 0; b < 256; b++) {
        uint8_t s[4];
        size_t k = ms_utf8_put(s, ms_bytelevel_cp((uint8_t)b));
        tok->byte_id[b] = ms_tok_vocab_find(tok, s, k);
        tok->byte_fb_n[b] = 0;
        if (!tok->byte_fallback)
            continue;
        int ok = 1;
        for (size_t i = 0; i < k; i++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", s[i]);
            tok->byte_fb[b][i] = ms_tok_vocab_find(tok, name, strlen(name));
            ok &= tok->byte_fb[b][i] >= 0;
        }
        tok->byte_fb_n[b] = ok ? (int8_t)k : 0;
    }
}

/* ---- open / close ------------------------------------------------------------------- */

static int read_tokenizer(struct ms_tokenizer *tok, const char *text, size_t len, ms_err *err)
{
    static const char *const keys[] = {"version", "added_tokens", "normalizer", "pre_tokenizer",
                                       "decoder", "model"};
    enum { K_VERSION, K_ADDED, K_NORM, K_PRETOK, K_DECODER, K_MODEL, K_N };
    span v[K_N];
    if (scan_object(tok, "the top level", (span){text, len}, keys, v, K_N, err))
        return -1;
    if (!v[K_MODEL].p)
        return ms_err_set(err, MS_E_FORMAT, "%s: the key \"model\" is missing", tok->path);
    json_t *j[K_MODEL] = {0};
    int rc = 0;
    for (int i = 0; i < K_MODEL && !rc; i++)
        rc = load_small(tok, v[i], keys[i], &j[i], err);
    if (!rc && j[K_VERSION] && !(json_is_string(j[K_VERSION]) &&
                                 !strcmp(json_string_value(j[K_VERSION]), "1.0")))
        rc = ms_err_set(err, MS_E_UNSUPPORTED, "%s: version is not \"1.0\"", tok->path);
    if (!rc)
        rc = read_model(tok, v[K_MODEL], err);
    if (!rc)
        rc = read_added(tok, j[K_ADDED], err);
    if (!rc)
        rc = read_normalizer(tok, j[K_NORM], "normalizer", err);
    if (!rc)
        rc = read_pretok(tok, j[K_PRETOK], "pre_tokenizer", err);
    if (!rc && (tok->n_steps == 0 || tok->steps[tok->n_steps - 1].kind != MS_PRETOK_BYTELEVEL))
        rc = ms_err_set(err, MS_E_UNSUPPORTED, "%s: pre_tokenizer has no ByteLevel step; only "
                        "byte-level BPE is supported", tok->path);
    if (!rc)
        rc = read_decoder(tok, j[K_DECODER], err);
    if (!rc)
        rc = build_id_tables(tok, err);
    if (!rc)
        rc = build_tries(tok, err);
    if (!rc)
        build_byte_table(tok);
    for (int i = 0; i < K_MODEL; i++)
        json_decref(j[i]);
    return rc;
}

int ms_tokenizer_open(const char *model_dir, ms_tokenizer **out, ms_error *err)
{
    *out = NULL;
    struct ms_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok)
        return ms_err_set(err, MS_E_NOMEM, "out of memory opening the tokenizer");
    tok->unk_id = -1;
    int n = snprintf(tok->path, sizeof tok->path, "%s/tokenizer.json", model_dir);
    if (n < 0 || (size_t)n >= sizeof tok->path) {
        free(tok);
        return ms_err_set(err, MS_E_ARG, "model folder path too long: %s", model_dir);
    }
    char *text = NULL;
    size_t len = 0;
    int rc = read_file(tok->path, &text, &len, err);
    if (!rc)
        rc = read_tokenizer(tok, text, len, err);
    free(text);
    if (rc) {
        ms_tokenizer_close(tok);
        return rc;
    }
    *out = tok;
    return 0;
}

void ms_tokenizer_close(ms_tokenizer *tok)
{
    if (!tok)
        return;
    for (int i = 0; i < tok->n_steps; i++)
        pcre2_code_free(tok->steps[i].re);
    for (int32_t i = 0; i < tok->n_added; i++) {
        free(tok->added[i].content);
        free(tok->added[i].pattern);
    }
    free(tok->added);
    free(tok->trie_raw.nodes);
    free(tok->trie_norm.nodes);
    pcre2_code_free(tok->word_re);
    free(tok->merges);
    free(tok->vocab_slots);
    free(tok->vocab_off);
    free(tok->vocab_len);
    free(tok->id_flags);
    free(tok->str_off);
    free(tok->str_len);
    free(tok->dec_off);
    free(tok->dec_len);
    free(tok->strs);
    free(tok->dec);
    free(tok);
}

/* ---- lookups and decoding ------------------------------------------------------------ */

int32_t ms_tokenizer_n_ids(const ms_tokenizer *tok)
{
    return tok->n_ids;
}

int32_t ms_tokenizer_token_id(const ms_tokenizer *tok, const char *token)
{
    for (int32_t i = 0; i < tok->n_added; i++)
        if (!strcmp(tok->added[i].content, token))
            return tok->added[i].id;
    return ms_tok_vocab_find(tok, token, strlen(token));
}

int ms_tokenizer_encode(const ms_tokenizer *tok, const char *text, size_t len, int parse_special,
                        int32_t **ids, int64_t *n_ids, ms_error *err)
{
    return ms_tok_encode(tok, text, len, parse_special, ids, n_ids, err);
}

static int check_id(const ms_tokenizer *tok, int32_t id, ms_err *err)
{
    if (id < 0 || id >= tok->n_ids)
        return ms_err_set(err, MS_E_ARG, "token id %d is outside the tokenizer's ids 0 .. %d",
                          id, tok->n_ids - 1);
    if (!(tok->id_flags[id] & MS_ID_PRESENT))
        return ms_err_set(err, MS_E_ARG, "token id %d has no token in %s", id, tok->path);
    return 0;
}

int ms_tokenizer_decode(const ms_tokenizer *tok, const int32_t *ids, int64_t n, char **text,
                        size_t *len, ms_error *err)
{
    *text = NULL;
    *len = 0;
    ms_buf out = {0};
    for (int64_t i = 0; i < n; i++) {
        if (check_id(tok, ids[i], err)) {
            ms_buf_free(&out);
            return -1;
        }
        if (ms_buf_put(&out, tok->dec + tok->dec_off[ids[i]], tok->dec_len[ids[i]])) {
            ms_buf_free(&out);
            return ms_err_set(err, MS_E_NOMEM, "out of memory decoding %lld ids", (long long)n);
        }
    }
    if (ms_buf_put(&out, "", 1)) {
        ms_buf_free(&out);
        return ms_err_set(err, MS_E_NOMEM, "out of memory decoding %lld ids", (long long)n);
    }
    *text = (char *)out.p;
    *len = out.n - 1;
    return 0;
}

/* ---- streaming decode ------------------------------------------------------------------- */

struct ms_detok {
    const ms_tokenizer *tok;
    uint8_t held[4]; /* an incomplete UTF-8 sequence from earlier tokens */
    int n_held;
    ms_buf in, out;
};

int ms_detok_open(const ms_tokenizer *tok, ms_detok **out, ms_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return ms_err_set(err, MS_E_NOMEM, "out of memory opening a decode stream");
    (*out)->tok = tok;
    return 0;
}

void ms_detok_close(ms_detok *d)
{
    if (!d)
        return;
    ms_buf_free(&d->in);
    ms_buf_free(&d->out);
    free(d);
}

static const uint8_t FFFD[3] = {0xEF, 0xBF, 0xBD};

int ms_detok_push(ms_detok *d, int32_t id, const char **text, size_t *len, ms_error *err)
{
    *text = "";
    *len = 0;
    if (check_id(d->tok, id, err))
        return -1;
    d->in.n = 0;
    d->out.n = 0;
    if (ms_buf_put(&d->in, d->held, (size_t)d->n_held) ||
        ms_buf_put(&d->in, d->tok->dec + d->tok->dec_off[id], d->tok->dec_len[id]) ||
        ms_buf_reserve(&d->out, 3 * d->in.n + 1))
        return ms_err_set(err, MS_E_NOMEM, "out of memory in the decode stream");
    d->n_held = 0;
    const uint8_t *s = d->in.p;
    size_t n = d->in.n, i = 0;
    while (i < n) {
        size_t ok = ms_utf8_valid_prefix(s + i, n - i);
        memcpy(d->out.p + d->out.n, s + i, ok);
        d->out.n += ok;
        i += ok;
        if (i == n)
            break;
        if (ms_utf8_incomplete(s + i, n - i)) { /* wait for the next token */
            memcpy(d->held, s + i, n - i);
            d->n_held = (int)(n - i);
            break;
        }
        memcpy(d->out.p + d->out.n, FFFD, 3);
        d->out.n += 3;
        i += ms_utf8_bad_len(s + i, n - i);
    }
    d->out.p[d->out.n] = 0;
    *text = (const char *)d->out.p;
    *len = d->out.n;
    return 0;
}

void ms_detok_flush(ms_detok *d, const char **text, size_t *len)
{
    static const char fffd[] = "\xEF\xBF\xBD";
    *text = d->n_held ? fffd : "";
    *len = d->n_held ? 3 : 0;
    d->n_held = 0;
}
