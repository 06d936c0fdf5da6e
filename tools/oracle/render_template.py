#!/usr/bin/python3
"""Renders a chat template with python3-jinja2 the way transformers'
apply_chat_template does (transformers/utils/chat_template_utils.py,
_compile_jinja_template: ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks, the {% generation %} tag and loopcontrols; a tojson that keeps
non-ASCII; raise_exception and strftime_now), the reference that moestream's
C interpreter (`moestream render`) is compared with byte for byte.

CLI (the same as `moestream render`):
  render_template.py (MODEL_DIR | --chat-template-file FILE) --request FILE
                     [--bos-token S] [--eos-token S] [--date YYYY-MM-DD]
                     [--no-generation-prompt] [--template-name NAME]
The template is FILE's text, or MODEL_DIR/tokenizer_config.json's
chat_template (a string, or a list of {"name", "template"} from which
--template-name, default "default", is taken), else MODEL_DIR/chat_template.jinja.
bos_token/eos_token come from the flags, else from tokenizer_config.json
(a string or {"content": ...}), else are left undefined. The request is an
OpenAI chat request body: messages (as is), tools (None when absent),
add_generation_prompt, and every key of chat_template_kwargs become template
variables. strftime_now formats --date at 00:00:00 (default: now).
Prints the rendering on stdout as UTF-8, nothing added. Exit 1 with
"template error: ..." on stderr when the template fails or raises; exit 2 on
bad usage or input.
"""
import argparse
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker without the tracking: {% generation %}
    renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def usage_error(msg):
    sys.stderr.write("render_template.py: %s\n" % msg)
    sys.exit(2)


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        usage_error("%s: %s" % (path, e))


def token_text(v):
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def load_template(a):
    """(template source, tokenizer_config dict or {})."""
    if a.chat_template_file is not None:
        try:
            with open(a.chat_template_file, encoding="utf-8", newline="") as f:
                return f.read(), {}
        except OSError as e:
            usage_error(str(e))
    cfg_path = os.path.join(a.model_dir, "tokenizer_config.json")
    cfg = load_json(cfg_path) if os.path.isfile(cfg_path) else {}
    if not isinstance(cfg, dict):
        usage_error("%s: not a JSON object" % cfg_path)
    tmpl = cfg.get("chat_template")
    if isinstance(tmpl, list):
        named = {t.get("name"): t.get("template") for t in tmpl if isinstance(t, dict)}
        if a.template_name not in named or not isinstance(named[a.template_name], str):
            usage_error("%s: no chat template named %r (have: %s)"
                        % (cfg_path, a.template_name, ", ".join(str(n) for n in named)))
        return named[a.template_name], cfg
    if isinstance(tmpl, str):
        return tmpl, cfg
    if tmpl is not None:
        usage_error("%s: chat_template is neither a string nor a list" % cfg_path)
    jpath = os.path.join(a.model_dir, "chat_template.jinja")
    if os.path.isfile(jpath):
        with open(jpath, encoding="utf-8", newline="") as f:
            return f.read(), cfg
    usage_error("%s: no chat_template in tokenizer_config.json and no chat_template.jinja" % a.model_dir)


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    ap = argparse.ArgumentParser(description="Render a chat template as transformers does.")
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--chat-template-file")
    ap.add_argument("--request", required=True)
    ap.add_argument("--bos-token")
    ap.add_argument("--eos-token")
    ap.add_argument("--date")
    ap.add_argument("--no-generation-prompt", action="store_true")
    ap.add_argument("--template-name", default="default")
    a = ap.parse_args()
    if (a.model_dir is None) == (a.chat_template_file is None):
        usage_error("give exactly one of MODEL_DIR and --chat-template-file")

    src, cfg = load_template(a)

    if a.date is not None:
        try:
            now = datetime.datetime.strptime(a.date, "%Y-%m-%d")
        except ValueError:
            usage_error("--date %r is not YYYY-MM-DD" % a.date)
    else:
        now = datetime.datetime.now()

    req = load_json(a.request)
    if not isinstance(req, dict):
        usage_error("%s: the request is not a JSON object" % a.request)
    if "messages" not in req:
        usage_error("%s: the request has no messages" % a.request)
    variables = {
        "messages": req["messages"],
        "tools": req.get("tools"),
        "add_generation_prompt": not a.no_generation_prompt,
    }
    for key, flag in (("bos_token", a.bos_token), ("eos_token", a.eos_token)):
        v = flag if flag is not None else token_text(cfg.get(key))
        if v is not None:
            variables[key] = v
    kwargs = req.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            usage_error("%s: chat_template_kwargs is not an object" % a.request)
        for k, v in kwargs.items():
            if k in ("messages", "tools", "add_generation_prompt"):
                usage_error("%s: chat_template_kwargs may not set %r" % (a.request, k))
            variables[k] = v  # as transformers, a kwarg overrides bos_token/eos_token

    try:
        out = make_env(now).from_string(src).render(**variables)
    except Exception as e:  # TemplateError, TypeError, UndefinedError, SecurityError, ...
        sys.stderr.write("template error: %s\n" % e)
        sys.exit(1)
    sys.stdout.buffer.write(out.encode("utf-8"))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
