/* Chat templates from the checkpoint folder (see moestream.h): finding the
 * template, and the variables transformers' apply_chat_template gives it.
 * The interpreter is jinja.h's; this file only knows where templates live
 * and what a chat request turns into. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/io.h"
#include "base/json.h"
#include "runtime/engine.h"
#include "runtime/jinja.h"

struct ms_chat_template {
    ms_jinja *j;
    char *text;          /* the source, to tell formats apart */
    char *bos, *eos;     /* NULL: not defined */
    char source[1024];
};

static int read_file(const char *path, char **text, size_t *len, ms_err *err)
{
    return ms_read_file(path, (size_t)64 << 20, text, len, err);
}

static char *token_string(const json_t *cfg, const char *key)
{
    const json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int ms_chat_template_open(const char *model_dir, const char *file, const char *name,
                          ms_chat_template **out, ms_error *err)
{
    *out = NULL;
    ms_chat_template *t = calloc(1, sizeof *t);
    if (!t)
        return ms_err_set(err, MS_E_NOMEM, "out of memory opening the chat template");
    json_t *cfg = NULL;
    char path[1024];
    char *text = NULL;
    size_t len = 0;
    int rc = -1;
    if (model_dir) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
        if (exists(path)) {
            /* integers as reals: releases hold values past 64 bits there
             * (model_max_length 1e30); only strings are read from it */
            json_error_t je;
            char *ct = NULL;
            size_t cn = 0;
            if (ms_read_file(path, (size_t)256 << 20, &ct, &cn, err))
                goto out;
            cfg = json_loadb(ct, cn, JSON_DECODE_INT_AS_REAL, &je);
            free(ct);
            if (!cfg) {
                ms_err_set(err, MS_E_ARG, "%s: invalid JSON at line %d column %d: %s", path,
                           je.line, je.column, je.text);
                goto out;
            }
            t->bos = token_string(cfg, "bos_token");
            t->eos = token_string(cfg, "eos_token");
        }
    }
    if (file) { /* named by the user: a pipe is fine */
        if (ms_read_input(file, (size_t)64 << 20, &text, &len, err))
            goto out;
        snprintf(t->source, sizeof t->source, "%s", file);
    } else if (model_dir && (snprintf(path, sizeof path, "%s/chat_template.jinja", model_dir),
                             exists(path))) {
        if (read_file(path, &text, &len, err))
            goto out;
        snprintf(t->source, sizeof t->source, "%s", path);
    } else if (cfg && json_object_get(cfg, "chat_template")) {
        const json_t *ct = json_object_get(cfg, "chat_template");
        const char *want = name ? name : "default";
        const json_t *src = NULL;
        if (json_is_string(ct)) {
            src = ct;
            if (name && strcmp(name, "default")) {
                ms_err_set(err, MS_E_ARG, "%s/tokenizer_config.json: chat_template is a single "
                           "template; there is no template named \"%s\"", model_dir, name);
                goto out;
            }
            snprintf(t->source, sizeof t->source, "%s/tokenizer_config.json chat_template",
                     model_dir);
        } else if (json_is_array(ct)) {
            char names[256] = "";
            for (size_t i = 0; i < json_array_size(ct); i++) {
                const json_t *e = json_array_get(ct, i);
                const char *n = json_string_value(json_object_get(e, "name"));
                const json_t *tp = json_object_get(e, "template");
                if (!n || !json_is_string(tp)) {
                    ms_err_set(err, MS_E_ARG, "%s/tokenizer_config.json: chat_template[%zu] "
                               "needs string \"name\" and \"template\"", model_dir, i);
                    goto out;
                }
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s\"%s\"",
                         i ? ", " : "", n);
                if (!strcmp(n, want))
                    src = tp;
            }
            if (!src) {
                ms_err_set(err, MS_E_ARG, "%s/tokenizer_config.json: no chat template named "
                           "\"%s\" (it has %s)", model_dir, want, names);
                goto out;
            }
            snprintf(t->source, sizeof t->source, "%s/tokenizer_config.json chat_template "
                     "\"%s\"", model_dir, want);
        } else {
            ms_err_set(err, MS_E_ARG, "%s/tokenizer_config.json: chat_template must be a string "
                       "or a list of {\"name\", \"template\"}", model_dir);
            goto out;
        }
        len = json_string_length(src);
        text = malloc(len + 1);
        if (!text) {
            ms_err_set(err, MS_E_NOMEM, "out of memory reading the chat template");
            goto out;
        }
        memcpy(text, json_string_value(src), len + 1);
    } else {
        rc = 0; /* no template: the caller falls back */
        goto out;
    }
    if (ms_jinja_parse(text, len, t->source, &t->j, err))
        goto out;
    t->text = text;
    text = NULL;
    *out = t;
    t = NULL;
    rc = 0;
out:
    free(text);
    json_decref(cfg);
    ms_chat_template_close(t);
    return rc;
}

void ms_chat_template_close(ms_chat_template *t)
{
    if (!t)
        return;
    ms_jinja_free(t->j);
    free(t->text);
    free(t->bos);
    free(t->eos);
    free(t);
}

const char *ms_chat_template_source(const ms_chat_template *t)
{
    return t->source;
}

