/* Tokenizer internals: byte-level BPE read from a Hugging Face tokenizer.json,
 * token-exact with the Hugging Face tokenizers library (the Rust crate behind
 * transformers' "fast" tokenizers). The public API is the ms_tokenizer block
 * of include/moestream.h; this header is shared by the tokenizer*.c files only.
 *
 * Files:
 *   tokenizer.c           open/close: tokenizer.json sections, validation, added
 *                         tokens, pre-tokenizer steps; token_id, decode, streaming
 *   tokenizer_vocab.c     the large sections (model.vocab, model.merges) read by a
 *                         small strict JSON scanner, and their hash tables
 *   tokenizer_encode.c    encode: added-token split, normalizer, pre-tokenizer
 *                         (PCRE2), BPE merges with a per-call cache
 *   tokenizer_regex.c     Oniguruma pattern -> PCRE2 pattern translation
 *   tokenizer_unicode.c   UTF-8 (lossy decoding), NFC, the GPT-2 byte alphabet
 *   tokenizer_unicode_data.c  generated Unicode tables (tools/tokref/gen_unicode_tables.py)
 *
 * Pipeline of one encode, as HF's TokenizerImpl::encode with
 * add_special_tokens=false:
 *   bytes -> valid UTF-8 (each maximal invalid subsequence -> U+FFFD)
 *         -> split on added tokens whose `normalized` is false (leftmost-longest)
 *         -> each remaining piece: normalizer (none | NFC)
 *         -> split on added tokens whose `normalized` is true
 *         -> pre-tokenizer steps (Split regex ..., ByteLevel) on each piece
 *         -> BPE on each pre-token over the byte alphabet -> ids
 *
 * Ownership: the ms_tokenizer owns every table below; it is read-only after
 * open, so one tokenizer may encode from several threads at once (every
 * encode allocates its own scratch state, cache and PCRE2 match data). */
#ifndef MS_RUNTIME_TOKENIZER_H
#define MS_RUNTIME_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/error.h"

/* ---- growable byte buffer ------------------------------------------------------- */

typedef struct ms_buf {
    uint8_t *p;
    size_t n, cap;
} ms_buf;

/* Both return 0, or -1 when memory runs out (the buffer is left as it was). */
int ms_buf_reserve(ms_buf *b, size_t extra);
int ms_buf_put(ms_buf *b, const void *src, size_t n);
void ms_buf_free(ms_buf *b);

/* ---- UTF-8 and Unicode (tokenizer_unicode.c) --------------------------------------- */

/* Length of the well-formed UTF-8 sequence at s (1..4) with its code point in
 * *cp, or 0 when s does not start one (n >= 1). */
size_t ms_utf8_next(const uint8_t *s, size_t n, uint32_t *cp);
/* Length of the maximal ill-formed subpart at s (what one U+FFFD replaces,
 * the Unicode "maximal subpart" practice of Rust's String::from_utf8_lossy
 * and of the WHATWG decoder); call only where ms_utf8_next returned 0. */
size_t ms_utf8_bad_len(const uint8_t *s, size_t n);
/* 1 when s[0..n) is a proper prefix of a well-formed sequence (more bytes
 * could complete it), else 0. */
int ms_utf8_incomplete(const uint8_t *s, size_t n);
/* Length of the longest well-formed prefix of s. */
size_t ms_utf8_valid_prefix(const uint8_t *s, size_t n);
/* Appends s to out with every maximal ill-formed subpart replaced by U+FFFD. */
int ms_utf8_lossy(const uint8_t *s, size_t n, ms_buf *out);
/* Writes cp as UTF-8 (1..4 bytes) to dst; returns the length. */
size_t ms_utf8_put(uint8_t *dst, uint32_t cp);

/* Appends the NFC form of the valid UTF-8 text s to out. Text that holds no
 * code point NFC can change is copied as is. */
int ms_nfc(const uint8_t *s, size_t n, ms_buf *out);

/* GPT-2 byte alphabet: the code point that stands for byte b in byte-level
 * token strings, and the inverse (-1 for a code point outside the alphabet). */
uint32_t ms_bytelevel_cp(uint8_t b);
int ms_bytelevel_byte(uint32_t cp);

