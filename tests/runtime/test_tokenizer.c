/* Tokenizer tests.
 *
 *   test_tokenizer
 *       Self-contained checks (run by tests/run.sh): UTF-8 lossy reading, NFC,
 *       the byte alphabet, Oniguruma -> PCRE2 rewriting, a small generated
 *       tokenizer.json (merges, added tokens, streaming decode, parse_special)
 *       and every load refusal with its message.
 *   test_tokenizer --compare REF_DIR MODEL_DIR
 *       Token-exact comparison with the Hugging Face tokenizers library: the
 *       ids and decodings written by tools/tokref/ref.js (run by
 *       tests/runtime/test_tokenizer.sh); one PASS/FAIL line per corpus group,
 *       plus the load time and encode throughput (measured, not asserted).
 */
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "runtime/tokenizer.h"
#include "test.h"

static char tmpdir[512];

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

/* Whole file into a malloc'd, NUL-terminated buffer; NULL when unreadable. */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    ms_buf b = {0};
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (ms_buf_put(&b, chunk, got)) {
            fclose(f);
            ms_buf_free(&b);
            return NULL;
        }
    fclose(f);
    if (ms_buf_put(&b, "", 1)) {
        ms_buf_free(&b);
        return NULL;
    }
    *len = b.n - 1;
    return (char *)b.p;
}

/* ---- UTF-8, NFC, byte alphabet --------------------------------------------------------- */

static int lossy_is(const char *in, size_t n, const char *want)
{
    ms_buf b = {0};
    int ok = ms_utf8_lossy((const uint8_t *)in, n, &b) == 0 && b.n == strlen(want) &&
             !memcmp(b.p, want, b.n);
    ms_buf_free(&b);
    return ok;
}

#define R "\xEF\xBF\xBD"

static void tok_utf8_lossy(void)
{
    CHECK(lossy_is("abc", 3, "abc"), "ascii");
    CHECK(lossy_is("a\x80z", 3, "a" R "z"), "lone continuation");
    CHECK(lossy_is("\xC0\xAF", 2, R R), "overlong: one U+FFFD per byte");
    CHECK(lossy_is("\xE0\x80\xAF", 3, R R R), "E0 80: E0 alone is a maximal subpart");
    CHECK(lossy_is("\xED\xA0\x80", 3, R R R), "surrogate");
    CHECK(lossy_is("\xE4\xB8", 2, R), "truncated 3-byte sequence: one U+FFFD");
    CHECK(lossy_is("\xF0\x9F\x98x", 4, R "x"), "truncated 4-byte sequence then ASCII");
    CHECK(lossy_is("\xE2\x82\x41", 3, R "A"), "bad third byte");
    CHECK(lossy_is("\xF4\x90\x80\x80", 4, R R R R), "above U+10FFFF");
    CHECK(lossy_is("\xC3\xA9\xFF", 3, "\xC3\xA9" R), "valid then invalid");
    CHECK(ms_utf8_incomplete((const uint8_t *)"\xF0\x9F\x98", 3), "prefix of a 4-byte char");
    CHECK(!ms_utf8_incomplete((const uint8_t *)"\xF0\x41", 2), "not a prefix");
}

static int nfc_is(const char *in, const char *want)
{
    ms_buf b = {0};
    int ok = ms_nfc((const uint8_t *)in, strlen(in), &b) == 0 && b.n == strlen(want) &&
             !memcmp(b.p, want, b.n);
    ms_buf_free(&b);
    return ok;
}

static void tok_nfc(void)
{
    CHECK(nfc_is("plain ascii", "plain ascii"), "ascii unchanged");
    CHECK(nfc_is("e\xCC\x81", "\xC3\xA9"), "e + U+0301 -> U+00E9");
    CHECK(nfc_is("caf\xC3\xA9", "caf\xC3\xA9"), "already composed");
    /* U+1E0A U+0323 -> U+1E0C U+0307 (reordering, then composition) */
    CHECK(nfc_is("\xE1\xB8\x8A\xCC\xA3", "\xE1\xB8\x8C\xCC\x87"), "D dot above + dot below");
    /* q U+0307 U+0323 -> q U+0323 U+0307 (canonical order only) */
    CHECK(nfc_is("q\xCC\x87\xCC\xA3", "q\xCC\xA3\xCC\x87"), "reordering without composite");
    /* conjoining jamo -> U+AC01 */
    CHECK(nfc_is("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"), "Hangul L V T");
    /* U+212B ANGSTROM SIGN -> U+00C5 (singleton) */
    CHECK(nfc_is("\xE2\x84\xAB", "\xC3\x85"), "singleton decomposition");
    /* U+0958 (excluded composite) stays decomposed: U+0915 U+093C */
    CHECK(nfc_is("\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC"), "composition exclusion");
    CHECK(nfc_is("\xCC\x81x", "\xCC\x81x"), "leading combining mark");
    CHECK(nfc_is("ab e\xCC\x81 cd e\xCC\x81", "ab \xC3\xA9 cd \xC3\xA9"), "two stretches");
}

