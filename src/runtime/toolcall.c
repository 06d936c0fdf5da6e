/* Splits a whole model response into the OpenAI assistant message: content,
 * reasoning_content and tool_calls, for each family's tool-call syntax (see
 * moestream.h, ms_chat_parse). What does not follow the syntax stays text,
 * with a note saying what was wrong; nothing is dropped silently. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "moestream.h"
#include "runtime/grammar.h"

static const char *const format_names[] = {
    [MS_TOOLS_HARMONY] = "harmony",         [MS_TOOLS_QWEN3] = "qwen3",
    [MS_TOOLS_QWEN3_CODER] = "qwen3_coder", [MS_TOOLS_DEEPSEEK_V3] = "deepseek_v3",
    [MS_TOOLS_DEEPSEEK_V3_1] = "deepseek_v3_1", [MS_TOOLS_LONGCAT] = "longcat",
    [MS_TOOLS_GLM45] = "glm45",
};

int ms_tool_format_from_name(const char *name)
{
    for (int f = 1; f < (int)(sizeof format_names / sizeof format_names[0]); f++)
        if (format_names[f] && !strcmp(format_names[f], name))
            return f;
    return -1;
}

const char *ms_tool_format_name(int f)
{
    return f > 0 && f < (int)(sizeof format_names / sizeof format_names[0]) ? format_names[f]
                                                                           : "none";
}

int ms_tool_format_for(const char *family, const char *template_text)
{
    const char *t = template_text ? template_text : "";
    if (!strcmp(family, "gpt_oss"))
        return MS_TOOLS_HARMONY;
    if (!strcmp(family, "longcat_flash"))
        return MS_TOOLS_LONGCAT;
    if (!strcmp(family, "glm4_moe") || strstr(t, "<arg_key>"))
        return MS_TOOLS_GLM45;
    if (!strcmp(family, "deepseek_v3"))
        /* V3 / R1 write "<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json";
         * V3.1 "<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS" */
        return strstr(t, "```json") || !*t ? MS_TOOLS_DEEPSEEK_V3 : MS_TOOLS_DEEPSEEK_V3_1;
    if (strstr(t, "<function=") || strstr(t, "<parameter="))
        return MS_TOOLS_QWEN3_CODER;
    return MS_TOOLS_QWEN3;
}

/* ---- pieces ----------------------------------------------------------------------- */

typedef struct piece { const char *p; size_t n; } piece;

static const char *find(piece s, const char *pat)
{
    size_t k = strlen(pat);
    if (k > s.n)
        return NULL;
    return memmem(s.p, s.n, pat, k);
}

static piece after(piece s, const char *at, size_t skip)
{
    size_t off = (size_t)(at - s.p) + skip;
    return (piece){s.p + off, s.n - off};
}

static piece before(piece s, const char *at)
{
    return (piece){s.p, (size_t)(at - s.p)};
}

static piece trim(piece s, const char *chars)
{
    while (s.n && strchr(chars, s.p[0]))
        s.p++, s.n--;
    while (s.n && strchr(chars, s.p[s.n - 1]))
        s.n--;
    return s;
}

typedef struct out {
    json_t *content, *reasoning;   /* strings being built, or NULL */
    json_t *calls;
    int partial;                   /* a prefix: an unclosed call is pending, not text */
    char note[512];
} out;

static void add_text(json_t **dst, piece s)
{
    if (!s.n)
        return;
    if (!*dst) {
        *dst = json_stringn(s.p, s.n);
        return;
    }
    size_t n = json_string_length(*dst);
    char *b = malloc(n + s.n);
    if (!b)
        return;
    memcpy(b, json_string_value(*dst), n);
    memcpy(b + n, s.p, s.n);
    json_string_setn_nocheck(*dst, b, n + s.n);
    free(b);
}

static void noted(out *o, const char *fmt, const char *what)
{
    if (!o->note[0])
        snprintf(o->note, sizeof o->note, fmt, what);
}