/* Generated tables (tokenizer_unicode_data.c). Sorted by code point. */
typedef struct ms_nfc_range { uint32_t lo, hi; int32_t val; } ms_nfc_range;
typedef struct ms_nfc_decomp { uint32_t cp; uint16_t off; uint16_t len; } ms_nfc_decomp;
typedef struct ms_nfc_pair { uint32_t a, b, c; } ms_nfc_pair;
extern const ms_nfc_range ms_nfc_ccc[];      /* canonical combining class != 0 */
extern const int ms_nfc_n_ccc;
extern const ms_nfc_range ms_nfc_unsafe[];   /* code points NFC may change */
extern const int ms_nfc_n_unsafe;
extern const uint32_t ms_nfc_decomp_seq[];
extern const ms_nfc_decomp ms_nfc_decomp_tab[]; /* full canonical decompositions */
extern const int ms_nfc_n_decomp;
extern const ms_nfc_pair ms_nfc_pairs[];     /* primary composites, sorted by (a, b) */
extern const int ms_nfc_n_pairs;

/* Per general category (and "w" for \w): the code points PCRE2's Unicode
 * lacks that the reference's regex engine puts in it, as n ranges
 * ranges[2i] .. ranges[2i+1]. */
typedef struct ms_regex_extra {
    const char *category;
    const uint32_t *ranges;
    int n;
} ms_regex_extra;
extern const ms_regex_extra ms_regex_extras[];
extern const int ms_n_regex_extras;
/* ---- Oniguruma -> PCRE2 (tokenizer_regex.c) ------------------------------------------ */

/* Rewrites a tokenizer.json Split regex (HF compiles it with Oniguruma) into
 * a PCRE2 pattern (compiled with UTF + UCP) that matches the same strings.
 * Returns 0, or -1 with why (a short phrase) for a construct whose meaning
 * differs between the two engines and that is not rewritten. */
int ms_onig_to_pcre2(const char *pattern, ms_buf *out, char *why, size_t why_cap);

/* ---- the tokenizer ---------------------------------------------------------------- */

enum ms_tok_norm {
    MS_TOK_NORM_NONE = 0,
    MS_TOK_NORM_NFC,
};

enum ms_pretok_kind {
    MS_PRETOK_SPLIT = 0,
    MS_PRETOK_BYTELEVEL,
};

/* SplitDelimiterBehavior of HF's Split pre-tokenizer. */
enum ms_split_behavior {
    MS_SPLIT_REMOVED = 0,
    MS_SPLIT_ISOLATED,
    MS_SPLIT_MERGED_PREV,
    MS_SPLIT_MERGED_NEXT,
    MS_SPLIT_CONTIGUOUS,
};

typedef struct ms_pretok_step {
    int kind;              /* enum ms_pretok_kind */
    pcre2_code *re;        /* Split: its pattern; ByteLevel: the GPT-2 pattern if use_regex */
    int behavior;          /* enum ms_split_behavior (ByteLevel regex: Isolated) */
    int invert;
    int add_prefix_space;  /* ByteLevel */
} ms_pretok_step;

#define MS_TOK_MAX_STEPS 8

/* Added tokens (special or not), matched in the text before pre-tokenization. */
typedef struct ms_added {
    char *content;         /* as in the file (owned) */
    char *pattern;         /* what is matched: content, or its normalized form */
    size_t pattern_len;
    int32_t id;
    uint8_t special, single_word, lstrip, rstrip, normalized;
} ms_added;

/* Byte trie over added-token patterns, for leftmost-longest matching. */
typedef struct ms_trie_node {
    int32_t child;         /* first child node, -1 when none */
    int32_t sibling;       /* next sibling node, -1 when none */
    int32_t added;         /* index into added[] when a pattern ends here, else -1 */
    uint8_t byte;
} ms_trie_node;

typedef struct ms_trie {
    ms_trie_node *nodes;   /* nodes[0] is the root */
    int32_t n, cap;
    uint8_t first[256];    /* 1 when some pattern starts with that byte */
} ms_trie;

/* One slot of the vocabulary table (id -1: empty). */
typedef struct ms_vocab_slot {
    uint32_t tag;          /* high bits of the string's hash */
    int32_t id;
    uint32_t off, len;     /* the string in strs */
} ms_vocab_slot;

/* One slot of the merge table: pair (a, b) -> (rank, merged id). */
typedef struct ms_merge_slot {
    int32_t a, b;          /* a == -1: empty slot */
    int32_t rank, id;
} ms_merge_slot;