static void tok_byte_alphabet(void)
{
    int seen[324] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = ms_bytelevel_cp((uint8_t)b);
        CHECK(cp < 324 && !seen[cp], "byte %d maps to U+%04X twice or out of range", b, cp);
        if (cp < 324)
            seen[cp] = 1;
        CHECK(ms_bytelevel_byte(cp) == b, "inverse of byte %d", b);
    }
    CHECK(ms_bytelevel_cp(' ') == 0x120, "space is U+0120");
    CHECK(ms_bytelevel_cp('\n') == 0x10A, "newline is U+010A");
    CHECK(ms_bytelevel_cp(0xAD) == 0x143, "0xAD is U+0143");
    CHECK(ms_bytelevel_byte(0x144) == -1 && ms_bytelevel_byte(0x3000) == -1, "outside");
}

/* ---- regex rewriting ---------------------------------------------------------------- */

static const char *rewrite(const char *pat, char *why, size_t cap)
{
    static ms_buf out;
    out.n = 0;
    why[0] = 0;
    if (ms_onig_to_pcre2(pat, &out, why, cap))
        return NULL;
    return (const char *)out.p;
}

static void tok_regex_rewrite(void)
{
    char why[128];
    const char *r = rewrite("\\s+(?!\\S)|\\s+", why, sizeof why);
    CHECK(r && !strcmp(r, "[\\t-\\r\\x{85}\\p{Z}]+(?![^\\t-\\r\\x{85}\\p{Z}])|[\\t-\\r\\x{85}\\p{Z}]+"),
          "\\s rewrite: %s", r ? r : why);
    r = rewrite("(?i:'s|'t)", why, sizeof why);
    CHECK(r && !strcmp(r, "(?i:'s|'t)"), "(?i:) kept: %s", r ? r : why);
    r = rewrite("[^\\s\\p{L}\\p{N}]+[\\r\\n/]*", why, sizeof why);
    /* \p{L} \p{N}, then the letters and digits of Unicode > 14 (e.g. U+1C89,
     * Unicode 16), merged, after every \p item */
    CHECK(r && strstr(r, "[^\\t-\\r\\x{85}\\p{Z}\\p{L}\\p{N}\\x{1C89}-\\x{1C8A}") == r &&
              strstr(r, "\\x{10D40}-\\x{10D65}") && strstr(r, "\\x{31350}-\\x{323AF}]+[\\r\\n/]*"),
          "class: %s", r ? r : why);
    r = rewrite("\\p{S}\\d", why, sizeof why);
    CHECK(r && strstr(r, "[\\p{S}") == r && strstr(r, "\\x{1FABF}") && strstr(r, "][\\p{Nd}"),
          "\\p{S} (U+1FABF is So since Unicode 15): %s", r ? r : why);
    CHECK(!rewrite("\\p{Han}", why, sizeof why) && strstr(why, "\\p{Han}"), "script: %s", why);
    CHECK(!rewrite("[^\\P{L}]", why, sizeof why) && strstr(why, "negated"), "\\P in class: %s", why);
    r = rewrite("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+", why, sizeof why);
    CHECK(r && !strcmp(r, "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"), "escapes: %s",
          r ? r : why);
    r = rewrite("a{,3}.\\u00e9\\h", why, sizeof why);
    CHECK(r && !strcmp(r, "a{0,3}[^\\n]\\x{00e9}[0-9a-fA-F]"), "misc: %s", r ? r : why);
    CHECK(!rewrite("\\bword\\b", why, sizeof why) && strstr(why, "\\b"), "\\b refused: %s", why);
    CHECK(!rewrite("^x", why, sizeof why) && strstr(why, "anchor"), "^ refused: %s", why);
    CHECK(!rewrite("[a[b]]", why, sizeof why) && strstr(why, "nested"), "nested: %s", why);
    CHECK(!rewrite("(?m:x)", why, sizeof why) && strstr(why, "group"), "(?m: refused: %s", why);
    CHECK(!rewrite("(?i:\\p{Lu})", why, sizeof why) && strstr(why, "(?i)"), "ci: %s", why);
}

