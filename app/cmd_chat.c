/* moestream chat: an interactive multi-turn conversation.
 *
 * Each turn re-renders the whole conversation with the family's chat
 * template and hands it to ms_session_sync, which keeps the longest token
 * prefix already in the KV cache (re-rendering is not prefix-preserving:
 * Harmony drops past analysis, so the reused prefix ends where the last
 * answer began) and evaluates the rest. The answer streams on stdout, the
 * reasoning on stderr (dimmed on a terminal, or hidden). Messages come from
 * chat_input.c (a line editor on a terminal); a line starting with / is a
 * command (/help lists them) and never reaches the model. Ctrl-C stops the
 * current answer, not the program. With --ids each turn prints its
 * generated ids instead of text (tests). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "chat_input.h"
#include "cli.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct turn {
    int ids, hide_reasoning, n_ids, last_chan, dim;
    cli_buf answer, reasoning;
} turn;

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
        cli_buf_add(&t->reasoning, s, n);
        if (!t->ids && !t->hide_reasoning) {
            if (t->dim && t->last_chan != MS_CHAT_REASONING)
                fputs("\033[2m", stderr); /* reasoning dimmed on a terminal */
            fwrite(s, 1, n, stderr);
            fflush(stderr);
        }
    } else {
        cli_buf_add(&t->answer, s, n);
        if (!t->ids) {
            if (t->last_chan == MS_CHAT_REASONING && !t->hide_reasoning)
                fputs(t->dim ? "\033[0m\n" : "\n", stderr);
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
    cli_args *o;
    ms_engine *eng;
    ms_session *s;
    ms_tokenizer *tok;
    ms_sampler *smp;
    convo c;
    int base;         /* 1 when the conversation starts with a system message */
    int dim;          /* reasoning dimmed: stderr is a terminal */
} chat_ctx;

/* One turn: render, sync the cache, generate, remember the answer. */
static int chat_turn(chat_ctx *cx, ms_error *err)
{
    const ms_model_info *info = ms_engine_info(cx->eng);
    char *text = NULL;
    int32_t *ids = NULL;
    int64_t n = 0, reused = 0;
    ms_chat_parser *parser = NULL;
    turn t = {.ids = cx->o->ids, .hide_reasoning = cx->o->hide_reasoning, .dim = cx->dim};
    const char *msg = cx->c.m[cx->c.n - 1].content;
    int rc = -1;
    if (cli_chat_prompt(cx->eng, cx->c.m, cx->c.n, cx->o->thinking, cx->o->effort, &text, err) ||
        ms_tokenizer_encode(cx->tok, text, strlen(text), 1, &ids, &n, err) ||
        ms_chat_parser_open(info->family, cx->o->thinking, &parser, err))
        goto out;
    if (cx->o->no_reuse) /* full re-prefill every turn (tests, measurements) */
        ms_session_truncate(cx->s, 0, err);
    interrupted = 0;
    ms_session_set_cancel(cx->s, (const volatile int *)&interrupted); /* Ctrl-C: the prompt */
    int synced = ms_session_sync(cx->s, ids, n, &reused, err);
    ms_session_set_cancel(cx->s, NULL);
    if (synced) {
        if (err->code == MS_E_CANCELLED) {
            fprintf(stderr, "[stopped while reading the prompt]\n");
            interrupted = 0;
        }
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
    int failed = ms_generate(cx->s, &go, &gr, err);
    interrupted = 0; /* the Ctrl-C that stopped the answer is spent */
    if (failed)
        goto out;
    printf("\n");
    fflush(stdout);
    if (t.dim && t.last_chan == MS_CHAT_REASONING)
        fputs("\033[0m\n", stderr);
    if (gr.stop == MS_STOP_CANCEL)
        fprintf(stderr, "[stopped]\n");
    else if (gr.stop == MS_STOP_CONTEXT)
        fprintf(stderr, "moestream: context full (%lld tokens): /reset or a larger --ctx\n",
                (long long)ms_session_ctx(cx->s));
    if (cx->o->stats)
    {
        int lines = 1;
        for (const char *q = msg; *q; q++)
            lines += *q == '\n';
        fprintf(stderr, "[%lld prompt tokens, %lld reused from the cache, %lld generated; "
                "the message: %zu bytes in %d line%s]\n", (long long)n, (long long)reused,
                (long long)gr.n_tokens, strlen(msg), lines, lines == 1 ? "" : "s");
    }
    if (t.ids) /* one line of ids per turn */
        fflush(stdout);
    rc = convo_add(&cx->c, "assistant", t.answer.p ? t.answer.p : strdup(""), t.reasoning.p);
    t.answer.p = t.reasoning.p = NULL;
out:
    free(t.answer.p);
    free(t.reasoning.p);
    ms_chat_parser_close(parser);
    free(ids);
    free(text);
    return rc;
}

/* The system message first in the conversation: replaced, added, or
 * (text NULL) removed. */
static int set_system(chat_ctx *cx, const char *text)
{
    convo *c = &cx->c;
    if (cx->base) {
        free(c->owned[0]);
        free(c->owned[1]);
        memmove(c->m, c->m + 1, sizeof *c->m * (size_t)(c->n - 1));
        memmove(c->owned, c->owned + 2, sizeof *c->owned * (size_t)(c->n_owned - 2));
        c->n--;
        c->n_owned -= 2;
        cx->base = 0;
    }
    if (!text)
        return 0;
    if (convo_add(c, "system", strdup(text), NULL))
        return -1;
    ms_chat_msg last = c->m[c->n - 1];
    memmove(c->m + 1, c->m, sizeof *c->m * (size_t)(c->n - 1));
    memmove(c->owned + 2, c->owned, sizeof *c->owned * (size_t)(c->n_owned - 2));
    c->m[0] = last;
    c->owned[0] = (char *)last.content;
    c->owned[1] = NULL;
    cx->base = 1;
    return 0;
}

/* /save FILE: the conversation as the messages of an OpenAI request. */
static void save(const chat_ctx *cx, const char *path)
{
    json_t *msgs = json_array();
    for (int i = 0; i < cx->c.n; i++) {
        const ms_chat_msg *m = &cx->c.m[i];
        json_t *o = json_pack("{s:s, s:s}", "role", m->role, "content", m->content);
        if (m->reasoning)
            json_object_set_new(o, "reasoning_content", json_string(m->reasoning));
        json_array_append_new(msgs, o);
    }
    if (json_dump_file(msgs, path, JSON_INDENT(2)))
        fprintf(stderr, "moestream: cannot write %s: %s\n", path, strerror(errno));
    else
        fprintf(stderr, "[%d messages saved to %s]\n", cx->c.n, path);
    json_decref(msgs);
}

static const char help_text[] =
    "/help            this list\n"
    "/reset           forget the conversation (the system message stays)\n"
    "/system TEXT     set the system message (/system alone: remove it)\n"
    "/save FILE       write the conversation as JSON messages\n"
    "/stats           speed and expert statistics so far\n"
    "/quit, /exit     end (so does Ctrl-D)\n"
    "\"\"\"              on a line of its own: start, and later end, a message of several lines\n"
    "//TEXT           send TEXT starting with one /\n"
    "Ctrl-C stops an answer and keeps the conversation; pastes of any length are one message.\n";

/* A line starting with /: 1 to end the chat, 0 done, -1 error (err). */
static int command(chat_ctx *cx, const char *line, ms_error *err)
{
    const char *arg = line + strcspn(line, " ");
    size_t n = (size_t)(arg - line);
    while (*arg == ' ')
        arg++;
#define IS(name) (n == strlen(name) && !memcmp(line, name, n))
    if (IS("/quit") || IS("/exit"))
        return 1;
    if (IS("/help")) {
        fputs(help_text, stderr);
    } else if (IS("/reset")) {
        convo_clear(&cx->c, cx->base);
        if (ms_session_truncate(cx->s, 0, err))
            return -1;
        fprintf(stderr, "[conversation reset]\n");
    } else if (IS("/system")) {
        if (set_system(cx, *arg ? arg : NULL))
            return -1;
        fprintf(stderr, *arg ? "[system message set]\n" : "[system message removed]\n");
    } else if (IS("/save")) {
        if (*arg)
            save(cx, arg);
        else
            fprintf(stderr, "/save needs a FILE\n");
    } else if (IS("/stats")) {
        cli_print_stats(cx->s);
    } else {
        fprintf(stderr, "unknown command %.*s: /help lists them (//TEXT sends /TEXT)\n", (int)n,
                line);
    }
#undef IS
    return 0;
}

int cmd_chat(int argc, char **argv)
{
    cli_args o;
    int rc = cli_parse(CMD_CHAT, argc, argv, &o);
    if (rc)
        return cli_exit(rc);
    ms_error err = {0};
    chat_ctx cx = {.o = &o, .dim = isatty(2)};
    chat_input *in = NULL;
    rc = 1;
    if (cli_open(&o, &cx.eng, &cx.s, &err) || ms_tokenizer_open(o.model, &cx.tok, &err))
        goto out;
    ms_sampling sp;
    cli_sampling(&o, cx.eng, &sp);
    if (ms_sampler_open(&sp, ms_engine_info(cx.eng)->vocab_size, &cx.smp, &err))
        goto out;
    ms_sampler_limit(cx.smp, ms_tokenizer_n_ids(cx.tok)); /* only ids that have text */
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: Ctrl-C at the prompt ends the read */
    if (!(in = chat_input_open(&interrupted))) {
        snprintf(err.msg, sizeof err.msg, "cannot start the line editor");
        goto out;
    }
    if (o.system && set_system(&cx, o.system))
        goto out;
    if (chat_input_tty(in))
        fprintf(stderr, "moestream chat (%s): /help lists the commands; Ctrl-C stops an "
                "answer, Ctrl-D ends\n", ms_engine_info(cx.eng)->family);
    for (;;) {
        int cancelled = 0;
        char *line = chat_input_read(in, &cancelled);
        if (!line) {
            if (cancelled)
                continue;
            break;
        }
        if (line[0] == '/' && line[1] != '/') {
            int r = command(&cx, line, &err);
            free(line);
            if (r < 0)
                goto out;
            if (r > 0)
                break;
            continue;
        }
        if (!*line) {
            free(line);
            continue;
        }
        chat_input_remember(in, line);
        char *text = line[0] == '/' ? strdup(line + 1) : line; /* //TEXT */
        if (text != line)
            free(line);
        if (convo_add(&cx.c, "user", text, NULL) || chat_turn(&cx, &err)) {
            if (err.code != MS_E_CONTEXT_FULL && err.code != MS_E_CANCELLED)
                goto out;
            convo_clear(&cx.c, cx.c.n - 1); /* drop the turn that did not fit or was stopped */
        }
    }
    rc = 0;
out:
    chat_input_close(in);
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
