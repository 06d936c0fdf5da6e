/* Built-in chat formats, rendered in C per family, used only for folders
 * without a chat template (template.c renders the checkpoint's own), and
 * the parser that splits a model's output back into reasoning and answer.
 *
 * Each renderer reproduces the checkpoint's own chat_template byte for byte
 * for conversations of system / user / assistant messages (tests compare
 * with Jinja's rendering of the shipped templates):
 *  - gpt_oss: Harmony. A system message with identity, knowledge cutoff,
 *    current date, reasoning effort and the valid channels; the first
 *    system/developer message becomes a developer "# Instructions" message;
 *    past assistant turns keep only their final channel ("<|end|>"); the
 *    generation prompt is "<|start|>assistant". <|return|> and <|call|> end a
 *    response, <|end|> only a message.
 *  - qwen3_moe: ChatML; reasoning of turns before the last user query is
 *    dropped; enable_thinking=false adds an empty <think></think>.
 *  - deepseek_v3: BOS, the system prompt, <｜User｜>/<｜Assistant｜> turns.
 *  - longcat_flash: <longcat_system>/<longcat_user>/<longcat_assistant>,
 *    past answers closed by </longcat_s>; thinking on appends " /think_on"
 *    to the last user turn and opens <longcat_think>. No BOS.
 * Tool calls are not rendered (refused with an error). */
#ifndef MS_RUNTIME_CHAT_H
#define MS_RUNTIME_CHAT_H

#include "moestream.h"

#endif