/* ---- a generated tokenizer.json ------------------------------------------------------ */

/* Appends s as a JSON string literal. */
static void json_str(ms_buf *b, const char *s, size_t n)
{
    ms_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            ms_buf_put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            ms_buf_put(b, esc, 6);
        } else {
            ms_buf_put(b, &c, 1);
        }
    }
    ms_buf_put(b, "\"", 1);
}

static void put_s(ms_buf *b, const char *s)
{
    ms_buf_put(b, s, strlen(s));
}

/* Byte-level string of raw text. */
static void bl(const char *raw, char *out)
{
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p; p++)
        k += ms_utf8_put((uint8_t *)out + k, ms_bytelevel_cp(*p));
    out[k] = 0;
}

/* Vocab: the 256 byte chars (id = byte), then merges of MERGES in order (each
 * result gets the next id). Added tokens: <|end|> (special, 300) and <x>
 * (not special, 301). The pieces of the file are replaceable for refusals. */
static const char *const MERGES[][2] = {
    {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {" w", "o"}, {" wo", "r"},
    {" wor", "l"}, {" worl", "d"}, {"\xE4", "\xB8"}, {"\xE4\xB8", "\xAD"},
};
#define N_MERGES (int)(sizeof MERGES / sizeof MERGES[0])

typedef struct tok_json {
    const char *model_type, *normalizer, *pre_tokenizer, *decoder, *added, *merge_extra;
    const char *model_extra;
    const char *vocab_head; /* entries put first in model.vocab, each followed by ", " */
    int dup_vocab;
    int drop_byte; /* 1..255: that byte's character left out of model.vocab */
} tok_json;

static void write_tokenizer(const char *dir, const tok_json *o)
{
    ms_buf b = {0};
    char s1[64], s2[64], s3[128];
    put_s(&b, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n \"added_tokens\": ");
    put_s(&b, o->added ? o->added
                       : "[{\"id\": 267, \"content\": \"<|end|>\", \"single_word\": false, "
                         "\"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
                         "\"special\": true},\n  {\"id\": 268, \"content\": \"<x>\", "
                         "\"normalized\": false, \"special\": false}]");
    put_s(&b, ",\n \"normalizer\": ");
    put_s(&b, o->normalizer ? o->normalizer : "null");
    put_s(&b, ",\n \"pre_tokenizer\": ");
    put_s(&b, o->pre_tokenizer ? o->pre_tokenizer
                               : "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                                 "\"pattern\": {\"Regex\": \" ?\\\\p{L}+|\\\\s+|[^\\\\s\\\\p{L}]+\"}, "
                                 "\"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
                                 "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}");
    put_s(&b, ",\n \"post_processor\": null,\n \"decoder\": ");
    put_s(&b, o->decoder ? o->decoder : "{\"type\": \"ByteLevel\"}");
    put_s(&b, ",\n \"model\": {\"type\": ");
    put_s(&b, o->model_type ? o->model_type : "\"BPE\"");
    put_s(&b, ", \"ignore_merges\": false");
    if (o->model_extra)
        put_s(&b, o->model_extra);
    put_s(&b, ",\n  \"vocab\": {");
    if (o->vocab_head)
        put_s(&b, o->vocab_head);
    for (int c = 0; c < 256; c++) {
        if (c == o->drop_byte && c)
            continue;
        uint8_t u[4];
        size_t k = ms_utf8_put(u, ms_bytelevel_cp((uint8_t)c));
        json_str(&b, (const char *)u, k);
        snprintf(s1, sizeof s1, ": %d, ", c);
        put_s(&b, s1);
    }
    for (int m = 0; m < N_MERGES; m++) {
        snprintf(s3, sizeof s3, "%s%s", MERGES[m][0], MERGES[m][1]);
        bl(s3, s1);
        json_str(&b, s1, strlen(s1));
        snprintf(s2, sizeof s2, ": %d%s", 256 + m, m + 1 < N_MERGES ? ", " : "");
        put_s(&b, s2);
    }
    if (o->dup_vocab)
        put_s(&b, ", \"a\": 299");
    put_s(&b, "},\n  \"merges\": [");
    for (int m = 0; m < N_MERGES; m++) {
        bl(MERGES[m][0], s1);
        bl(MERGES[m][1], s2);
        if (m % 2) { /* both forms */
            snprintf(s3, sizeof s3, "%s %s", s1, s2);
            json_str(&b, s3, strlen(s3));
        } else {
            put_s(&b, "[");
            json_str(&b, s1, strlen(s1));
            put_s(&b, ", ");
            json_str(&b, s2, strlen(s2));
            put_s(&b, "]");
        }
        put_s(&b, m + 1 < N_MERGES ? ", " : "");
    }
    if (o->merge_extra)
        put_s(&b, o->merge_extra);
    put_s(&b, "]}}\n");
    char path[1024];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    write_file(path, b.p, b.n);
    ms_buf_free(&b);
}

static ms_tokenizer *open_tiny(const tok_json *o)
{
    static int k;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/tok%d", tmpdir, k++);
    write_tokenizer(dir, o);
    ms_tokenizer *tok = NULL;
    ms_error err = {0};
    if (ms_tokenizer_open(dir, &tok, &err))
        CHECK(0, "open failed: %s", err.msg);
    return tok;
}

/* Encodes text and compares with want (n ids). */
static void expect_ids(ms_tokenizer *tok, const char *text, int parse_special, const int32_t *want,
                       int n)
{
    int32_t *ids = NULL;
    int64_t got = 0;
    ms_error err = {0};
    if (ms_tokenizer_encode(tok, text, strlen(text), parse_special, &ids, &got, &err)) {
        CHECK(0, "encode \"%s\" failed: %s", text, err.msg);
        return;
    }
    int same = got == n;
    for (int i = 0; same && i < n; i++)
        same = ids[i] == want[i];
    char line[512] = "";
    for (int64_t i = 0; i < got && strlen(line) < 480; i++)
        snprintf(line + strlen(line), sizeof line - strlen(line), " %d", ids[i]);
    CHECK(same, "encode \"%s\": got%s", text, line);
    free(ids);
}

static void tok_tiny_encode(void)
{
    tok_json o = {0};
    ms_tokenizer *tok = open_tiny(&o);
    if (!tok)
        return;
    CHECK(ms_tokenizer_n_ids(tok) == 269, "n_ids %d", ms_tokenizer_n_ids(tok));
    expect_ids(tok, "hello world", 1, (const int32_t[]){259, 264}, 2);
    expect_ids(tok, "hello<|end|> world<x>", 1, (const int32_t[]){259, 267, 264, 268}, 4);
    /* parse_special 0: the special token is text, <x> (not special) still matches */
    expect_ids(tok, "<|end|><x>", 0,
               (const int32_t[]){'<', '|', 'e', 'n', 'd', '|', '>', 268}, 8);
    expect_ids(tok, "\xE4\xB8\xAD", 1, (const int32_t[]){266}, 1);
    expect_ids(tok, "", 1, NULL, 0);
    /* ill-formed bytes read as U+FFFD (EF BF BD) */
    expect_ids(tok, "h\xFF", 1, (const int32_t[]){'h', 0xEF, 0xBF, 0xBD}, 4);
    CHECK(ms_tokenizer_token_id(tok, "<|end|>") == 267, "token_id <|end|>");
    CHECK(ms_tokenizer_token_id(tok, "hello") == 259, "token_id hello");
    CHECK(ms_tokenizer_token_id(tok, "nope") == -1, "token_id nope");
    ms_tokenizer_close(tok);
}

/* Vocabularies that real releases do not have but a file may: found by a
 * libFuzzer run over ms_tokenizer_open and encode, both passed a NULL
 * buffer to memcpy (undefined, caught by `make asan`). An empty key is a
 * token of no bytes; a character missing from the vocabulary is dropped
 * (no unk_token), as Hugging Face's BPE does, so a text of only that
 * character is no ids, and a word of no ids may come first. */
static void tok_odd_vocab(void)
{
    ms_tokenizer *tok = open_tiny(&(tok_json){.added = "[]", .vocab_head = "\"\": 267, "});
    if (tok) {
        CHECK(ms_tokenizer_n_ids(tok) == 268, "n_ids %d", ms_tokenizer_n_ids(tok));
        expect_ids(tok, "hello", 1, (const int32_t[]){259}, 1);
        ms_tokenizer_close(tok);
    }
    tok = open_tiny(&(tok_json){.added = "[]", .drop_byte = 'q'});
    if (tok) {
        expect_ids(tok, "q", 1, NULL, 0);
        expect_ids(tok, "q hello", 1, (const int32_t[]){' ', 259}, 2);
        expect_ids(tok, "hellqo", 1, (const int32_t[]){259}, 1); /* merged across the gap */
        ms_tokenizer_close(tok);
    }
}

static void tok_tiny_decode(void)
{
    tok_json o = {0};
    ms_tokenizer *tok = open_tiny(&o);
    if (!tok)
        return;
    const int32_t ids[] = {259, 267, 264, 0xE4, 0xB8, 0xAD, 268, 0xF0};
    char *text;
    size_t len;
    ms_error err = {0};
    CHECK(ms_tokenizer_decode(tok, ids, 8, &text, &len, &err) == 0, "%s", err.msg);
    const char want[] = "hello<|end|> world\xE4\xB8\xAD<x>\xF0";
    CHECK(len == sizeof want - 1 && !memcmp(text, want, len), "decode: %s", text);
    free(text);
    /* streaming: 中 arrives in three tokens, the last token is a cut 4-byte char */
    ms_detok *d;
    CHECK(ms_detok_open(tok, &d, &err) == 0, "%s", err.msg);
    ms_buf all = {0};
    const char *piece;
    for (int i = 0; i < 8; i++) {
        CHECK(ms_detok_push(d, ids[i], &piece, &len, &err) == 0, "%s", err.msg);
        if (i == 3 || i == 4)
            CHECK(len == 0, "partial character emitted at %d", i);
        if (i == 5)
            CHECK(len == 3 && !memcmp(piece, "\xE4\xB8\xAD", 3), "completed character");
        ms_buf_put(&all, piece, len);
    }
    ms_detok_flush(d, &piece, &len);
    ms_buf_put(&all, piece, len);
    const char want2[] = "hello<|end|> world\xE4\xB8\xAD<x>" R;
    CHECK(all.n == sizeof want2 - 1 && !memcmp(all.p, want2, all.n), "stream: %.*s", (int)all.n,
          (const char *)all.p);
    /* an ill-formed byte in the middle comes out at once as U+FFFD */
    all.n = 0;
    CHECK(ms_detok_push(d, 0xFF, &piece, &len, &err) == 0 && len == 3 && !memcmp(piece, R, 3),
          "0xFF -> U+FFFD");
    CHECK(ms_detok_push(d, 0xE4, &piece, &len, &err) == 0 && len == 0, "lead byte held");
    CHECK(ms_detok_push(d, 'a', &piece, &len, &err) == 0 && len == 4 && !memcmp(piece, R "a", 4),
          "cut sequence -> U+FFFD then a");
    CHECK(ms_detok_push(d, 9999, &piece, &len, &err) == MS_E_ARG || err.code == MS_E_ARG,
          "bad id refused");
    CHECK_STR_CONTAINS(err.msg, "9999");
    ms_buf_free(&all);
    ms_detok_close(d);
    int32_t bad = 269;
    CHECK(ms_tokenizer_decode(tok, &bad, 1, &text, &len, &err) != 0, "id 269 accepted");
    CHECK_STR_CONTAINS(err.msg, "269");
    ms_tokenizer_close(tok);
}

/* Opening with these options fails with a message holding each needle. */
static void expect_refusal(const tok_json *o, const char *n1, const char *n2)
{
    static int k;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/bad%d", tmpdir, k++);
    write_tokenizer(dir, o);
    ms_tokenizer *tok = NULL;
    ms_error err = {0};
    int rc = ms_tokenizer_open(dir, &tok, &err);
    CHECK(rc != 0 && !tok, "opened a tokenizer that should be refused (%s)", n1);
    CHECK_STR_CONTAINS(err.msg, "tokenizer.json");
    CHECK_STR_CONTAINS(err.msg, n1);
    if (n2)
        CHECK_STR_CONTAINS(err.msg, n2);
    ms_tokenizer_close(tok);
}

static void tok_refusals(void)
{
    ms_tokenizer *tok = NULL;
    ms_error err = {0};
    CHECK(ms_tokenizer_open("/nonexistent/model", &tok, &err) == MS_E_IO || err.code == MS_E_IO,
          "missing file code %d", err.code);
    CHECK_STR_CONTAINS(err.msg, "/nonexistent/model/tokenizer.json");
    expect_refusal(&(tok_json){.model_type = "\"WordPiece\""}, "model.type", "WordPiece");
    expect_refusal(&(tok_json){.normalizer = "{\"type\": \"Lowercase\"}"}, "normalizer",
                   "Lowercase");
    expect_refusal(&(tok_json){.normalizer = "{\"type\": \"Sequence\", \"normalizers\": "
                                             "[{\"type\": \"NFC\"}, {\"type\": \"NFKC\"}]}"},
                   "normalizer.normalizers[1]", "NFKC");
    expect_refusal(&(tok_json){.pre_tokenizer = "{\"type\": \"Whitespace\"}"}, "pre_tokenizer",
                   "Whitespace");
    expect_refusal(&(tok_json){.pre_tokenizer = "null"}, "pre_tokenizer", "ByteLevel");
    expect_refusal(&(tok_json){.pre_tokenizer = "{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                                                "\"\\\\s\"}, \"behavior\": \"Isolated\", "
                                                "\"invert\": false}"},
                   "ByteLevel", NULL);
    expect_refusal(&(tok_json){.pre_tokenizer = "{\"type\": \"Sequence\", \"pretokenizers\": "
                                                "[{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                                                "\"\\\\bx\"}, \"behavior\": \"Isolated\"}, "
                                                "{\"type\": \"ByteLevel\"}]}"},
                   "pre_tokenizer.pretokenizers[0]", "\\b");
    expect_refusal(&(tok_json){.pre_tokenizer = "{\"type\": \"Sequence\", \"pretokenizers\": "
                                                "[{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                                                "\"(\"}, \"behavior\": \"Isolated\"}, "
                                                "{\"type\": \"ByteLevel\"}]}"},
                   "pretokenizers[0]", NULL);
    expect_refusal(&(tok_json){.decoder = "{\"type\": \"WordPiece\"}"}, "decoder", "WordPiece");
    expect_refusal(&(tok_json){.decoder = "null"}, "decoder", NULL);
    expect_refusal(&(tok_json){.merge_extra = ", \"a zzz\""}, "model.merges[11]", "zzz");
    expect_refusal(&(tok_json){.merge_extra = ", \"a b c\""}, "model.merges[11]", "one space");
    expect_refusal(&(tok_json){.merge_extra = ", [\"h\", \"e\"]"}, "model.merges[11]", "already");
    expect_refusal(&(tok_json){.dup_vocab = 1}, "model.vocab", "twice");
    expect_refusal(&(tok_json){.model_extra = ", \"dropout\": 0.1"}, "model.dropout", NULL);
    expect_refusal(&(tok_json){.model_extra = ", \"continuing_subword_prefix\": \"##\""},
                   "model.continuing_subword_prefix", NULL);
    expect_refusal(&(tok_json){.model_extra = ", \"unk_token\": \"<unk>\""}, "model.unk_token",
                   "<unk>");
    expect_refusal(&(tok_json){.added = "[{\"id\": 400, \"content\": \"<|end|>\", \"special\": true}]"},
                   "added_tokens[0]", "267");
    expect_refusal(&(tok_json){.added = "[{\"id\": 267, \"content\": \"<e>\"}, {\"id\": 268, "
                                        "\"content\": \"<e>\"}]"},
                   "added_tokens[1]", "twice");
    expect_refusal(&(tok_json){.added = "{\"oops\": 1}"}, "added_tokens", "array");
    expect_refusal(&(tok_json){.added = "[1,]"}, "malformed", NULL);

    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/trunc", tmpdir);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    write_file(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", 34);
    CHECK(ms_tokenizer_open(dir, &tok, &err) != 0, "truncated file accepted");
    CHECK_STR_CONTAINS(err.msg, "tokenizer.json");
}

