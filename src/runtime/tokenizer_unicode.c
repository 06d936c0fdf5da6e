/* UTF-8, NFC and the GPT-2 byte alphabet for the tokenizer.
 *
 * UTF-8 is decoded strictly (no overlongs, no surrogates, nothing above
 * U+10FFFF). Ill-formed input is replaced the way Rust's
 * String::from_utf8_lossy (and the WHATWG decoder Node uses) does: one U+FFFD
 * per maximal subpart, i.e. per lead byte plus the continuation bytes that
 * could still have completed it.
 *
 * NFC follows UAX #15: full canonical decomposition, canonical ordering of
 * combining marks, canonical composition (primary composites only; Hangul
 * algorithmic). Only the stretches around code points that NFC may change are
 * rewritten; a stretch runs from the last "safe" code point (combining class
 * 0, unchanged by NFC, never composing with what precedes it) before the
 * change to the next safe one, so text without such code points is copied. */
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer.h"

/* ---- buffers ---------------------------------------------------------------------- */

int ms_buf_reserve(ms_buf *b, size_t extra)
{
    if (b->cap - b->n >= extra)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->n < extra)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int ms_buf_put(ms_buf *b, const void *src, size_t n)
{
    if (ms_buf_reserve(b, n))
        return -1;
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}

void ms_buf_free(ms_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---- UTF-8 ------------------------------------------------------------------------- */

/* Valid range of the second byte for each lead byte (Unicode Table 3-7). */
static int second_ok(uint8_t lead, uint8_t c)
{
    switch (lead) {
    case 0xE0: return c >= 0xA0 && c <= 0xBF;
    case 0xED: return c >= 0x80 && c <= 0x9F;
    case 0xF0: return c >= 0x90 && c <= 0xBF;
    case 0xF4: return c >= 0x80 && c <= 0x8F;
    default: return c >= 0x80 && c <= 0xBF;
    }
}

static size_t seq_len(uint8_t lead)
{
    if (lead < 0x80)
        return 1;
    if (lead >= 0xC2 && lead <= 0xDF)
        return 2;
    if (lead >= 0xE0 && lead <= 0xEF)
        return 3;
    if (lead >= 0xF0 && lead <= 0xF4)
        return 4;
    return 0;
}

size_t ms_utf8_next(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len = seq_len(c);
    if (!len || len > n || !second_ok(c, s[1]))
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if (len == 2)
        *cp = (uint32_t)(c & 0x1F) << 6 | (s[1] & 0x3F);
    else if (len == 3)
        *cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    else
        *cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
              (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    return len;
}

size_t ms_utf8_bad_len(const uint8_t *s, size_t n)
{
    size_t len = seq_len(s[0]);
    if (len < 2 || n < 2 || !second_ok(s[0], s[1]))
        return 1;
    size_t i = 2;
    while (i < len && i < n && (s[i] & 0xC0) == 0x80)
        i++;
    return i;
}

size_t ms_utf8_valid_prefix(const uint8_t *s, size_t n)
{
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = ms_utf8_next(s + i, n - i, &cp);
        if (!k)
            break;
        i += k;
    }
    return i;
}

size_t ms_utf8_put(uint8_t *d, uint32_t cp)
{
    if (cp < 0x80) {
        d[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (uint8_t)(0xC0 | cp >> 6);
        d[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (uint8_t)(0xE0 | cp >> 12);
        d[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        d[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (uint8_t)(0xF0 | cp >> 18);
    d[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    d[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    d[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

int ms_utf8_incomplete(const uint8_t *s, size_t n)
{
    size_t len = seq_len(s[0]);
    return len >= 2 && n < len && ms_utf8_bad_len(s, n) == n;
}

int ms_utf8_lossy(const uint8_t *s, size_t n, ms_buf *out)
{
    static const uint8_t fffd[3] = {0xEF, 0xBF, 0xBD};
    size_t i = 0;
    while (i < n) {
        size_t ok = ms_utf8_valid_prefix(s + i, n - i);
        if (ms_buf_put(out, s + i, ok))
            return -1;
        i += ok;
        if (i < n) {
            if (ms_buf_put(out, fffd, 3))
                return -1;
            i += ms_utf8_bad_len(s + i, n - i);
        }
    }
    return 0;
}

/* ---- GPT-2 byte alphabet ----------------------------------------------------------- */

/* Printable bytes stand for themselves; the others (0-32, 127-160, 173) map in
 * order to U+0100, U+0101, ... (bytes_to_unicode of GPT-2's encoder.py). */
static int printable(unsigned b)
{
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
}

uint32_t ms_bytelevel_cp(uint8_t b)
{
    if (printable(b))
        return b;
    if (b <= 32)
        return 256 + b;               /* 0..32    -> U+0100..U+0120 */
    if (b <= 160)
        return 256 + 33 + (b - 127);  /* 127..160 -> U+0121..U+0142 */
    return 256 + 67;                  /* 173      -> U+0143 */
}

int ms_bytelevel_byte(uint32_t cp)
{
    if (cp < 256)
        return printable(cp) ? (int)cp : -1;
    if (cp < 256 + 33)
        return (int)(cp - 256);
    if (cp < 256 + 67)
        return (int)(cp - 256 - 33 + 127);
    return cp == 256 + 67 ? 173 : -1;
}

/* ---- NFC --------------------------------------------------------------------------- */

enum {
    HANGUL_S = 0xAC00, HANGUL_L = 0x1100, HANGUL_V = 0x1161, HANGUL_T = 0x11A7,
    HANGUL_LN = 19, HANGUL_VN = 21, HANGUL_TN = 28, HANGUL_N = 21 * 28, HANGUL_SN = 11172,
};

static int range_find(const ms_nfc_range *r, int n, uint32_t cp)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid - 1;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return r[mid].val;
    }
    return 0;
}

static int ccc_of(uint32_t cp)
{
    return cp < 0x300 ? 0 : range_find(ms_nfc_ccc, ms_nfc_n_ccc, cp);
}

static int unsafe_cp(uint32_t cp)
{
    return cp >= 0x300 && range_find(ms_nfc_unsafe, ms_nfc_n_unsafe, cp);
}

static const ms_nfc_decomp *decomp_of(uint32_t cp)
{
    int lo = 0, hi = ms_nfc_n_decomp - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < ms_nfc_decomp_tab[mid].cp)
            hi = mid - 1;
        else if (cp > ms_nfc_decomp_tab[mid].cp)
            lo = mid + 1;
        else
            return &ms_nfc_decomp_tab[mid];
    }
    return NULL;
}

/* Primary composite of (a, b), or 0. */
static uint32_t compose(uint32_t a, uint32_t b)
{
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_LN && b >= HANGUL_V && b < HANGUL_V + HANGUL_VN)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_VN + (b - HANGUL_V)) * HANGUL_TN;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_SN && (a - HANGUL_S) % HANGUL_TN == 0 &&
        b > HANGUL_T && b < HANGUL_T + HANGUL_TN)
        return a + (b - HANGUL_T);
    int lo = 0, hi = ms_nfc_n_pairs - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const ms_nfc_pair *p = &ms_nfc_pairs[mid];
        if (a < p->a || (a == p->a && b < p->b))
            hi = mid - 1;
        else if (a > p->a || b > p->b)
            lo = mid + 1;
        else
            return p->c;
    }
    return 0;
}

/* Growable code point array. */
typedef struct cpvec {
    uint32_t *v;
    size_t n, cap;
} cpvec;

static int cp_push(cpvec *c, uint32_t cp)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        uint32_t *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return -1;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = cp;
    return 0;
}

static int decompose_into(cpvec *c, uint32_t cp)
{
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_SN) {
        uint32_t s = cp - HANGUL_S;
        if (cp_push(c, HANGUL_L + s / HANGUL_N) || cp_push(c, HANGUL_V + s % HANGUL_N / HANGUL_TN))
            return -1;
        return s % HANGUL_TN ? cp_push(c, HANGUL_T + s % HANGUL_TN) : 0;
    }
    const ms_nfc_decomp *d = cp >= 0xC0 ? decomp_of(cp) : NULL;
    if (!d)
        return cp_push(c, cp);
    for (int i = 0; i < d->len; i++)
        if (cp_push(c, ms_nfc_decomp_seq[d->off + i]))
            return -1;
    return 0;
}

