/* moestream run / logits.
 *
 * run: a prompt as token ids (--prompt-ids, fed as given) or as text (-p:
 * the family's chat template unless --raw, then the checkpoint's
 * tokenizer); the answer streams on stdout, reasoning on stderr (or hidden);
 * --ids prints the generated ids instead of text. logits: float32 rows for
 * every prompt position. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct run_out {
    int ids, hide_reasoning, n_ids, last_chan;
} run_out;

static void on_id(void *ctx, int32_t id)
{
    run_out *r = ctx;
    if (r->ids) {
        printf("%s%" PRId32, r->n_ids++ ? " " : "", id);
        fflush(stdout); /* every token as it is made, also when piped */
    }
}

/* SIGINT / SIGTERM during generation: the answer stops after the token in
 * hand, which is already written, and the run ends with status 130 / 143. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
}

static void on_text(void *ctx, int chan, const char *s, size_t n)
{
    run_out *r = ctx;
    if (r->ids)
        return;
    if (chan == MS_CHAT_REASONING) {
        if (!r->hide_reasoning)
            fwrite(s, 1, n, stderr);
    } else {
        if (r->last_chan == MS_CHAT_REASONING && !r->hide_reasoning)
            fputc('\n', stderr); /* end the reasoning block before the answer */
        fwrite(s, 1, n, stdout);
    }
    r->last_chan = chan;
    fflush(chan == MS_CHAT_REASONING ? stderr : stdout);
}

/* The prompt as ids: read from --prompt-ids, or text rendered with the chat
 * template (unless --raw) and tokenized. */
static int prompt_ids(const cli_args *o, const ms_engine *eng, ms_tokenizer **tok,
                      int32_t **ids, int64_t *n, int *opens, ms_error *err)
{
    if (o->prompt_ids)
        return cli_read_ids(o->prompt_ids, ids, n, err);
    if (ms_tokenizer_open(o->model, tok, err))
        return -1;
    char *text = NULL, *input = NULL;
    const char *t = o->prompt_text;
    if (o->prompt_file || !strcmp(t, "-")) { /* -f FILE, -f - or -p -: the text read */
        if (cli_read_text(o->prompt_file ? o->prompt_file : "-", &input, err))
            return -1;
        t = input;
    }
    if (!o->raw) {
        ms_chat_msg m[2] = {{"system", o->system, NULL}, {"user", t, NULL}};
        if (cli_chat_prompt(eng, o->system ? m : m + 1, o->system ? 2 : 1, o->thinking,
                            o->effort, &text, err))
            return -1;
        *opens = ms_chat_prompt_opens_reasoning(text);
        t = text;
    }
    int rc = ms_tokenizer_encode(*tok, t, strlen(t), 1, ids, n, err);
    free(text);
    free(input);
    return rc;
}

/* --json / --json-schema FILE: the grammar of the answer (after the answer
 * header of the template's syntax, or from the first token with --raw and
 * --prompt-ids) and the vocabulary index its masks need. */
static int constrain(const cli_args *o, const ms_engine *eng, ms_tokenizer **tok, int opens,
                     ms_grammar **g, ms_vocab_index **vi, ms_error *err)
{
    char *schema = NULL;
    if (o->json_schema && ms_read_input(o->json_schema, (size_t)16 << 20, &schema, NULL, err))
        return -1;
    int rc;
    if (o->raw || o->prompt_ids) {
        const char *sch[1] = {schema};
        rc = ms_grammar_json(1, NULL, sch, NULL, g, err);
    } else {
        rc = ms_grammar_for_answer(ms_engine_tool_format(eng), opens, schema, g, err);
    }
    free(schema);
    if (rc) {
        if (o->json_schema) {
            char m[sizeof err->msg];
            snprintf(m, sizeof m, "%.200s: %.800s", o->json_schema, err->msg);
            memcpy(err->msg, m, sizeof m);
        }
        return -1;
    }
    if (!*tok && ms_tokenizer_open(o->model, tok, err))
        return -1;
    return ms_vocab_index_open(*tok, vi, err);
}

static const char *stop_name(int stop)
{
    static const char *names[] = {"STOP", "MAX_TOKENS", "CONTEXT_FULL", "CANCELLED"};
    return names[stop];
}