/* ---- comparison with the reference -------------------------------------------------- */

static int32_t *read_ids(const char *path, int64_t *n)
{
    size_t len;
    char *s = read_all(path, &len);
    *n = 0;
    if (!s)
        return NULL;
    int32_t *ids = malloc((len / 2 + 1) * sizeof *ids);
    char *p = s, *end;
    while (ids) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        ids[(*n)++] = (int32_t)v;
        p = end;
    }
    free(s);
    return ids;
}

/* Ids around the first difference, for a failure message. */
static void describe_diff(const int32_t *a, int64_t na, const int32_t *b, int64_t nb, char *out,
                          size_t cap)
{
    int64_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    int64_t lo = i > 3 ? i - 3 : 0;
    int k = snprintf(out, cap, "first difference at id %lld of %lld/%lld: want", (long long)i,
                     (long long)na, (long long)nb);
    for (int64_t j = lo; j < na && j < i + 5 && k < (int)cap - 20; j++)
        k += snprintf(out + k, cap - (size_t)k, " %d", a[j]);
    k += snprintf(out + k, cap - (size_t)k, ", got");
    for (int64_t j = lo; j < nb && j < i + 5 && k < (int)cap - 20; j++)
        k += snprintf(out + k, cap - (size_t)k, " %d", b[j]);
}

