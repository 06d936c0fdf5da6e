/* moestream chat: an interactive multi-turn conversation.
 *
 * Each turn re-renders the whole conversation with the family's chat
 * template and hands it to ms_session_sync, which keeps the longest token
 * prefix already in the KV cache (re-rendering is not prefix-preserving:
 * Harmony drops past analysis, so the reused prefix ends where the last
 * answer began) and evaluates the rest. The answer streams on stdout, the
 * reasoning on stderr (or hidden). Ctrl-C stops the current generation, not
 * the program; /reset forgets the conversation; /quit (or end of input) ends.
 * With --ids each turn prints its generated ids instead of text (tests). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct turn {
    int ids, hide_reasoning, n_ids, last_chan;
    char *answer, *reasoning;
    size_t n_answer, n_reasoning;
} turn;

static void append(char **buf, size_t *len, const char *s, size_t n)
{
    char *p = realloc(*buf, *len + n + 1);
    if (!p)
        return;
    memcpy(p + *len, s, n);
    *len += n;
    p[*len] = 0;
    *buf = p;
}

static void on_id(void *ctx, int32_t id)
{
    turn *t = ctx;
    if (t->ids)
        printf("%s%" PRId32, t->n_ids++ ? " " : "", id);
}

static void on_text(void *ctx, int chan, const char *s, size_t n)
{
    turn *t = ctx;
    if (chan == MS_CHAT_REASONING) {
        append(&t->reasoning, &t->n_reasoning, s, n);
        if (!t->ids && !t->hide_reasoning) {
            fwrite(s, 1, n, stderr);
            fflush(stderr);
        }
    } else {
        append(&t->answer, &t->n_answer, s, n);
        if (!t->ids) {
            if (t->last_chan == MS_CHAT_REASONING && !t->hide_reasoning)
                fputc('\n', stderr);
            fwrite(s, 1, n, stdout);
            fflush(stdout);
        }
    }
    t->last_chan = chan;
}

typedef struct convo {
    ms_chat_msg *m;
    char **owned;     /* strings the messages point to */
    int n, cap, n_owned;
} convo;

static int convo_add(convo *c, const char *role, char *content, char *reasoning)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        ms_chat_msg *m = realloc(c->m, sizeof *m * (size_t)cap);
        char **o = realloc(c->owned, sizeof *o * (size_t)(2 * cap));
        if (m)
            c->m = m;
        if (o)
            c->owned = o;
        if (!m || !o)
            return -1;
        c->cap = cap;
    }
    c->m[c->n++] = (ms_chat_msg){role, content, reasoning};
    c->owned[c->n_owned++] = content;
    c->owned[c->n_owned++] = reasoning;
    return 0;
}

static void convo_clear(convo *c, int keep)
{
    while (c->n_owned > 2 * keep)
        free(c->owned[--c->n_owned]);
    c->n = keep;
}

typedef struct chat_ctx {
    run_opts *o;
    ms_engine *eng;
    ms_session *s;
    ms_tokenizer *tok;
    ms_sampler *smp;
    convo c;
} chat_ctx;