static int parse_request(const char *request_json, json_t **req, ms_err *err)
{
    if (ms_json_load_buf(request_json, strlen(request_json), "chat request", req, err))
        return -1;
    if (!json_is_object(*req)) {
        json_decref(*req);
        *req = NULL;
        return ms_err_set(err, MS_E_ARG, "chat request: expected a JSON object");
    }
    if (!json_is_array(json_object_get(*req, "messages"))) {
        json_decref(*req);
        *req = NULL;
        return ms_err_set(err, MS_E_ARG, "chat request: \"messages\" must be a list");
    }
    return 0;
}

int ms_chat_template_render(const ms_chat_template *t, const char *request_json,
                            const ms_template_opts *o, char **out, ms_error *err)
{
    *out = NULL;
    json_t *req = NULL;
    if (parse_request(request_json, &req, err))
        return -1;
    ms_template_opts def = {.add_generation_prompt = 1, .thinking = -1};
    if (!o)
        o = &def;
    json_t *vars = json_object();
    json_object_set(vars, "messages", json_object_get(req, "messages"));
    json_t *tools = json_object_get(req, "tools");
    json_object_set_new(vars, "tools", tools ? json_incref(tools) : json_null());
    json_object_set_new(vars, "add_generation_prompt", json_boolean(o->add_generation_prompt));
    const char *bos = o->bos_token ? o->bos_token : t->bos;
    const char *eos = o->eos_token ? o->eos_token : t->eos;
    if (bos)
        json_object_set_new(vars, "bos_token", json_string(bos));
    if (eos)
        json_object_set_new(vars, "eos_token", json_string(eos));
    if (o->thinking >= 0) {
        json_object_set_new(vars, "enable_thinking", json_boolean(o->thinking));
        json_object_set_new(vars, "thinking", json_boolean(o->thinking));
    }
    if (o->reasoning_effort)
        json_object_set_new(vars, "reasoning_effort", json_string(o->reasoning_effort));
    const json_t *kw = json_object_get(req, "chat_template_kwargs");
    int rc = -1;
    if (kw && !json_is_object(kw)) {
        ms_err_set(err, MS_E_ARG, "chat request: \"chat_template_kwargs\" must be an object");
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)kw, k, v) {
        if (!strcmp(k, "messages") || !strcmp(k, "tools") || !strcmp(k, "add_generation_prompt")) {
            ms_err_set(err, MS_E_ARG, "chat request: chat_template_kwargs may not set \"%s\"", k);
            goto out;
        }
        json_object_set(vars, k, v);
    }
    ms_jinja_env env = {.now = o->now ? o->now : (int64_t)time(NULL)};
    rc = ms_jinja_render(t->j, vars, &env, out, NULL, err);
out:
    json_decref(vars);
    json_decref(req);
    return rc;
}

/* ---- the engine's prompt ---------------------------------------------------------------- */

static const char *text_of(const json_t *m, const char *key)
{
    return json_string_value(json_object_get(m, key));
}

/* The built-in family format, for folders without a template. */
static int builtin_prompt(const char *family, const char *request_json, const ms_template_opts *o,
                          char **out, ms_err *err)
{
    json_t *req = NULL;
    if (parse_request(request_json, &req, err))
        return -1;
    const json_t *msgs = json_object_get(req, "messages");
    size_t n = json_array_size(msgs);
    ms_chat_msg *m = calloc(n + 1, sizeof *m);
    int rc = -1;
    if (!m) {
        ms_err_set(err, MS_E_NOMEM, "out of memory rendering the chat prompt");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(msgs, i);
        m[i].role = text_of(e, "role");
        m[i].content = text_of(e, "content");
        m[i].reasoning = text_of(e, "reasoning_content");
        if (!m[i].reasoning)
            m[i].reasoning = text_of(e, "thinking");
        if (!m[i].role || !m[i].content) {
            ms_err_set(err, MS_E_ARG, "chat request: message %zu needs string \"role\" and "
                       "\"content\" (the built-in %s format)", i, family);
            goto out;
        }
    }
    char today[16];
    time_t now = o->now ? (time_t)o->now : time(NULL);
    struct tm tm;
    strftime(today, sizeof today, "%Y-%m-%d", gmtime_r(&now, &tm));
    ms_chat_opts co = {.add_generation_prompt = o->add_generation_prompt,
                       .thinking = o->thinking, .reasoning_effort = o->reasoning_effort,
                       .date = today};
    rc = ms_chat_render(family, m, (int)n, &co, out, err);
out:
    free(m);
    json_decref(req);
    return rc;
}

int ms_chat_prompt(const ms_engine *eng, const char *request_json, const ms_template_opts *o,
                   char **out, ms_error *err)
{
    ms_template_opts def = {.add_generation_prompt = 1, .thinking = -1};
    if (!o)
        o = &def;
    if (eng->chat_template)
        return ms_chat_template_render(eng->chat_template, request_json, o, out, err);
    return builtin_prompt(eng->info.family, request_json, o, out, err);
}

const ms_chat_template *ms_engine_chat_template(const ms_engine *eng)
{
    return eng->chat_template;
}

int ms_engine_tool_format(const ms_engine *eng)
{
    return ms_tool_format_for(eng->info.family, eng->chat_template ? eng->chat_template->text
                                                                   : NULL);
}

const char *ms_chat_template_text(const ms_chat_template *t)
{
    return t->text;
}