static void add_call(out *o, piece name, const char *args_json)
{
    json_t *c = json_object();
    char id[32];
    snprintf(id, sizeof id, "call_%zu", json_array_size(o->calls));
    json_object_set_new(c, "id", json_string(id));
    json_object_set_new(c, "type", json_string("function"));
    json_t *f = json_object();
    json_object_set_new(f, "name", json_stringn(name.p, name.n));
    json_object_set_new(f, "arguments", json_string(args_json));
    json_object_set_new(c, "function", f);
    json_array_append_new(o->calls, c);
}

/* JSON text of a value, compact, UTF-8 kept. */
static char *dump(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

static json_t *parse_json(piece s)
{
    return json_loadb(s.p, s.n, JSON_DECODE_ANY, NULL);
}

/* reasoning up to `close` (from the start, or after `open`), then the rest */
static piece split_reasoning(out *o, piece s, const char *open, const char *close, int opened)
{
    const char *c = find(s, close);
    const char *op = find(s, open);
    if (op && (!c || op < c)) {
        add_text(&o->content, trim(before(s, op), "\n"));
        s = after(s, op, strlen(open));
        opened = 1;
        c = find(s, close);
    }
    if (!opened)
        return s;
    if (!c) {
        add_text(&o->reasoning, trim(s, "\n"));
        return (piece){s.p + s.n, 0};
    }
    add_text(&o->reasoning, trim(before(s, c), "\n"));
    return after(s, c, strlen(close));
}

static piece cut_end(piece s, const char *const *ends)
{
    for (int i = 0; ends[i]; i++) {
        const char *e = find(s, ends[i]);
        if (e)
            s = before(s, e);
    }
    return s;
}

/* ---- Harmony ---------------------------------------------------------------------- */

static void harmony(out *o, piece s)
{
    /* the prompt ends with "<|start|>assistant": the text opens in a header */
    int in_header = 1;
    while (s.n) {
        if (in_header) {
            const char *m = find(s, "<|message|>");
            if (!m && o->partial)
                return; /* the header is still being written */
            if (!m) {
                noted(o, "a Harmony header without <|message|>: kept as text (%s)", "header");
                add_text(&o->content, s);
                return;
            }
            piece h = before(s, m);
            s = after(s, m, strlen("<|message|>"));
            /* the body runs to <|end|>, <|call|>, <|return|> or the end */
            const char *ends[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
            const char *e = NULL;
            size_t el = 0;
            for (int k = 0; k < 4; k++) {
                const char *f = find(s, ends[k]);
                if (f && (!e || f < e)) {
                    e = f;
                    el = k == 3 ? 0 : strlen(ends[k]);
                }
            }
            piece body = e ? before(s, e) : s;
            s = e ? after(s, e, el) : (piece){s.p + s.n, 0};
            const char *to = find(h, "to=");
            const char *ch = find(h, "<|channel|>");
            piece chan = {"", 0};
            if (ch) {
                chan = after(h, ch, strlen("<|channel|>"));
                size_t k = 0;
                while (k < chan.n && chan.p[k] != ' ' && chan.p[k] != '<')
                    k++;
                chan.n = k;
            }
            if (to && !e && o->partial)
                return; /* a call still being written */
            if (to) {
                piece r = after(h, to, 3);
                size_t k = 0;
                while (k < r.n && r.p[k] != ' ' && r.p[k] != '<')
                    k++;
                r.n = k;
                if (r.n > 10 && !memcmp(r.p, "functions.", 10))
                    r = (piece){r.p + 10, r.n - 10};
                char *args = strndup(body.p, body.n);
                json_t *chk = parse_json(body);
                if (!chk)
                    noted(o, "the arguments of a tool call are not valid JSON (%s)", "harmony");
                json_decref(chk);
                add_call(o, r, args ? args : "");
                free(args);
            } else if (chan.n == 8 && !memcmp(chan.p, "analysis", 8)) {
                add_text(&o->reasoning, body);
            } else {
                add_text(&o->content, body);
            }
            in_header = 0;
        } else {
            const char *st = find(s, "<|start|>");
            if (!st) {
                if (trim(s, " \n").n) {
                    noted(o, "text after the last Harmony message: kept as text (%s)", "harmony");
                    add_text(&o->content, s);
                }
                return;
            }
            s = after(s, st, strlen("<|start|>"));
            in_header = 1;
        }
    }
}

/* ---- JSON-bodied calls: Qwen3 <tool_call>, LongCat <longcat_tool_call> ----------------- */

static void json_calls(out *o, piece s, const char *open, const char *close)
{
    for (;;) {
        const char *b = find(s, open);
        if (!b) {
            add_text(&o->content, trim(s, "\n"));
            return;
        }
        add_text(&o->content, trim(before(s, b), "\n"));
        piece rest = after(s, b, strlen(open));
        const char *e = find(rest, close);
        if (!e && o->partial)
            return;
        piece body = e ? before(rest, e) : rest;
        json_t *j = parse_json(trim(body, " \n\t"));
        const char *name = json_string_value(json_object_get(j, "name"));
        json_t *args = json_object_get(j, "arguments");
        if (!args)
            args = json_object_get(j, "parameters");
        if (!name || !args) {
            noted(o, "a %s block that is not {\"name\", \"arguments\"} JSON: kept as text", open);
            add_text(&o->content, (piece){b, e ? (size_t)(e - b) + strlen(close)
                                                 : (size_t)(rest.p + rest.n - b)});
        } else {
            char *a = json_is_string(args) ? strdup(json_string_value(args)) : dump(args);
            add_call(o, (piece){name, strlen(name)}, a ? a : "{}");
            free(a);
        }
        json_decref(j);
        if (!e)
            return;
        s = after(rest, e, strlen(close));
    }
}

/* ---- Qwen3-Coder: <function=NAME><parameter=K>V</parameter></function> ------------------ */

/* The JSON type a tool's schema gives a parameter ("string" when unknown). */
static const char *param_type(const json_t *tools, piece fn, const char *param)
{
    size_t i;
    json_t *t;
    json_array_foreach((json_t *)tools, i, t) {
        const json_t *f = json_object_get(t, "function");
        const char *n = json_string_value(json_object_get(f, "name"));
        if (!n || strlen(n) != fn.n || memcmp(n, fn.p, fn.n))
            continue;
        const json_t *p = json_object_get(json_object_get(json_object_get(f, "parameters"),
                                                          "properties"), param);
        const char *ty = json_string_value(json_object_get(p, "type"));
        return ty ? ty : "string";
    }
    return "string";
}

/* args[key] = val: JSON unless the tool's schema says the parameter is a
 * string (or val is not JSON); key NULL (out of memory) sets nothing. */
static void set_arg(json_t *args, const json_t *tools, piece fn, const char *key, piece val)
{
    json_t *jv = NULL;
    if (!key)
        return;
    if (strcmp(param_type(tools, fn, key), "string"))
        jv = parse_json(val);
    json_object_set_new(args, key, jv ? jv : json_stringn(val.p, val.n));
}

static void add_args_call(out *o, piece name, json_t *args)
{
    char *a = dump(args);
    add_call(o, name, a ? a : "{}");
    free(a);
    json_decref(args);
}

/* Each "<tool_call>...</tool_call>" block of s goes to call(o, b, body, tools)
 * (b: where the block starts, for keeping it as text); the text around
 * the blocks is content. A block left open at the end is a call only
 * when the text is complete (not --partial). */
typedef void block_fn(out *o, const char *b, piece body, const json_t *tools);

static void tool_call_blocks(out *o, piece s, const json_t *tools, block_fn *call)
{
    for (;;) {
        const char *b = find(s, "<tool_call>");
        if (!b) {
            add_text(&o->content, trim(s, "\n"));
            return;
        }
        add_text(&o->content, trim(before(s, b), "\n"));
        piece rest = after(s, b, strlen("<tool_call>"));
        const char *e = find(rest, "</tool_call>");
        if (!e && o->partial)
            return;
        call(o, b, e ? before(rest, e) : rest, tools);
        if (!e)
            return;
        s = after(rest, e, strlen("</tool_call>"));
    }
}

/* Qwen3-Coder: <function=NAME><parameter=K>V</parameter>...</function> */
static void coder_call(out *o, const char *b, piece body, const json_t *tools)
{
    const char *f = find(body, "<function=");
    const char *gt = f ? memchr(f, '>', (size_t)(body.p + body.n - f)) : NULL;
    if (!f || !gt) {
        noted(o, "a %s block without <function=NAME>: kept as text", "<tool_call>");
        add_text(&o->content, (piece){b, (size_t)(body.p + body.n - b)});
        return;
    }
    piece name = {f + 10, (size_t)(gt - f - 10)};
    piece params = after(body, gt, 1);
    json_t *args = json_object();
    for (;;) {
        const char *p = find(params, "<parameter=");
        if (!p)
            break;
        const char *pg = memchr(p, '>', (size_t)(params.p + params.n - p));
        if (!pg)
            break;
        char *key = strndup(p + 11, (size_t)(pg - p - 11));
        piece v = after(params, pg, 1);
        const char *ve = find(v, "</parameter>");
        if (!ve)
            ve = find(v, "</function>");
        piece val = ve ? before(v, ve) : v;
        if (val.n && val.p[0] == '\n')
            val.p++, val.n--;
        if (val.n && val.p[val.n - 1] == '\n')
            val.n--;
        set_arg(args, tools, name, key, val);
        free(key);
        if (!ve)
            break;
        params = after(v, ve, 1);
    }
    add_args_call(o, name, args);
}

/* ---- GLM-4.5: <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value></tool_call> --- */

/* The text between open and close after *at (moved past close); NULL when
 * open is not next (white space aside) or close is missing. */
static const char *tagged(piece *at, const char *open, const char *close, piece *val)
{
    piece s = trim(*at, "\n ");
    size_t lo = strlen(open);
    if (s.n < lo || memcmp(s.p, open, lo))
        return NULL;
    piece v = after(s, s.p, lo);
    const char *e = find(v, close);
    if (!e)
        return NULL;
    *val = before(v, e);
    *at = after(v, e, strlen(close));
    return e;
}

static void glm_call(out *o, const char *b, piece body, const json_t *tools)
{
    const char *k0 = find(body, "<arg_key>");
    piece name = trim(k0 ? before(body, k0) : body, "\n ");
    if (!name.n) {
        noted(o, "a %s block without a function name: kept as text", "<tool_call>");
        add_text(&o->content, (piece){b, (size_t)(body.p + body.n - b)});
        return;
    }
    json_t *args = json_object();
    piece at = k0 ? after(body, k0, 0) : (piece){body.p + body.n, 0};
    piece key, val;
    while (tagged(&at, "<arg_key>", "</arg_key>", &key)) {
        if (!tagged(&at, "<arg_value>", "</arg_value>", &val)) {
            noted(o, "an <arg_key> without its <arg_value> in a call of %s: the rest of its "
                  "arguments dropped", "a tool");
            break;
        }
        char *k = strndup(key.p, key.n);
        set_arg(args, tools, name, k, val);
        free(k);
    }
    add_args_call(o, name, args);
}

/* ---- DeepSeek: <｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜> ------------------------------ */

#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"
#define DS_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

static void deepseek_calls(out *o, piece s, int v31)
{
    const char *b = find(s, DS_CALLS_BEGIN);
    if (!b) {
        add_text(&o->content, trim(s, "\n"));
        return;
    }
    add_text(&o->content, trim(before(s, b), "\n"));
    piece rest = after(s, b, strlen(DS_CALLS_BEGIN));
    const char *end = find(rest, DS_CALLS_END);
    if (!end && o->partial)
        return;
    if (end)
        rest = before(rest, end);
    for (;;) {
        const char *c = find(rest, DS_CALL_BEGIN);
        if (!c)
            break;
        piece call = after(rest, c, strlen(DS_CALL_BEGIN));
        const char *ce = find(call, DS_CALL_END);
        piece body = ce ? before(call, ce) : call;
        const char *sep = find(body, DS_SEP);
        if (!sep) {
            noted(o, "a DeepSeek tool call without %s: kept as text", "<｜tool▁sep｜>");
            add_text(&o->content, body);
        } else {
            piece name, args;
            if (v31) {
                name = before(body, sep);
                args = after(body, sep, strlen(DS_SEP));
            } else {
                /* TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n``` */
                piece t = after(body, sep, strlen(DS_SEP));
                const char *nl = memchr(t.p, '\n', t.n);
                name = nl ? before(t, nl) : t;
                args = nl ? after(t, nl, 1) : (piece){t.p + t.n, 0};
                args = trim(args, "\n");
                if (args.n >= 7 && !memcmp(args.p, "```json", 7))
                    args = (piece){args.p + 7, args.n - 7};
                if (args.n >= 3 && !memcmp(args.p + args.n - 3, "```", 3))
                    args.n -= 3;
            }
            args = trim(args, " \n");
            json_t *j = parse_json(args);
            if (!j)
                noted(o, "the arguments of a tool call are not valid JSON (%s)", "deepseek");
            char *a = j && json_is_string(j) ? strdup(json_string_value(j))
                                             : strndup(args.p, args.n);
            json_decref(j);
            add_call(o, trim(name, " \n"), a ? a : "");
            free(a);
        }
        if (!ce)
            break;
        rest = after(call, ce, strlen(DS_CALL_END));
    }
}

/* ---- entry point ------------------------------------------------------------------------ */

/* The markers of each syntax, for leaving out a trailing piece of one. */
static const char *const harmony_markers[] = {"<|start|>", "<|channel|>", "<|message|>",
    "<|end|>", "<|call|>", "<|return|>", "<|constrain|>", NULL};
static const char *const qwen_markers[] = {"<think>", "</think>", "<tool_call>", "</tool_call>",
    "<|im_end|>", "<|endoftext|>", NULL};
static const char *const ds_markers[] = {"<think>", "</think>", DS_CALLS_BEGIN, DS_EOS, NULL};
static const char *const glm_markers[] = {"<think>", "</think>", "<tool_call>", "</tool_call>",
    "<|user|>", "<|observation|>", "<|endoftext|>", NULL};
static const char *const lc_markers[] = {"<longcat_think>", "</longcat_think>",
    "<longcat_tool_call>", "</longcat_s>", NULL};

static size_t without_marker_piece(const char *s, size_t n, const char *const *mk)
{
    size_t cut = n;
    for (int i = 0; mk[i]; i++) {
        size_t ml = strlen(mk[i]);
        for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
            if (!memcmp(s + n - k, mk[i], k)) {
                if (n - k < cut)
                    cut = n - k;
                break;
            }
    }
    return cut;
}

int ms_chat_prompt_opens_reasoning(const char *prompt)
{
    size_t n = strlen(prompt);
    while (n && (prompt[n - 1] == '\n' || prompt[n - 1] == ' '))
        n--;
    return (n >= 7 && !memcmp(prompt + n - 7, "<think>", 7)) ||
           (n >= 15 && !memcmp(prompt + n - 15, "<longcat_think>", 15));
}

int ms_chat_parse(int format, const char *text, size_t len, const char *tools_json, int flags,
                  char **message_json, char **note, ms_error *err)
{
    int opens_reasoning = (flags & MS_PARSE_OPENS_REASONING) != 0;
    *message_json = NULL;
    if (note)
        *note = NULL;
    json_t *tools = NULL;
    if (tools_json && *tools_json) {
        tools = json_loads(tools_json, 0, NULL);
        if (!json_is_array(tools)) {
            json_decref(tools);
            return ms_err_set(err, MS_E_ARG, "tools: expected a JSON list of tools");
        }
    }
    out o = {.calls = json_array(), .partial = (flags & MS_PARSE_PARTIAL) != 0};
    const char *const *mk = format == MS_TOOLS_HARMONY ? harmony_markers
                          : format == MS_TOOLS_DEEPSEEK_V3 || format == MS_TOOLS_DEEPSEEK_V3_1
                          ? ds_markers : format == MS_TOOLS_LONGCAT ? lc_markers
                          : format == MS_TOOLS_GLM45 ? glm_markers : qwen_markers;
    if (o.partial)
        len = without_marker_piece(text, len, mk);
    piece s = {text, len};
    static const char *const qwen_ends[] = {"<|im_end|>", "<|endoftext|>", NULL};
    static const char *const ds_ends[] = {DS_EOS, NULL};
    static const char *const lc_ends[] = {"</longcat_s>", NULL};
    static const char *const glm_ends[] = {"<|user|>", "<|observation|>", "<|endoftext|>", NULL};
    switch (format) {
    case MS_TOOLS_HARMONY:
        harmony(&o, s);
        break;
    case MS_TOOLS_QWEN3: case MS_TOOLS_QWEN3_CODER:
        s = split_reasoning(&o, cut_end(s, qwen_ends), "<think>", "</think>", opens_reasoning);
        if (format == MS_TOOLS_QWEN3)
            json_calls(&o, s, "<tool_call>", "</tool_call>");
        else
            tool_call_blocks(&o, s, tools, coder_call);
        break;
    case MS_TOOLS_DEEPSEEK_V3: case MS_TOOLS_DEEPSEEK_V3_1:
        s = split_reasoning(&o, cut_end(s, ds_ends), "<think>", "</think>", opens_reasoning);
        deepseek_calls(&o, s, format == MS_TOOLS_DEEPSEEK_V3_1);
        break;
    case MS_TOOLS_LONGCAT:
        s = split_reasoning(&o, cut_end(s, lc_ends), "<longcat_think>", "</longcat_think>",
                            opens_reasoning);
        json_calls(&o, s, "<longcat_tool_call>", "</longcat_tool_call>");
        break;
    case MS_TOOLS_GLM45:
        s = split_reasoning(&o, cut_end(s, glm_ends), "<think>", "</think>", opens_reasoning);
        tool_call_blocks(&o, s, tools, glm_call);
        break;
    default:
        json_decref(tools);
        json_decref(o.calls);
        return ms_err_set(err, MS_E_ARG, "unknown tool-call format %d", format);
    }
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content", o.content ? o.content : json_null());
    if (o.reasoning)
        json_object_set_new(m, "reasoning_content", o.reasoning);
    if (json_array_size(o.calls))
        json_object_set_new(m, "tool_calls", o.calls);
    else
        json_decref(o.calls);
    *message_json = json_dumps(m, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(m);
    json_decref(tools);
    if (note && o.note[0])
        *note = strdup(o.note);
    if (!*message_json)
        return ms_err_set(err, MS_E_NOMEM, "out of memory writing the parsed message");
    return 0;
}

/* ---- constraints in each syntax ------------------------------------------------------- */

/* What closes the reasoning a prompt opened, in this syntax. */
static const char *close_reasoning(int format)
{
    return format == MS_TOOLS_LONGCAT ? "</longcat_think>" : "</think>";
}

int ms_grammar_for_answer(int format, int opens_reasoning, const char *schema_json,
                          ms_grammar **g, ms_error *err)
{
    const char *prefix = format == MS_TOOLS_HARMONY ? "<|channel|>final<|message|>"
                       : opens_reasoning ? close_reasoning(format) : NULL;
    const char *schemas[1] = {schema_json};
    return ms_grammar_json(1, &prefix, schemas, NULL, g, err);
}

int ms_grammar_for_tool_call(int format, int opens_reasoning, const char *tools_json,
                             const char *only, ms_grammar **g, ms_error *err)
{
    *g = NULL;
    json_t *tools = json_loads(tools_json ? tools_json : "[]", 0, NULL);
    size_t n = json_array_size(tools);
    char **pre = calloc(n + 1, sizeof *pre), **sch = calloc(n + 1, sizeof *sch);
    int k = 0, rc = -1;
    const char *suffix = NULL;
    const char *open = opens_reasoning ? close_reasoning(format) : "";
    if (!pre || !sch) {
        ms_err_set(err, MS_E_NOMEM, "out of memory building a tool-call grammar");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *f = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || (only && strcmp(only, name)))
            continue;
        const json_t *params = json_object_get(f, "parameters");
        json_t *nm = json_string(name);
        char *qname = json_dumps(nm, JSON_ENCODE_ANY);
        json_decref(nm);
        char buf[1024];
        switch (format) {
        case MS_TOOLS_QWEN3_CODER: case MS_TOOLS_GLM45: /* the name alone: the grammar frames it */
            snprintf(buf, sizeof buf, "%s", name);
            break;
        case MS_TOOLS_HARMONY:
            snprintf(buf, sizeof buf, "<|channel|>commentary to=functions.%s <|constrain|>json"
                     "<|message|>", name);
            suffix = "<|call|>";
            break;
        case MS_TOOLS_QWEN3:
            snprintf(buf, sizeof buf, "%s<tool_call>\n{\"name\": %s, \"arguments\": ", open,
                     qname ? qname : "\"\"");
            suffix = "}\n</tool_call>";
            break;
        case MS_TOOLS_LONGCAT:
            snprintf(buf, sizeof buf, "%s<longcat_tool_call>{\"name\": %s, \"arguments\": ", open,
                     qname ? qname : "\"\"");
            suffix = "}</longcat_tool_call>";
            break;
        case MS_TOOLS_DEEPSEEK_V3:
            snprintf(buf, sizeof buf, "%s" DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP
                     "%s\n```json\n", open, name);
            suffix = "\n```" DS_CALL_END DS_CALLS_END;
            break;
        default: /* DEEPSEEK_V3_1 */
            snprintf(buf, sizeof buf, "%s" DS_CALLS_BEGIN DS_CALL_BEGIN "%s" DS_SEP, open, name);
            suffix = DS_CALL_END DS_CALLS_END;
            break;
        }
        free(qname);
        pre[k] = strdup(buf);
        sch[k] = params ? json_dumps(params, JSON_COMPACT) : strdup("{\"type\": \"object\"}");
        k++;
    }
    if (!k) {
        ms_err_set(err, MS_E_ARG, only ? "tool_choice names \"%s\", which is not in tools"
                                       : "tool_choice needs a call but no tool is offered%s",
                   only ? only : "");
        goto out;
    }
    if (format == MS_TOOLS_QWEN3_CODER || format == MS_TOOLS_GLM45)
        rc = ms_grammar_xml_calls(format == MS_TOOLS_GLM45 ? &ms_xml_glm45 : &ms_xml_qwen3_coder,
                                  k, (const char *const *)pre, (const char *const *)sch,
                                  *open ? open : NULL, g, err);
    else
        rc = ms_grammar_json(k, (const char *const *)pre, (const char *const *)sch, suffix, g,
                             err);
out:
    for (int i = 0; i < k; i++) {
        free(pre[i]);
        free(sch[i]);
    }
    free(pre);
    free(sch);
    json_decref(tools);
    return rc;
}
