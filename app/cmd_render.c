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
static int render_builtin(int argc, char **argv)
{
    const char *family = NULL, *path = NULL, *effort = NULL, *date = NULL;
    ms_chat_opts o = {.add_generation_prompt = 1, .thinking = -1};
    for (int i = 1; i < argc; i++) {
        int miss = 0;
        const char *v;
        if ((v = cli_value(argc, argv, &i, "--family", &miss))) family = v;
        else if ((v = cli_value(argc, argv, &i, "--messages", &miss))) path = v;
        else if ((v = cli_value(argc, argv, &i, "--reasoning-effort", &miss))) effort = v;
        else if ((v = cli_value(argc, argv, &i, "--date", &miss))) date = v;
        else if ((v = cli_value(argc, argv, &i, "--thinking", &miss))) {
            if (strcmp(v, "on") && strcmp(v, "off"))
                return cli_usage_error("render", "--thinking expects on or off");
            o.thinking = !strcmp(v, "on");
        } else if (miss) return cli_usage_error("render", "%s needs a value", argv[i]);
        else if (!strcmp(argv[i], "--no-generation-prompt")) o.add_generation_prompt = 0;
        else return cli_usage_error("render", "unexpected argument \"%s\"", argv[i]);
    }
    if (!family || !path)
        return cli_usage_error("render", "needs --family MODEL_TYPE and --messages FILE");
    o.reasoning_effort = effort;
    o.date = date;
    ms_error err = {0};
    json_t *root = NULL;
    ms_chat_msg *msgs = NULL;
    char *text = NULL;
    int n = 0, rc = 0;
    if (read_messages(path, &root, &msgs, &n, &err) ||
        ms_chat_render(family, msgs, n, &o, &text, &err))
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
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--family"))
            return render_builtin(argc, argv);
    const char *dir = NULL, *file = NULL, *request = NULL, *date = NULL, *name = NULL;
    ms_template_opts o = {.add_generation_prompt = 1, .thinking = -1};
    for (int i = 1; i < argc; i++) {
        int miss = 0;
        const char *v;
        if ((v = cli_value(argc, argv, &i, "--chat-template-file", &miss))) file = v;
        else if ((v = cli_value(argc, argv, &i, "--request", &miss))) request = v;
        else if ((v = cli_value(argc, argv, &i, "--bos-token", &miss))) o.bos_token = v;
        else if ((v = cli_value(argc, argv, &i, "--eos-token", &miss))) o.eos_token = v;
        else if ((v = cli_value(argc, argv, &i, "--date", &miss))) date = v;
        else if ((v = cli_value(argc, argv, &i, "--template-name", &miss))) name = v;
        else if ((v = cli_value(argc, argv, &i, "--reasoning-effort", &miss))) o.reasoning_effort = v;
        else if ((v = cli_value(argc, argv, &i, "--thinking", &miss))) {
            if (strcmp(v, "on") && strcmp(v, "off"))
                return cli_usage_error("render", "--thinking expects on or off");
            o.thinking = !strcmp(v, "on");
        } else if (miss) return cli_usage_error("render", "%s needs a value", argv[i]);
        else if (!strcmp(argv[i], "--no-generation-prompt")) o.add_generation_prompt = 0;
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else return cli_usage_error("render", "unexpected argument \"%s\"", argv[i]);
    }
    if ((!dir && !file) || !request)
        return cli_usage_error("render", "needs MODEL_DIR or --chat-template-file FILE, and "
                               "--request FILE");
    if (date && parse_date(date, &o.now))
        return cli_usage_error("render", "--date expects YYYY-MM-DD, got \"%s\"", date);
    ms_error err = {0};
    ms_chat_template *t = NULL;
    char *body = NULL, *text = NULL;
    int rc = 0;
    if (ms_chat_template_open(dir, file, name, &t, &err) || read_text(request, &body, &err)) {
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
