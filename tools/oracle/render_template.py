#!/usr/bin/python3
"""Renders a checkpoint's chat_template with Jinja, the way transformers'
apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, raise_exception, strftime_now, a tojson that
keeps non-ASCII), for comparison with moestream's C renderers.

CLI: render_template.py TOKENIZER_CONFIG.json MESSAGES.json [--no-generation-prompt]
                        [--enable-thinking true|false]
Messages use moestream's keys (role, content, reasoning); reasoning is passed
as both reasoning_content (Qwen3) and thinking (gpt-oss).
"""
import argparse
import json
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(msg):
    raise RuntimeError(msg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("messages")
    ap.add_argument("--no-generation-prompt", action="store_true")
    ap.add_argument("--enable-thinking", choices=["true", "false"])
    a = ap.parse_args()
    cfg = json.load(open(a.config, encoding="utf-8"))
    tmpl = cfg["chat_template"]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    env.globals["raise_exception"] = raise_exception
    msgs = []
    for m in json.load(open(a.messages, encoding="utf-8")):
        d = {"role": m["role"], "content": m["content"]}
        if m.get("reasoning") is not None:
            d["reasoning_content"] = m["reasoning"]
            d["thinking"] = m["reasoning"]
        msgs.append(d)
    special = {}
    for k in ("bos_token", "eos_token"):
        v = cfg.get(k)
        special[k] = v["content"] if isinstance(v, dict) else (v or "")
    kw = {}
    if a.enable_thinking:
        kw["enable_thinking"] = a.enable_thinking == "true"
    out = env.from_string(tmpl).render(messages=msgs, add_generation_prompt=not a.no_generation_prompt,
                                       **special, **kw)
    sys.stdout.write(out)


if __name__ == "__main__":
    main()
