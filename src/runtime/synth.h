/* Synthetic checkpoints: random weights in the exact on-disk layout a family's
 * release uses (names, dtypes, shapes, sharding with an index), written at
 * disk speed, so performance can be measured at real sizes. The tensor list
 * comes from the family's own binding walk (binder collect mode), so synth
 * and the loader cannot disagree. */
#ifndef MS_RUNTIME_SYNTH_H
#define MS_RUNTIME_SYNTH_H

typedef struct ms_builtin_config {
    const char *name;      /* e.g. "gpt-oss-20b" */
    const char *config;    /* config.json text */
    const char *gen;       /* generation_config.json text, or NULL */
} ms_builtin_config;

/* Generated from configs/ (tools/embed_configs.sh); ends with a NULL name. */
extern const ms_builtin_config ms_builtin_configs[];

#endif
