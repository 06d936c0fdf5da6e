/* The binder: the one place where a family turns checkpoint tensors into
 * weight views, and the L0 check that comes with it.
 *
 * A family's load function asks the binder for every tensor it needs, with
 * the expected shape and dtypes. The binder never stops at the first
 * problem: it records each missing, mis-typed or mis-shaped tensor by name,
 * marks the tensors it handed out, and at the end lists every tensor that
 * nobody asked for (unless the family declared it knowingly ignored). The
 * same walk serves `inspect` (report) and engine open (refuse on problems).
 *
 * Views point into the checkpoint's mappings; small vectors (norms, biases,
 * sinks) are widened once to float32 into the caller's arena. When a binder
 * runs in check-only mode, views are still filled (pointers are cheap) but
 * vectors are not copied. */
#ifndef MS_WEIGHTS_BIND_H
#define MS_WEIGHTS_BIND_H

#include <stdio.h>

#include "base/arena.h"
#include "format/checkpoint.h"
#include "kernels/kernels.h"

/* Dense weights are touched every token and pinned when experts stream;
 * embeddings are dense too but touched one row per token, so left to the
 * page cache; routed experts go through the expert store. */
typedef enum ms_role { MS_ROLE_DENSE = 0, MS_ROLE_EXPERT = 1, MS_ROLE_EMBED = 2 } ms_role;

/* Dtype masks for "any of these". */
#define MS_DT(d) (1u << (d))
#define MS_DT_FLOAT (MS_DT(MS_DTYPE_F32) | MS_DT(MS_DTYPE_BF16) | MS_DT(MS_DTYPE_F16))

/* Where a view's bytes live in the checkpoint (for readers that do not use
 * the mapping, e.g. the expert cache). */
typedef struct ms_span {
    int file;               /* shard index, -1 when unused */
    uint64_t offset, nbytes;
    const char *tensor;     /* the tensor these bytes belong to (for errors) */
    uint64_t tensor_off;    /* file offset where that tensor's data starts */
} ms_span;

/* A tensor a family asks for, as recorded in collect mode (synth). */
typedef struct ms_tensor_spec {
    char name[192];
    ms_dtype dtype;
    int n_dims;
    int64_t shape[4];
    ms_role role;
} ms_tensor_spec;

typedef struct ms_binder {
    const ms_checkpoint *ck;
    /* collect mode: no tensors are read; every request is recorded with the
     * dtype a release would store (synth writes them) */
    int collect;
    int collect_fp8;        /* linear weights as F8_E4M3 + weight_scale_inv */
    ms_dtype collect_scale; /* dtype of weight_scale_inv */
    ms_tensor_spec *specs;
    int n_specs, cap_specs;
    ms_arena *arena;        /* receives widened vectors; set by the family once its
                             * model exists; unused in check-only mode */
    int check_only;
    int skip;               /* tensors of another pipeline stage: checked, not bound */
    int32_t fp8_block[2];   /* weight_block_size for F8_E4M3 weights; rows 1 and cols 0:
                             * one scale per output row (per channel) */
    const char *fp8_scale;  /* name suffix of their scales: "_scale_inv" (DeepSeek's fp8
                             * quant_method), "_scale" (compressed-tensors) */

    /* results */
    int n_problems;
    char **problems;        /* "missing tensor X", ... */
    int n_notes;
    char **notes;           /* accepted, but worth saying (inspect prints them) */
    int64_t n_used;
    uint8_t *used;          /* per tensor ordinal: handed out */
    uint8_t *ignored;       /* per tensor ordinal: knowingly unused */
    uint64_t bytes[3];      /* per ms_role */
    ms_span *dense;         /* spans of MS_ROLE_DENSE tensors (for pinning) */
    int n_dense, cap_dense;
    int64_t dtype_count[MS_DTYPE_COUNT];
    uint64_t dtype_bytes[MS_DTYPE_COUNT];
} ms_binder;

int ms_binder_init(ms_binder *b, const ms_checkpoint *ck, int check_only, ms_err *err);

/* Reads the FP8 scheme of a config's quantization_config: quant_method
 * "fp8" (DeepSeek, Qwen3-FP8: weight_scale_inv per weight_block_size block,
 * 128x128 when absent) or "compressed-tensors" float-quantized (GLM-4.5-FP8
 * and llm-compressor's FP8: weight_scale per output channel or per
 * block_structure block, activations quantised dynamically or not at all);
 * gpt-oss's "mxfp4" is its family's to bind. Anything else is refused with
 * the key that differs. */