/* The pre-tokens of the text against HF's pre_tokenize_str of it. */
static int compare_pieces(ms_tokenizer *tok, const char *ref, const char *base, const char *text,
                          size_t len, char *why, size_t cap)
{
    char p[1024];
    size_t n_want;
    snprintf(p, sizeof p, "%s/%s.pieces", ref, base);
    char *want = read_all(p, &n_want);
    ms_buf got = {0};
    ms_error err = {0};
    int rc = -1;
    if (!want) {
        snprintf(why, cap, "cannot read the .pieces file of %s", base);
    } else if (ms_tok_pretokens(tok, text, len, &got, &err)) {
        snprintf(why, cap, "pre-tokenization failed: %.400s", err.msg);
    } else if (got.n != n_want || (n_want && memcmp(got.p, want, n_want))) {
        size_t i = 0, piece = 0, start = 0;
        while (i < got.n && i < n_want && got.p[i] == (uint8_t)want[i])
            if (got.p[i++] == 0)
                piece++, start = i;
        snprintf(why, cap, "pre-token %zu differs: want \"%.60s\", got \"%.60s\"", piece,
                 start < n_want ? want + start : "", start < got.n ? (char *)got.p + start : "");
    } else {
        rc = 0;
    }
    free(want);
    ms_buf_free(&got);
    return rc;
}

