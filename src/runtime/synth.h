/* Synthetic checkpoints: random weights in the exact on-disk layout a family's
 * release uses (names, dtypes, shapes, sharding with an index), written at
 * disk speed, so performance can be measured at real sizes. The tensor list
 * comes from the family's own binding walk (binder collect mode), so synth
 * and the loader cannot disagree. */
#ifndef MS_RUNTIME_SYNTH_H
#define MS_RUNTIME_SYNTH_H

#include <stdint.h>

typedef struct ms_builtin_config {
    const char *name;      /* e.g. "gpt-oss-20b" */
    const char *config;    /* config.json text */
    const char *gen;       /* generation_config.json text, or NULL */
} ms_builtin_config;

/* Generated from configs/ (tools/embed_configs.sh); ends with a NULL name. */
extern const ms_builtin_config ms_builtin_configs[];

/* An FP8 e4m3fn weight code spread as a trained checkpoint's are, from a
 * 16-bit uniform u: the block's scale maps its largest |w| to 448 and few
 * codes fall below 2^-6 (subnormals: 0.02% here; 0.009-0.01% in the FP8
 * fixtures, quantised by the upstream code). Uniform random bytes would
 * make one in sixteen subnormal, which some CPUs multiply ~200 cycles
 * slower (docs/perf.md, "FP8 on Intel"), so benchmarks over them would
 * time a case real weights do not have. */
uint8_t ms_synth_e4m3(uint16_t u);

#endif