int ms_binder_config(ms_binder *b, const json_t *config, ms_err *err);

/* A binder that records the tensors a family asks for instead of reading them. */
int ms_binder_init_collect(ms_binder *b, const ms_checkpoint *ck, int fp8, ms_dtype scale,
                           ms_err *err);
void ms_binder_free(ms_binder *b);

/* Adds a problem line (printf-style). Families use it for config-level
 * inconsistencies found while binding. */
void ms_bind_problem(ms_binder *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Looks up `name`, checks its dtype is in `dtypes` and its shape equals
 * shape[0..n_dims); records a problem and returns NULL otherwise. */
const ms_tensor_info *ms_bind_tensor(ms_binder *b, ms_role role, const char *name,
                                     uint32_t dtypes, int n_dims, const int64_t *shape);

/* A linear layer "<prefix>.weight" [rows][cols]: F32/BF16/F16, or F8_E4M3
 * with "<prefix>.weight_scale_inv" [ceil(rows/br)][ceil(cols/bc)] in
 * F32/BF16/F16. Fills *m, and span[0..1] (weights, scales; file -1 when
 * absent) when span is not NULL. Returns 0 when bound, -1 when not: a problem
 * was recorded, or (collect mode) the tensor was only recorded for the
 * writer. */
int ms_bind_linear(ms_binder *b, ms_role role, const char *prefix, int64_t rows,
                   int64_t cols, ms_mat *m, ms_span *span);

/* A matrix "name" [rows][cols] that releases keep unquantised next to FP8
 * linears (embeddings, lm_head, routers): F32/BF16/F16 accepted, never
 * F8_E4M3; in collect mode recorded with the dtype the release stores,
 * `release`. Fills *m; 0 when bound, -1 when a problem was recorded. */
int ms_bind_plain_linear(ms_binder *b, ms_role role, const char *name, int64_t rows,
                         int64_t cols, ms_dtype release, ms_mat *m);

/* ms_bind_vector for a vector the release stores in a known dtype (e.g. an
 * F32 e_score_correction_bias): recorded as `release` in collect mode. */
int ms_bind_plain_vector(ms_binder *b, ms_role role, const char *name, int64_t n,
                         ms_dtype release, float **out);

/* A float vector of n elements (any float dtype), widened into the arena.
 * *out stays NULL in check-only mode or on a problem. */
int ms_bind_vector(ms_binder *b, ms_role role, const char *name, int64_t n, float **out);

/* Same for a [rows][cols] float tensor (e.g. per-expert biases). */
int ms_bind_matrix_f32(ms_binder *b, ms_role role, const char *name, int64_t rows,
                       int64_t cols, float **out);

/* Fused MXFP4 experts: "<blocks>" U8 [E][rows][cols/32][16] and "<scales>"
 * U8 [E][rows][cols/32]. Fills m[e] (and span[e] with the byte ranges of
 * expert e's blocks and scales, 2 spans per expert) for every expert. */
int ms_bind_mxfp4_experts(ms_binder *b, const char *blocks, const char *scales,
                          int64_t n_experts, int64_t rows, int64_t cols, ms_mat *m,
                          ms_span *span);

/* Marks every tensor whose name starts with prefix as knowingly unused. */
void ms_bind_ignore_prefix(ms_binder *b, const char *prefix);

/* The binder seen from the families (its fields stay bind.c's): problems
 * recorded so far, whether it only collects the tensor list (synth,
 * nothing to bind), and the arena bound tensors are widened into. */
int ms_bind_problems(const ms_binder *b);
int ms_bind_collecting(const ms_binder *b);
void ms_binder_set_arena(ms_binder *b, ms_arena *arena);

/* Skip mode, for the layers of other pipeline stages: requests are checked
 * (L0 holds for the whole checkpoint on every stage) and marked used, but
 * nothing is copied, counted as resident or pinned, and families register
 * no experts (ms_bind_skipping). */
void ms_binder_skip(ms_binder *b, int on);
int ms_bind_skipping(const ms_binder *b);

/* Records every tensor neither used nor ignored as "unexpected". Call once,
 * after the family bound everything. */
void ms_bind_finish(ms_binder *b);

/* Span of a tensor (shard, absolute offset, bytes). */
ms_span ms_span_of(const ms_tensor_info *t);

#endif