/* Checks one case; returns 0 or fills why. Adds the encode time of the case. */
static int compare_case(ms_tokenizer *tok, const char *ref, const char *base, int roundtrip,
                        double *t_encode, size_t *bytes, char *why, size_t cap)
{
    char p[1024];
    size_t len, dlen;
    int64_t nwant, ngot = 0;
    snprintf(p, sizeof p, "%s/%s.txt", ref, base);
    char *text = read_all(p, &len);
    snprintf(p, sizeof p, "%s/%s.ids", ref, base);
    int32_t *want = read_ids(p, &nwant);
    snprintf(p, sizeof p, "%s/%s.dec", ref, base);
    char *hf_dec = read_all(p, &dlen);
    int32_t *got = NULL;
    char *dec = NULL;
    ms_buf lossy = {0}, lossy_dec = {0}, stream = {0};
    ms_detok *d = NULL;
    ms_error err = {0};
    int rc = -1;
    if (!text || !want || !hf_dec) {
        snprintf(why, cap, "cannot read %s/%s.*", ref, base);
        goto done;
    }
    if (compare_pieces(tok, ref, base, text, len, why, cap))
        goto done;
    double t0 = now();
    if (ms_tokenizer_encode(tok, text, len, 1, &got, &ngot, &err)) {
        snprintf(why, cap, "encode failed: %.400s", err.msg);
        goto done;
    }
    *t_encode += now() - t0;
    *bytes += len;
    if (ngot != nwant || (ngot && memcmp(got, want, (size_t)ngot * sizeof *got))) {
        describe_diff(want, nwant, got, ngot, why, cap);
        goto done;
    }
    size_t n_dec;
    if (ms_tokenizer_decode(tok, got, ngot, &dec, &n_dec, &err)) {
        snprintf(why, cap, "decode failed: %.400s", err.msg);
        goto done;
    }
    /* HF returns String::from_utf8_lossy of the bytes (an unk or a byte
     * fallback token can cut a character); we return the bytes themselves */
    if (ms_utf8_lossy((const uint8_t *)dec, n_dec, &lossy_dec) || lossy_dec.n != dlen ||
        (dlen && memcmp(lossy_dec.p, hf_dec, dlen))) {
        snprintf(why, cap, "decode differs from HF's decode (%zu vs %zu bytes)", lossy_dec.n, dlen);
        goto done;
    }
    ms_utf8_lossy((const uint8_t *)text, len, &lossy);
    if (roundtrip && (lossy.n != n_dec || (n_dec && memcmp(lossy.p, dec, n_dec)))) {
        snprintf(why, cap, "decode(encode(x)) != x");
        goto done;
    }
    if (ms_detok_open(tok, &d, &err))
        goto done;
    for (int64_t i = 0; i < ngot; i++) {
        const char *piece;
        size_t pl;
        if (ms_detok_push(d, got[i], &piece, &pl, &err)) {
            snprintf(why, cap, "stream push failed: %.400s", err.msg);
            goto done;
        }
        ms_buf_put(&stream, piece, pl);
    }
    const char *piece;
    size_t pl;
    ms_detok_flush(d, &piece, &pl);
    ms_buf_put(&stream, piece, pl);
    if (stream.n != lossy_dec.n || (stream.n && memcmp(stream.p, lossy_dec.p, stream.n))) {
        snprintf(why, cap, "streaming decode differs from decode");
        goto done;
    }
    rc = 0;
done:
    ms_detok_close(d);
    ms_buf_free(&lossy);
    ms_buf_free(&lossy_dec);
    ms_buf_free(&stream);
    free(text);
    free(want);
    free(hf_dec);
    free(got);
    free(dec);
    return rc;
}