struct ms_tokenizer {
    char path[512];            /* the tokenizer.json, for messages */

    /* ids 0 .. n_ids-1 (n_ids = 1 + highest id of vocab and added tokens) */
    int32_t n_ids;
    uint8_t *id_flags;         /* [n_ids] MS_ID_* bits */
    uint32_t *str_off;         /* [n_ids] token string (HF id_to_token) in strs */
    uint32_t *str_len;
    uint32_t *dec_off;         /* [n_ids] decoded bytes of the id in dec */
    uint32_t *dec_len;
    char *strs;                /* token strings, each NUL-terminated */
    size_t strs_n, strs_cap;
    uint8_t *dec;
    size_t dec_n;

    /* model.vocab: string -> id (open addressing; a slot holds what a lookup
     * compares, so that a hit costs one slot and one string access) */
    ms_vocab_slot *vocab_slots;
    uint32_t vocab_mask;
    uint32_t *vocab_off, *vocab_len; /* [n_ids] model token string, len UINT32_MAX if none */
    int32_t n_vocab;           /* entries of model.vocab */

    /* model.merges */
    ms_merge_slot *merges;
    uint32_t merges_mask;
    int32_t n_merges;

    /* BPE options and the byte alphabet's initial symbols */
    int32_t byte_id[256];      /* id of the byte-level char of each byte, -1 if absent */
    int32_t byte_fb[256][2];   /* byte_fallback ids for it (<0xXX> of its UTF-8) */
    int8_t byte_fb_n[256];     /* 0 when no complete fallback exists */
    int32_t unk_id;            /* -1 when none */
    int fuse_unk, byte_fallback, ignore_merges;

    int normalizer;            /* enum ms_tok_norm */

    ms_added *added;
    int32_t n_added;
    ms_trie trie_raw;          /* added tokens with normalized == false */
    ms_trie trie_norm;         /* added tokens with normalized == true */
    pcre2_code *word_re;       /* a word character (single_word tokens), else NULL */

    ms_pretok_step steps[MS_TOK_MAX_STEPS];
    int n_steps;
};

enum {
    MS_ID_PRESENT = 1,         /* the id has a token */
    MS_ID_ADDED = 2,           /* it is an added token */
    MS_ID_SPECIAL = 4,         /* an added token marked special */
};

/* tokenizer_vocab.c: reads model.vocab (JSON object text [p, p+n)) and
 * model.merges (JSON array text) into tok. `file` names the file in errors. */
int ms_tok_read_vocab(struct ms_tokenizer *tok, const char *p, size_t n, ms_err *err);
int ms_tok_read_merges(struct ms_tokenizer *tok, const char *p, size_t n, ms_err *err);
/* Model vocabulary id of string s, or -1. */
int32_t ms_tok_vocab_find(const struct ms_tokenizer *tok, const void *s, size_t n);
/* Merge of the pair (a, b): its slot, or NULL. */
const ms_merge_slot *ms_tok_merge_find(const struct ms_tokenizer *tok, int32_t a, int32_t b);
/* Appends n bytes + NUL to tok->strs; returns the offset, or -1 on OOM. */
int64_t ms_tok_str_add(struct ms_tokenizer *tok, const void *s, size_t n);

/* JSON scanning helpers shared by tokenizer.c and tokenizer_vocab.c. Each
 * returns the position after the element, or NULL when the text is not
 * well-formed JSON there. */
const char *ms_json_skip_ws(const char *p, const char *end);
const char *ms_json_skip_value(const char *p, const char *end, int depth);
/* Decodes the JSON string at p (p points at the opening quote) into out
 * (appended, not NUL-terminated); the content must be valid UTF-8. */
const char *ms_json_scan_string(const char *p, const char *end, ms_buf *out);

/* tokenizer_encode.c */
int ms_tok_encode(const struct ms_tokenizer *tok, const char *text, size_t len,
                  int parse_special, int32_t **ids, int64_t *n_ids, ms_err *err);
/* For tests: the pre-tokens of text (normalized as a whole; added tokens not
 * split out), each as its byte-level string followed by a NUL byte, appended
 * to out. This is what HF's pre_tokenizer.pre_tokenize_str returns. */
int ms_tok_pretokens(const struct ms_tokenizer *tok, const char *text, size_t len, ms_buf *out,
                     ms_err *err);

#endif