int cmd_run(int argc, char **argv)
{
    cli_args o;
    int rc = cli_parse(CMD_RUN, argc, argv, &o);
    if (rc)
        return cli_exit(rc);
    if (!!o.prompt_ids + !!o.prompt_text + !!o.prompt_file != 1)
        return cli_usage_error("run", "needs exactly one of -p TEXT, -f FILE or --prompt-ids "
                               "FILE (\"-\" for TEXT or FILE: standard input)");
    ms_error err = {0};
    ms_engine *eng = NULL;
    ms_session *s = NULL;
    ms_sampler *smp = NULL;
    ms_tokenizer *tok = NULL;
    ms_chat_parser *parser = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    int opens = 0;
    ms_grammar *gram = NULL;
    ms_vocab_index *vi = NULL;
    int64_t mask_ns = 0;
    rc = 1;
    if (cli_open(&o, &eng, &s, &err) || prompt_ids(&o, eng, &tok, &ids, &n, &opens, &err) ||
        ((o.json_schema || o.json_any) && constrain(&o, eng, &tok, opens, &gram, &vi, &err)))
        goto out;
    const ms_model_info *info = ms_engine_info(eng);
    ms_sampling sp;
    cli_sampling(&o, eng, &sp);
    if (ms_sampler_open(&sp, info->vocab_size, &smp, &err) ||
        (tok && !o.raw && ms_chat_parser_open(info->family, o.thinking, &parser, &err)))
        goto out;
    ms_sampler_accept(smp, ids, n);
    if (tok && !o.ids) /* text out: only ids that have a token */
        ms_sampler_limit(smp, ms_tokenizer_n_ids(tok));
    for (int64_t off = 0, step = o.feed > 0 ? o.feed : n; off < n; off += step)
        if (ms_session_eval(s, ids + off, n - off < step ? n - off : step, NULL, &err))
            goto out;
    run_out ro = {.ids = o.ids || !tok, .hide_reasoning = o.hide_reasoning};
    ms_gen_opts go = {.max_tokens = o.n_predict >= 0 ? o.n_predict : 256,
                      .ignore_eos = o.ignore_eos, .sampler = smp, .tok = ro.ids ? NULL : tok,
                      .parser = parser, .grammar = gram, .vocab = vi, .mask_ns = &mask_ns,
                      .on_id = on_id, .on_text = on_text, .ctx = &ro,
                      .cancel = (const volatile int *)&stop_signal};
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    ms_gen_result gr;
    if (ms_generate(s, &go, &gr, &err))
        goto out;
    printf("\n");
    fflush(stdout);
    if (gr.stop == MS_STOP_CONTEXT)
        fprintf(stderr, "moestream: CONTEXT_FULL: generation stopped at %lld positions (the "
                "context; raise --ctx)\n", (long long)ms_session_pos(s));
    if (o.stats) {
        fprintf(stderr, "end: %s at position %lld\n", stop_name(gr.stop),
                (long long)ms_session_pos(s));
        if (gram)
            fprintf(stderr, "grammar: %s, token masks %.3f s in all (%.2f ms per token)\n",
                    o.json_schema ? o.json_schema : "any JSON object", mask_ns * 1e-9,
                    gr.n_tokens ? mask_ns * 1e-6 / (double)gr.n_tokens : 0.0);
        cli_print_stats(s);
    }
    rc = stop_signal ? 128 + stop_signal : gr.stop == MS_STOP_CONTEXT ? 3 : 0;
out:
    if (rc == 1)
        rc = cli_fail(&err);
    ms_grammar_free(gram);
    ms_vocab_index_close(vi);
    ms_chat_parser_close(parser);
    ms_tokenizer_close(tok);
    ms_sampler_close(smp);
    ms_session_close(s);
    ms_engine_close(eng);
    free(ids);
    return rc;
}

int cmd_logits(int argc, char **argv)
{
    cli_args o;
    int rc = cli_parse(CMD_LOGITS, argc, argv, &o);
    if (rc)
        return cli_exit(rc);
    if (!o.out || !o.prompt_ids)
        return cli_usage_error("logits", "needs --prompt-ids FILE and --out FILE");
    ms_error err = {0};
    ms_engine *eng = NULL;
    ms_session *s = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    int64_t n = 0;
    FILE *f = NULL;
    rc = 1;
    if (cli_read_ids(o.prompt_ids, &ids, &n, &err) || cli_open(&o, &eng, &s, &err))
        goto out;
    int64_t vocab = ms_engine_info(eng)->vocab_size;
    logits = malloc(sizeof *logits * (size_t)(n * vocab));
    if (!logits) {
        snprintf(err.msg, sizeof err.msg, "out of memory for %lld x %lld logits", (long long)n,
                 (long long)vocab);
        goto out;
    }
    for (int64_t off = 0, step = o.feed > 0 ? o.feed : n; off < n; off += step)
        if (ms_session_eval(s, ids + off, n - off < step ? n - off : step, logits + off * vocab,
                            &err))
            goto out;
    f = fopen(o.out, "wb");
    if (!f || fwrite(logits, 4, (size_t)(n * vocab), f) != (size_t)(n * vocab) || fclose(f)) {
        snprintf(err.msg, sizeof err.msg, "%s: cannot write the logits", o.out);
        f = NULL;
        goto out;
    }
    f = NULL;
    if (o.stats)
        cli_print_stats(s);
    rc = 0;
out:
    if (f)
        fclose(f);
    if (rc)
        rc = cli_fail(&err);
    free(logits);
    ms_session_close(s);
    ms_engine_close(eng);
    free(ids);
    return rc;
}