static int compare(const char *ref, const char *model_dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/manifest.json", ref);
    json_t *m = NULL;
    ms_err err = {0};
    const char *label = strrchr(ref, '/') ? strrchr(ref, '/') + 1 : ref;
    if (ms_json_load_file(path, &m, &err)) {
        printf("FAIL %s_reference: %s\n", label, err.msg);
        return 1;
    }
    ms_tokenizer *tok = NULL;
    double t0 = now();
    if (ms_tokenizer_open(model_dir, &tok, &err)) {
        printf("FAIL %s_open: %s\n", label, err.msg);
        json_decref(m);
        return 1;
    }
    double t_load = now() - t0;
    printf("PASS %s_open\n", label);
    json_t *cases = json_object_get(m, "cases");
    int failed = 0;
    size_t n = json_array_size(cases);
    for (size_t i = 0; i < n;) {
        const char *group = json_string_value(json_object_get(json_array_get(cases, i), "group"));
        size_t j = i, n_cases = 0, bytes = 0;
        double t_enc = 0, t_hf = 0;
        char why[600] = "";
        const char *bad = NULL;
        for (; j < n; j++) {
            json_t *c = json_array_get(cases, j);
            if (strcmp(json_string_value(json_object_get(c, "group")), group))
                break;
            n_cases++;
            t_hf += json_number_value(json_object_get(c, "hf_encode_seconds"));
            if (!bad && compare_case(tok, ref, json_string_value(json_object_get(c, "base")),
                                     json_is_true(json_object_get(c, "roundtrip")), &t_enc, &bytes,
                                     why, sizeof why))
                bad = json_string_value(json_object_get(c, "name"));
        }
        if (bad) {
            printf("FAIL %s_%s: case %s: %s\n", label, group, bad, why);
            failed++;
        } else {
            printf("PASS %s_%s (%zu cases)\n", label, group, n_cases);
        }
        if (!strcmp(group, "big") && !bad)
            printf("     %s: load %.3f s (HF via Node: %.3f s); encode %.1f MB/s over %.1f MB "
                   "(HF via Node: %.1f MB/s)\n", label, t_load,
                   json_number_value(json_object_get(m, "hf_load_seconds")), bytes / t_enc / 1e6,
                   bytes / 1e6, bytes / t_hf / 1e6);
        i = j;
    }
    fflush(stdout);
    ms_tokenizer_close(tok);
    json_decref(m);
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--compare"))
        return compare(argv[2], argv[3]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_tokenizer [--compare REF_DIR MODEL_DIR]\n");
        return 2;
    }
    const char *base = getenv("MS_TMP");
    snprintf(tmpdir, sizeof tmpdir, "%s/tokenizer.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    TEST_CASE(tok_utf8_lossy);
    TEST_CASE(tok_nfc);
    TEST_CASE(tok_byte_alphabet);
    TEST_CASE(tok_regex_rewrite);
    TEST_CASE(tok_tiny_encode);
    TEST_CASE(tok_tiny_decode);
    TEST_CASE(tok_odd_vocab);
    TEST_CASE(tok_refusals);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return t_finish();
}
