/* Chat formats per family (see chat.h for the rules each one follows) and the
 * streaming parser of responses. */
#include "runtime/chat.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"

/* ---- a growable string ------------------------------------------------------ */

typedef struct sb {
    char *p;
    size_t n, cap;
    int oom;
} sb;

static void sb_put(sb *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_puts(sb *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static int is(const char *a, const char *b)
{
    return a && strcmp(a, b) == 0;
}

static const char *str(const char *s)
{
    return s ? s : "";
}

/* ---- gpt_oss: Harmony ----------------------------------------------------------- */

static void harmony(sb *b, const ms_chat_msg *m, int n, const ms_chat_opts *o)
{
    char today[16];
    const char *date = o->date;
    if (!date) {
        time_t t = time(NULL);
        struct tm tm;
        strftime(today, sizeof today, "%Y-%m-%d", gmtime_r(&t, &tm));
        date = today;
    }
    sb_puts(b, "<|start|>system<|message|>You are ChatGPT, a large language model trained by "
               "OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: ");
    sb_puts(b, date);
    sb_puts(b, "\n\nReasoning: ");
    sb_puts(b, o->reasoning_effort ? o->reasoning_effort : "medium");
    sb_puts(b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
               "every message.<|end|>");
    int first = 0;
    if (n > 0 && (is(m[0].role, "system") || is(m[0].role, "developer"))) {
        if (m[0].content && *m[0].content) {
            sb_puts(b, "<|start|>developer<|message|># Instructions\n\n");
            sb_puts(b, m[0].content);
            sb_puts(b, "\n\n<|end|>");
        }
        first = 1;
    }
    for (int i = first; i < n; i++) {
        if (is(m[i].role, "user")) {
            sb_puts(b, "<|start|>user<|message|>");
            sb_puts(b, str(m[i].content));
            sb_puts(b, "<|end|>");
        } else if (is(m[i].role, "assistant")) {
            int last_train = i == n - 1 && !o->add_generation_prompt;
            if (last_train && m[i].reasoning) { /* only when training on the last turn */
                sb_puts(b, "<|start|>assistant<|channel|>analysis<|message|>");
                sb_puts(b, m[i].reasoning);
                sb_puts(b, "<|end|>");
            }
            sb_puts(b, "<|start|>assistant<|channel|>final<|message|>");
            sb_puts(b, str(m[i].content));
            sb_puts(b, last_train ? "<|return|>" : "<|end|>");
        }
        /* later system/developer messages are dropped, as the template does */
    }
    if (o->add_generation_prompt)
        sb_puts(b, "<|start|>assistant");
}

/* ---- qwen3_moe: ChatML ------------------------------------------------------------ */

/* s without leading / trailing '\n' characters (Python's strip('\n')). */
static void strip_nl(const char **s, size_t *n, int left, int right)
{
    while (left && *n && **s == '\n')
        (*s)++, (*n)--;
    while (right && *n && (*s)[*n - 1] == '\n')
        (*n)--;
}

static const char *find_last(const char *s, size_t n, const char *pat)
{
    size_t k = strlen(pat);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (!memcmp(s + i, pat, k))
            return s + i;
    return NULL;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), k = strlen(suffix);
    return a >= k && !strcmp(s + a - k, suffix);
}

/* An assistant turn of Qwen3: reasoning kept only after the last query. */
static void qwen3_assistant(sb *b, const ms_chat_msg *m, int keep_think, int last)
{
    const char *c = str(m->content), *r = "";
    size_t cn = strlen(c), rn = 0;
    if (m->reasoning) {
        r = m->reasoning;
        rn = strlen(r);
    } else if (strstr(c, "</think>")) {
        const char *first = strstr(c, "</think>"), *end = find_last(c, cn, "</think>");
        r = c;
        rn = (size_t)(first - c);
        strip_nl(&r, &rn, 0, 1);
        const char *open = find_last(r, rn, "<think>");
        if (open) {
            rn -= (size_t)(open + 7 - r);
            r = open + 7;
        }
        strip_nl(&r, &rn, 1, 0);
        c = end + 8;
        cn = strlen(c);
        strip_nl(&c, &cn, 1, 0);
    }
    sb_puts(b, "<|im_start|>assistant\n");
    if (keep_think && (last || rn)) {
        sb_puts(b, "<think>\n");
        strip_nl(&r, &rn, 1, 1);
        sb_put(b, r, rn);
        sb_puts(b, "\n</think>\n\n");
        strip_nl(&c, &cn, 1, 0);
    }
    sb_put(b, c, cn);
    sb_puts(b, "<|im_end|>\n");
}

static void qwen3(sb *b, const ms_chat_msg *m, int n, const ms_chat_opts *o)
{
    if (n > 0 && is(m[0].role, "system")) {
        sb_puts(b, "<|im_start|>system\n");
        sb_puts(b, str(m[0].content));
        sb_puts(b, "<|im_end|>\n");
    }
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        const char *c = str(m[i].content);
        if (is(m[i].role, "user") &&
            !(strncmp(c, "<tool_response>", 15) == 0 && ends_with(c, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        if (is(m[i].role, "user") || (is(m[i].role, "system") && i > 0)) {
            sb_puts(b, "<|im_start|>");
            sb_puts(b, m[i].role);
            sb_puts(b, "\n");
            sb_puts(b, str(m[i].content));
            sb_puts(b, "<|im_end|>\n");
        } else if (is(m[i].role, "assistant")) {
            qwen3_assistant(b, &m[i], i > last_query, i == n - 1);
        }
    }
    if (o->add_generation_prompt) {
        sb_puts(b, "<|im_start|>assistant\n");
        if (o->thinking == 0)
            sb_puts(b, "<think>\n\n</think>\n\n");
    }
}

/* ---- deepseek_v3 -------------------------------------------------------------------- */

static void deepseek(sb *b, const ms_chat_msg *m, int n, const ms_chat_opts *o)
{
    sb_puts(b, "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
    int first = 1;
    for (int i = 0; i < n; i++)
        if (is(m[i].role, "system")) {
            if (!first)
                sb_puts(b, "\n\n");
            sb_puts(b, str(m[i].content));
            first = 0;
        }
    for (int i = 0; i < n; i++) {
        if (is(m[i].role, "user")) {
            sb_puts(b, "<\xef\xbd\x9cUser\xef\xbd\x9c>");
            sb_puts(b, str(m[i].content));
        } else if (is(m[i].role, "assistant")) {
            sb_puts(b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
            sb_puts(b, str(m[i].content));
            sb_puts(b, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
        }
    }
    if (o->add_generation_prompt)
        sb_puts(b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
}

/* ---- longcat_flash ------------------------------------------------------------------- */

static void longcat(sb *b, const ms_chat_msg *m, int n, const ms_chat_opts *o)
{
    int think = o->thinking == 1, last_user = -1;
    for (int i = 0; i < n; i++)
        if (is(m[i].role, "user"))
            last_user = i;
    for (int i = 0; i < n; i++) {
        if (is(m[i].role, "system")) {
            sb_puts(b, "<longcat_system>");
            sb_puts(b, str(m[i].content));
        } else if (is(m[i].role, "user")) {
            sb_puts(b, "<longcat_user>");
            sb_puts(b, str(m[i].content));
            if (think && i == last_user && o->add_generation_prompt)
                sb_puts(b, " /think_on ");
        } else if (is(m[i].role, "assistant")) {
            sb_puts(b, "<longcat_assistant>");
            sb_puts(b, str(m[i].content));
            sb_puts(b, "</longcat_s>");
        }
    }
    if (o->add_generation_prompt)
        sb_puts(b, think ? "<longcat_assistant><longcat_think>\n" : "<longcat_assistant>");
}

/* ---- dispatch ----------------------------------------------------------------------- */

static const struct {
    const char *family;
    void (*render)(sb *, const ms_chat_msg *, int, const ms_chat_opts *);
} formats[] = {
    {"gpt_oss", harmony},
    {"qwen3_moe", qwen3},
    {"deepseek_v3", deepseek},
    {"longcat_flash", longcat},
};

int ms_chat_render(const char *family, const ms_chat_msg *msgs, int n, const ms_chat_opts *o,
                   char **out, ms_error *err)
{
    static const ms_chat_opts defaults = {.add_generation_prompt = 1, .thinking = -1};
    o = o ? o : &defaults;
    *out = NULL;
    for (int i = 0; i < n; i++)
        if (!is(msgs[i].role, "system") && !is(msgs[i].role, "developer") &&
            !is(msgs[i].role, "user") && !is(msgs[i].role, "assistant"))
            return ms_err_set(err, MS_E_ARG, "chat message %d: role \"%s\" is not supported "
                              "(system, developer, user, assistant)", i, str(msgs[i].role));
    for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++) {
        if (strcmp(formats[k].family, family) != 0)
            continue;
        sb b = {0};
        sb_puts(&b, "");
        formats[k].render(&b, msgs, n, o);
        if (b.oom) {
            free(b.p);
            return ms_err_set(err, MS_E_NOMEM, "out of memory rendering the chat");
        }
        *out = b.p;
        return 0;
    }
    return ms_err_set(err, MS_E_UNSUPPORTED, "no chat format for model_type \"%s\"", family);
}

/* ---- response parser ------------------------------------------------------------------ */

/* A marker switches the channel (or hides itself); text between markers goes
 * out on the current channel. Partial markers at the end of a piece are
 * held back until the next piece decides. */
typedef struct marker {
    const char *text;
    int to;             /* channel after it; -1 keep; -2 start of a Harmony header */
} marker;

struct ms_chat_parser {
    const marker *mk;
    int n_mk;
    int chan;
    int in_header;      /* Harmony: between <|start|> and <|message|> */
    sb header, pending;
    int skip_nl;        /* drop newlines right after a switch (Qwen3 "\n\n") */
};

static const marker harmony_mk[] = {
    {"<|start|>", -2}, {"<|channel|>", -1}, {"<|message|>", -1}, {"<|end|>", -1},
    {"<|return|>", -1}, {"<|call|>", -1}, {"<|constrain|>", -1},
};
static const marker think_mk[] = {
    {"<think>", MS_CHAT_REASONING}, {"</think>", MS_CHAT_ANSWER}, {"<|im_end|>", -1},
    {"<|endoftext|>", -1},
    {"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", -1},
};
static const marker longcat_mk[] = {
    {"<longcat_think>", MS_CHAT_REASONING}, {"</longcat_think>", MS_CHAT_ANSWER},
    {"</longcat_s>", -1},
};

int ms_chat_parser_open(const char *family, int thinking, ms_chat_parser **out, ms_error *err)
{
    ms_chat_parser *p = ms_calloc(1, sizeof *p, "chat parser", err);
    if (!p)
        return -1;
    if (is(family, "gpt_oss")) {
        p->mk = harmony_mk;
        p->n_mk = (int)(sizeof harmony_mk / sizeof harmony_mk[0]);
        p->in_header = 1; /* the prompt ends with "<|start|>assistant" */
    } else if (is(family, "longcat_flash")) {
        p->mk = longcat_mk;
        p->n_mk = (int)(sizeof longcat_mk / sizeof longcat_mk[0]);
        p->chan = thinking == 1 ? MS_CHAT_REASONING : MS_CHAT_ANSWER;
    } else {
        p->mk = think_mk;
        p->n_mk = (int)(sizeof think_mk / sizeof think_mk[0]);
    }
    *out = p;
    return 0;
}

void ms_chat_parser_close(ms_chat_parser *p)
{
    if (!p)
        return;
    free(p->header.p);
    free(p->pending.p);
    free(p);
}

/* Harmony: the header names the channel ("assistant<|channel|>final"). */
static void end_header(ms_chat_parser *p)
{
    const char *h = p->header.p ? p->header.p : "";
    p->chan = strstr(h, "final") ? MS_CHAT_ANSWER : MS_CHAT_REASONING;
    p->in_header = 0;
    p->header.n = 0;
}

/* A Harmony header is a role and a channel name: past this many bytes without
 * <|message|> the model is not following the format, and its text is shown
 * as the answer rather than swallowed. */
#define MAX_HEADER 64

static void out_text(ms_chat_parser *p, const char *s, size_t n,
                     void (*emit)(void *, int, const char *, size_t), void *ctx)
{
    if (p->in_header) {
        sb_put(&p->header, s, n);
        if (p->header.n > MAX_HEADER) {
            p->in_header = 0;
            p->chan = MS_CHAT_ANSWER;
            emit(ctx, p->chan, p->header.p, p->header.n);
            p->header.n = 0;
        }
        return;
    }
    while (p->skip_nl && n && *s == '\n')
        s++, n--;
    if (n) {
        p->skip_nl = 0;
        emit(ctx, p->chan, s, n);
    }
}

void ms_chat_parser_feed(ms_chat_parser *p, const char *text, size_t len,
                         void (*emit)(void *ctx, int channel, const char *s, size_t n),
                         void *ctx)
{
    sb_put(&p->pending, text, len);
    if (p->pending.oom)
        return;
    const char *s = p->pending.p;
    size_t n = p->pending.n, i = 0, from = 0;
    while (i < n) {
        int hit = -1, partial = 0;
        for (int k = 0; k < p->n_mk && hit < 0; k++) {
            size_t ml = strlen(p->mk[k].text), avail = n - i;
            if (!memcmp(s + i, p->mk[k].text, avail < ml ? avail : ml)) {
                if (avail >= ml)
                    hit = k;
                else
                    partial = 1;
            }
        }
        if (hit < 0 && partial)
            break; /* maybe a marker: wait for more text */
        if (hit < 0) {
            i++;
            continue;
        }
        out_text(p, s + from, i - from, emit, ctx);
        const marker *m = &p->mk[hit];
        if (m->to == -2) {
            p->in_header = 1;
            p->header.n = 0;
        } else if (p->mk == harmony_mk && !strcmp(m->text, "<|message|>")) {
            end_header(p);
        } else if (p->in_header) {
            sb_puts(&p->header, m->text);
        } else if (m->to >= 0) {
            p->chan = m->to;
            p->skip_nl = 1;
        }
        i += strlen(m->text);
        from = i;
    }
    out_text(p, s + from, i - from, emit, ctx);
    memmove(p->pending.p, s + i, n - i);
    p->pending.n = n - i;
    p->pending.p[p->pending.n] = 0;
}
