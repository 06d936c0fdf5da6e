/* moestream parse: a model's output as the OpenAI assistant message it
 * stands for (content, reasoning_content, tool_calls), in the tool-call
 * syntax of a model folder or of a named format. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static char *slurp(const char *path, size_t *len, ms_error *err)
{
    char *buf = NULL;
    return ms_read_input(path, (size_t)1 << 30, &buf, len, err) ? NULL : buf;
}

/* model_type of MODEL_DIR/config.json, and its chat template's source */
static int folder_format(const char *dir, int *format, ms_error *err)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je = {0};
    size_t n = 0;
    char *text = NULL;
    if (ms_read_file(path, (size_t)64 << 20, &text, &n, err))
        return -1;
    json_t *cfg = json_loadb(text, n, JSON_DECODE_INT_AS_REAL, &je);
    free(text);
    const char *family = json_string_value(json_object_get(cfg, "model_type"));
    if (!family) {
        snprintf(err->msg, sizeof err->msg, "%.700s: %.200s", path,
                 cfg ? "no string \"model_type\"" : je.text);
        err->code = MS_E_ARG;
        json_decref(cfg);
        return -1;
    }
    ms_chat_template *t = NULL;
    if (ms_chat_template_open(dir, NULL, NULL, &t, err)) {
        json_decref(cfg);
        return -1;
    }
    *format = ms_tool_format_for(family, t ? ms_chat_template_text(t) : NULL);
    ms_chat_template_close(t);
    json_decref(cfg);
    return 0;
}

int cmd_parse(int argc, char **argv)
{
    cli_args a;
    int rc = cli_parse(CMD_PARSE, argc, argv, &a);
    if (rc)
        return cli_exit(rc);
    const char *dir = a.model, *fmt = a.format, *path = a.prompt_file, *tools_path = a.tools;
    int opens = a.opens_reasoning, partial = a.partial;
    if ((!dir == !fmt) || !path)
        return cli_usage_error("parse", "needs MODEL_DIR or --format NAME, and --text-file FILE");
    ms_error err = {0};
    int format = fmt ? ms_tool_format_from_name(fmt) : 0;
    if (fmt && format < 0)
        return cli_usage_error("parse", "--format expects harmony, qwen3, qwen3_coder, "
                               "deepseek_v3, deepseek_v3_1, longcat or glm45, not \"%s\"", fmt);
    if (dir && folder_format(dir, &format, &err))
        return cli_fail(&err);
    if (dir)
        fprintf(stderr, "moestream parse: %s tool-call format\n", ms_tool_format_name(format));
    size_t len = 0, tl = 0;
    char *text = slurp(path, &len, &err), *tools = NULL, *msg = NULL, *note = NULL;
    if (!text || (tools_path && !(tools = slurp(tools_path, &tl, &err))) ||
        ms_chat_parse(format, text, len, tools,
                      (opens ? MS_PARSE_OPENS_REASONING : 0) | (partial ? MS_PARSE_PARTIAL : 0),
                      &msg, &note, &err)) {
        rc = cli_fail(&err);
    } else {
        if (note)
            fprintf(stderr, "moestream parse: note: %s\n", note);
        printf("%s\n", msg);
    }
    free(text);
    free(tools);
    free(msg);
    free(note);
    return rc;
}