/* One turn: render, sync the cache, generate, remember the answer. */
static int chat_turn(chat_ctx *cx, ms_error *err)
{
    const ms_model_info *info = ms_engine_info(cx->eng);
    char *text = NULL;
    int32_t *ids = NULL;
    int64_t n = 0, reused = 0;
    ms_chat_parser *parser = NULL;
    turn t = {.ids = cx->o->ids, .hide_reasoning = cx->o->hide_reasoning};
    int rc = -1;
    if (cli_chat_prompt(cx->eng, cx->c.m, cx->c.n, cx->o->thinking, cx->o->effort, &text, err) ||
        ms_tokenizer_encode(cx->tok, text, strlen(text), 1, &ids, &n, err) ||
        ms_chat_parser_open(info->family, cx->o->thinking, &parser, err))
        goto out;
    if (cx->o->no_reuse) /* full re-prefill every turn (tests, measurements) */
        ms_session_truncate(cx->s, 0, err);
    if (ms_session_sync(cx->s, ids, n, &reused, err)) {
        if (err->code == MS_E_CONTEXT_FULL)
            fprintf(stderr, "moestream: the conversation (%lld tokens) no longer fits the "
                    "context of %lld tokens: /reset or a larger --ctx\n", (long long)n,
                    (long long)ms_session_ctx(cx->s));
        goto out;
    }
    ms_sampler_reset(cx->smp);
    ms_sampler_accept(cx->smp, ids, n);
    interrupted = 0;
    ms_gen_opts go = {.max_tokens = cx->o->n_predict >= 0 ? cx->o->n_predict : 4096,
                      .ignore_eos = cx->o->ignore_eos, .cancel = (const volatile int *)&interrupted,
                      .sampler = cx->smp, .tok = cx->tok, .parser = parser, .on_id = on_id,
                      .on_text = on_text, .ctx = &t};
    ms_gen_result gr;
    if (ms_generate(cx->s, &go, &gr, err))
        goto out;
    printf("\n");
    fflush(stdout);
    if (gr.stop == MS_STOP_CANCEL)
        fprintf(stderr, "[stopped]\n");
    else if (gr.stop == MS_STOP_CONTEXT)
        fprintf(stderr, "moestream: context full (%lld tokens): /reset or a larger --ctx\n",
                (long long)ms_session_ctx(cx->s));
    if (cx->o->stats)
        fprintf(stderr, "[%lld prompt tokens, %lld reused from the cache, %lld generated]\n",
                (long long)n, (long long)reused, (long long)gr.n_tokens);
    if (t.ids) /* one line of ids per turn */
        fflush(stdout);
    rc = convo_add(&cx->c, "assistant", t.answer ? t.answer : strdup(""), t.reasoning);
    t.answer = t.reasoning = NULL;
out:
    free(t.answer);
    free(t.reasoning);
    ms_chat_parser_close(parser);
    free(ids);
    free(text);
    return rc;
}

/* Reads a line from stdin; NULL at end of input or on Ctrl-C at the prompt. */
static char *read_line(int tty)
{
    static char buf[1 << 16];
    if (tty) {
        fputs("> ", stdout);
        fflush(stdout);
    }
    if (!fgets(buf, sizeof buf, stdin))
        return NULL;
    buf[strcspn(buf, "\n")] = 0;
    return buf;
}

int cmd_chat(int argc, char **argv)
{
    run_opts o;
    int rc = run_opts_parse("chat", argc, argv, &o);
    if (rc)
        return rc;
    ms_error err = {0};
    chat_ctx cx = {.o = &o};
    rc = 1;
    if (run_opts_open(&o, &cx.eng, &cx.s, &err) || ms_tokenizer_open(o.model, &cx.tok, &err))
        goto out;
    ms_sampling sp;
    run_opts_sampling(&o, cx.eng, &sp);
    if (ms_sampler_open(&sp, ms_engine_info(cx.eng)->vocab_size, &cx.smp, &err))
        goto out;
    ms_sampler_limit(cx.smp, ms_tokenizer_n_ids(cx.tok)); /* only ids that have text */
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: Ctrl-C at the prompt ends fgets */
    int tty = isatty(0), base = 0;
    if (o.system && (convo_add(&cx.c, "system", strdup(o.system), NULL) == 0))
        base = 1;
    if (tty)
        fprintf(stderr, "moestream chat (%s): /reset, /quit; Ctrl-C stops an answer\n",
                ms_engine_info(cx.eng)->family);
    for (char *line; (line = read_line(tty));) {
        if (!strcmp(line, "/quit"))
            break;
        if (!strcmp(line, "/reset")) {
            convo_clear(&cx.c, base);
            ms_session_truncate(cx.s, 0, &err);
            fprintf(stderr, "[conversation reset]\n");
            continue;
        }
        if (!*line)
            continue;
        if (convo_add(&cx.c, "user", strdup(line), NULL) || chat_turn(&cx, &err)) {
            if (err.code != MS_E_CONTEXT_FULL)
                goto out;
            convo_clear(&cx.c, cx.c.n - 1); /* drop the turn that did not fit */
        }
    }
    rc = 0;
out:
    if (rc)
        rc = cli_fail(&err);
    convo_clear(&cx.c, 0);
    free(cx.c.m);
    free(cx.c.owned);
    ms_sampler_close(cx.smp);
    ms_tokenizer_close(cx.tok);
    ms_session_close(cx.s);
    ms_engine_close(cx.eng);
    return rc;
}