/* NFC of the valid UTF-8 stretch [s, s+n), appended to out. */
static int nfc_stretch(const uint8_t *s, size_t n, cpvec *c, ms_buf *out)
{
    c->n = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += ms_utf8_next(s + i, n - i, &cp);
        if (decompose_into(c, cp))
            return -1;
    }
    /* canonical ordering: stable insertion sort of each run of non-starters */
    for (size_t i = 1; i < c->n; i++) {
        uint32_t cp = c->v[i];
        int cc = ccc_of(cp);
        if (!cc)
            continue;
        size_t j = i;
        while (j > 0 && ccc_of(c->v[j - 1]) > cc) {
            c->v[j] = c->v[j - 1];
            j--;
        }
        c->v[j] = cp;
    }
    /* canonical composition (UAX #15 sample algorithm) */
    size_t w = 0, starter = 0;
    int have_starter = 0, last_cc = 0;
    for (size_t i = 0; i < c->n; i++) {
        uint32_t cp = c->v[i];
        int cc = ccc_of(cp);
        if (have_starter && (last_cc < cc || (last_cc == 0 && w == starter + 1))) {
            uint32_t comp = compose(c->v[starter], cp);
            if (comp) {
                c->v[starter] = comp;
                continue;
            }
        }
        if (cc == 0) {
            starter = w;
            have_starter = 1;
        }
        last_cc = cc;
        c->v[w++] = cp;
    }
    if (ms_buf_reserve(out, 4 * w))
        return -1;
    for (size_t i = 0; i < w; i++)
        out->n += ms_utf8_put(out->p + out->n, c->v[i]);
    return 0;
}

int ms_nfc(const uint8_t *s, size_t n, ms_buf *out)
{
    cpvec c = {0};
    size_t copied = 0;     /* bytes of s already written to out */
    size_t last_safe = 0;  /* offset of the last safe code point seen */
    size_t i = 0;
    int rc = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            last_safe = i++;
            continue;
        }
        uint32_t cp;
        size_t k = ms_utf8_next(s + i, n - i, &cp);
        if (!unsafe_cp(cp)) {
            last_safe = i;
            i += k;
            continue;
        }
        /* a stretch from the last safe code point to the next one */
        size_t start = last_safe > copied ? last_safe : copied;
        size_t end = i + k;
        while (end < n) {
            size_t kk = ms_utf8_next(s + end, n - end, &cp);
            if (!unsafe_cp(cp))
                break;
            end += kk;
        }
        if (ms_buf_put(out, s + copied, start - copied) || nfc_stretch(s + start, end - start, &c, out)) {
            rc = -1;
            break;
        }
        copied = end;
        last_safe = end;
        i = end;
    }
    if (!rc && ms_buf_put(out, s + copied, n - copied))
        rc = -1;
    free(c.v);
    return rc;
}
