/* Grammar-constrained decoding (grammar.c): JSON schemas compiled to byte
 * grammars, parse states, and token masks over an indexed vocabulary. The
 * interface front ends use is in moestream.h (ms_grammar_json,
 * ms_vocab_index_open, ms_gen_opts.grammar); ms_generate drives the state. */
#ifndef MS_RUNTIME_GRAMMAR_H
#define MS_RUNTIME_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "moestream.h"

typedef struct ms_gstate ms_gstate;

/* The framing of an XML-style tool call: call_open NAME name_end, then per
 * argument arg_open KEY key_end VALUE value_end, then call_close (values:
 * strings as text without "</", other types as JSON). */
typedef struct ms_xml_syntax {
    const char *call_open, *name_end, *arg_open, *key_end, *value_end, *call_close;
} ms_xml_syntax;
extern const ms_xml_syntax ms_xml_qwen3_coder, ms_xml_glm45;

/* An XML-style call (Qwen3-Coder's, GLM-4.5's) to one of n tools (names,
 * parameters schemas), after `open` (may be NULL: what closes an opened
 * reasoning). */
int ms_grammar_xml_calls(const ms_xml_syntax *sx, int n, const char *const *names,
                         const char *const *schemas, const char *open, ms_grammar **out,
                         ms_error *err);

int ms_gstate_new(const ms_grammar *g, ms_gstate **out, ms_error *err);
void ms_gstate_free(ms_gstate *s);
/* Feeds bytes; 1 when the grammar takes them all (the state moved), 0 when
 * it does not (the state is unchanged). */
int ms_gstate_feed(ms_gstate *s, const char *bytes, size_t n);
/* A whole document has been read (the output may stop here). */
int ms_gstate_complete(const ms_gstate *s);
/* More bytes could still be taken. */
int ms_gstate_more(const ms_gstate *s);
/* allow[id] = 1 for every id of the index whose bytes the state takes. */
int ms_gstate_mask(ms_gstate *s, const ms_vocab_index *v, uint8_t *allow, ms_error *err);
/* Feeds the bytes of token id (1: taken). */
int ms_vocab_index_feed(const ms_vocab_index *v, ms_gstate *s, int32_t id);
/* Ids the index covers (the tokenizer's). */
int32_t ms_vocab_index_n(const ms_vocab_index *v);

#endif
