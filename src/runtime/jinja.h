/* A Jinja interpreter for Hugging Face chat templates.
 *
 * No Debian package renders Jinja from C (minja, llama.cpp's, is C++ and not
 * packaged), so this is our own: the subset of Jinja 3 that released chat
 * templates use, with the environment transformers' apply_chat_template sets
 * up (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop
 * controls, raise_exception, strftime_now, a tojson that keeps non-ASCII).
 * Output is meant to be byte-identical to python3-jinja2's; values print as
 * Python prints them (True, None, ['a', 1], 1.0).
 *
 * Statements: if/elif/else, for (loop.*, else, filter condition, unpacking),
 * set (also block set and namespace attributes), macro/call, filter blocks,
 * break/continue, raw, generation (transformers' no-op tag), comments, and
 * whitespace control (-, +). Undefined follows Jinja's default Undefined:
 * printing it gives "", iterating it gives nothing, using it in arithmetic
 * or taking an attribute of it is an error.
 *
 * Errors are values: a message naming the template (its `name`) and line.
 * Rendering is bounded (a step budget and an output cap) so that no template
 * can hang or exhaust memory; the output buffer grows geometrically, so the
 * cost is linear in the output. A parsed template is read-only: several
 * threads may render it at once. */
#ifndef MS_RUNTIME_JINJA_H
#define MS_RUNTIME_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct ms_jinja ms_jinja;

/* Parses a template; `name` (e.g. "tokenizer_config.json chat_template")
 * is used in every error message. */
int ms_jinja_parse(const char *src, size_t len, const char *name, ms_jinja **out, ms_err *err);
void ms_jinja_free(ms_jinja *t);

typedef struct ms_jinja_env {
    int64_t now;         /* seconds since the epoch (UTC) that strftime_now formats */
    int64_t max_steps;   /* 0: 500 million evaluation steps */
    size_t max_output;   /* 0: 256 MiB */
} ms_jinja_env;

/* Renders with the template variables in `vars` (a JSON object; each key is
 * a variable, JSON values become Jinja values: objects keep their key
 * order). *out is malloc'd and NUL-terminated (*len bytes; len may be
 * NULL). A template that raises (raise_exception) or fails fails with
 * MS_E_ARG and the template's own message, plus its line. */
int ms_jinja_render(const ms_jinja *t, const json_t *vars, const ms_jinja_env *env, char **out,
                    size_t *len, ms_err *err);

#endif
