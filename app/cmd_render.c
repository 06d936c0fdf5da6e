/* moestream render: the chat prompt a conversation becomes, as text. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* Reads [{"role", "content", "reasoning"?}, ...] from a JSON file. */
static int read_messages(const char *path, json_t **root, ms_chat_msg **msgs, int *n,
                         ms_error *err)
{
    json_error_t je = {0};
    char *text = NULL;
    size_t len = 0;
    *root = NULL;
    if (ms_read_input(path, (size_t)256 << 20, &text, &len, err))
        return -1;
    *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!*root || !json_is_array(*root)) {
        snprintf(err->msg, sizeof err->msg, "%s: expected a JSON list of messages (%s)", path,
                 *root ? "not a list" : je.text);
        err->code = MS_E_ARG;
        return -1;
    }
    *n = (int)json_array_size(*root);
    *msgs = calloc((size_t)*n + 1, sizeof **msgs);
    for (int i = 0; *msgs && i < *n; i++) {
        json_t *m = json_array_get(*root, (size_t)i);
        (*msgs)[i].role = json_string_value(json_object_get(m, "role"));
        (*msgs)[i].content = json_string_value(json_object_get(m, "content"));
        (*msgs)[i].reasoning = json_string_value(json_object_get(m, "reasoning"));
        if (!(*msgs)[i].role || !(*msgs)[i].content) {
            snprintf(err->msg, sizeof err->msg, "%s: message %d needs string \"role\" and "
                     "\"content\"", path, i);
            err->code = MS_E_ARG;
            return -1;
        }
    }
    return 0;
}

/* YYYY-MM-DD as seconds since the epoch (00:00 UTC). */
static int parse_date(const char *s, int64_t *out)
{
    struct tm tm = {0};
    const char *end = strptime(s, "%Y-%m-%d", &tm);
    if (!end || *end)
        return -1;
    *out = (int64_t)timegm(&tm);
    return 0;
}

static int read_text(const char *path, char **out, ms_error *err)
{
    json_error_t je = {0};
    char *text = NULL;
    size_t n = 0;
    if (ms_read_input(path, (size_t)256 << 20, &text, &n, err))
        return -1;
    json_t *req = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!req) {
        snprintf(err->msg, sizeof err->msg, "%s: not a JSON request body (line %d: %s)", path,
                 je.line, je.text);
        err->code = MS_E_ARG;
        return -1;
    }
    *out = json_dumps(req, JSON_PRESERVE_ORDER | JSON_COMPACT);
    json_decref(req);
    return 0;
}

/* render --family F --messages FILE: the built-in format of a family (the
 * fallback for folders without a chat template). */
static int render_builtin(const cli_args *a)
{
    if (a->model || a->request || a->chat_template)
        return cli_usage_error("render", "--family takes --messages FILE, not MODEL_DIR, "
                               "--request or --chat-template-file");
    if (!a->messages)
        return cli_usage_error("render", "needs --family MODEL_TYPE and --messages FILE");
    ms_chat_opts o = {.add_generation_prompt = !a->no_generation_prompt,
                      .thinking = a->thinking, .reasoning_effort = a->effort, .date = a->date};
    ms_error err = {0};
    json_t *root = NULL;
    ms_chat_msg *msgs = NULL;
    char *text = NULL;
    int n = 0, rc = 0;
    if (read_messages(a->messages, &root, &msgs, &n, &err) ||
        ms_chat_render(a->family, msgs, n, &o, &text, &err))
        rc = cli_fail(&err);
    else
        fputs(text, stdout);
    free(text);
    free(msgs);
    json_decref(root);
    return rc;
}

int cmd_render(int argc, char **argv)
{
    cli_args a;
    int rc = cli_parse(CMD_RENDER, argc, argv, &a);
    if (rc)
        return cli_exit(rc);
    if (a.family)
        return render_builtin(&a);
    const char *dir = a.model;
    ms_template_opts o = {.add_generation_prompt = !a.no_generation_prompt,
                          .thinking = a.thinking, .reasoning_effort = a.effort,
                          .bos_token = a.bos_token, .eos_token = a.eos_token};
    if ((!dir && !a.chat_template) || !a.request)
        return cli_usage_error("render", "needs MODEL_DIR or --chat-template-file FILE, and "
                               "--request FILE");
    if (a.messages)
        return cli_usage_error("render", "--messages goes with --family; a template takes "
                               "--request FILE");
    if (a.date && parse_date(a.date, &o.now))
        return cli_usage_error("render", "--date expects YYYY-MM-DD, got \"%s\"", a.date);
    ms_error err = {0};
    ms_chat_template *t = NULL;
    char *body = NULL, *text = NULL;
    if (ms_chat_template_open(dir, a.chat_template, a.template_name, &t, &err) ||
        read_text(a.request, &body, &err)) {
        rc = cli_fail(&err);
    } else if (!t) {
        snprintf(err.msg, sizeof err.msg, "%s has no chat template (no chat_template.jinja, no "
                 "chat_template in tokenizer_config.json); give --chat-template-file FILE", dir);
        err.code = MS_E_ARG;
        rc = cli_fail(&err);
    } else if (ms_chat_template_render(t, body, &o, &text, &err)) {
        rc = cli_fail(&err);
    } else {
        fputs(text, stdout);
    }
    free(text);
    free(body);
    ms_chat_template_close(t);
    return rc;
}
