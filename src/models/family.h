/* The model-family interface.
 *
 * A family turns a checkpoint into a model (binding every tensor through the
 * binder, which doubles as the L0 check) and runs a forward pass over a
 * block of consecutive positions. Every family's model struct starts with
 * ms_model, which the runtime reads without knowing the family; the rest is
 * the family's own (its own hyper-parameters, no union of all families).
 *
 * Adding a family: write src/models/<model_type>.c describing the graph with
 * the shared blocks (norm, rope, attention, routers, MoE FFN), export its
 * ms_family, and list it in registry.c. */
#ifndef MS_MODELS_FAMILY_H
#define MS_MODELS_FAMILY_H

#include <stdio.h>

#include "base/arena.h"
#include "base/trace.h"
#include "format/checkpoint.h"
#include "weights/bind.h"
#include "weights/experts.h"

#include "models/kvcache.h"

/* Scratch owned by the caller of a forward call, grown on demand by the
 * layers that need it (attention's per-worker tiles and partial states). */
typedef struct ms_scratch {
    float *p;
    int64_t n; /* floats */
} ms_scratch;

/* At least n floats of s (the old contents are not kept); NULL with err. */
float *ms_scratch_get(ms_scratch *s, int64_t n, ms_err *err);

typedef struct ms_timers {
    double attn, experts, head, other;   /* seconds */
    double attn_kv;                      /* of attn: over the KV cache */
    int64_t kv_bytes;                    /* cache bytes attended (attend.h) */
    double attn_flops;                   /* their multiply-adds, 2 operations each */
    double stages;                       /* pipeline: waiting for the other stages */
} ms_timers;

/* One forward call: n consecutive positions pos0..pos0+n-1 of one sequence
 * (n <= max_batch), or, with n_seq > 1, n rows of several sequences (a
 * batched decode step): row t is position pos[t] of sequence seq[t], whose
 * caches are kvs[seq[t]]. A row's result never depends on the other rows. */
typedef struct ms_fwd {
    const int32_t *ids;       /* [n] */
    int64_t n, pos0;
    ms_kv *kv;                /* [n_layers] (one sequence) */
    int n_seq;                /* 0 or 1: one sequence */
    const int *seq;           /* [n] */
    const int64_t *pos;       /* [n] */
    ms_kv *const *kvs;        /* [n_seq][n_layers] */
    ms_scratch *scratch;      /* attention's work area */
    float *logits;            /* [n][vocab] when logits_all, [n_head][vocab] with
                                 head_rows, else [vocab] (last row) */
    int logits_all;
    const int64_t *head_rows; /* NULL, or the rows (ascending) whose logits are made */
    int64_t n_head;
    ms_trace *trace;          /* NULL unless dumping named intermediates */
    /* called after each layer with the layers done (layer-major families);
     * NULL: none */
    void (*on_layer)(void *ctx, int layers_done, int n_layers);
    void *on_layer_ctx;
    const volatile int *cancel; /* polled after each layer: set, the call fails
                                   (MS_E_CANCELLED) with the cache written ahead */
    ms_timers *timers;
    /* Pipeline stages (runtime/stage.c). x_in [n][d]: the residual entering
     * this model's first layer, instead of embedding ids; x_out [n][d]:
     * receives the residual after its last layer, and no head runs;
     * head_only: x_in is the residual after the model's last layer, only
     * the final norm and the lm_head run. */
    const float *x_in;
    float *x_out;
    int head_only;
} ms_fwd;

/* The position and the layer-l cache of row t of a forward call. */
static inline int64_t ms_fwd_pos(const ms_fwd *f, int64_t t)
{
    return f->n_seq > 1 ? f->pos[t] : f->pos0 + t;
}

static inline ms_kv *ms_fwd_kv(const ms_fwd *f, int l, int64_t t)
{
    return f->n_seq > 1 ? &f->kvs[f->seq[t]][l] : &f->kv[l];
}

typedef struct ms_model_opts {
    int max_batch;            /* most positions per forward call */
    int check_only;           /* bind for inspection only: no buffers, no copies */
    /* A pipeline stage: only layers [stage_first, stage_end) are bound and
     * run (0, 0: all), and, with stage_no_ends, neither the embedding nor
     * the final norm and lm_head; the other layers are described and
     * checked, nothing more (ms_binder_skip). */
    int stage_first, stage_end, stage_no_ends;
} ms_model_opts;

struct ms_family;

typedef struct ms_model {
    const struct ms_family *family;
    ms_arena arena;           /* resident small tensors and scratch */
    int n_layers;
    int layer0, layer1;       /* the layers this model binds and runs (a pipeline stage) */
    int ends;                 /* it also holds the embedding, final norm and lm_head */
    int64_t d_model, vocab, max_ctx;
    int max_batch;            /* most positions per attention block (the scratch) */
    /* Most positions per forward call: a family whose loop runs each layer
     * over the whole call (layer-major, ms_decoder) takes up to max_span,
     * set by the engine from memory; the others take max_batch. */
    int max_span;
    int64_t span_row_bytes;   /* bytes per position of a span beyond max_batch; 0 = none */
    ms_scratch span;          /* those buffers, grown on demand */
    int64_t *kv_row;          /* [n_layers] elements per position */
    int *kv_group;            /* [n_layers] elements per FP8 scale (a head) */
    int64_t *kv_plane;        /* [n_layers] elements per plane of the cache (kvcache.h) */
    int64_t *kv_kplanes;      /* [n_layers] leading planes that hold keys GQA reads by
                               * tiles (its KV heads; MLA: 0) */
    int64_t *kv_window;       /* [n_layers] 0 = full context, else window */
    ms_expert_store *experts; /* NULL for dense models */
    int prefetch;             /* decode: predict and prefetch the next layer's experts */
    int prefetch_early;       /* ... and this many of them already before the MoE */
    int n_experts, n_experts_used;
} ms_model;

/* Whether layer l belongs to this model's stage. */
static inline int ms_model_has_layer(const ms_model *m, int l)
{
    return l >= m->layer0 && l < m->layer1;
}

typedef struct ms_family {
    const char *model_type;
    ms_dtype fp8_scale_dtype;   /* weight_scale_inv dtype of the release's FP8 files */
    /* Reads config.json, binds every tensor through b (problems are recorded
     * in b, not returned), allocates the model. Returns -1 with err only for
     * errors that stop the walk (unreadable config, out of memory). */
    int (*open)(const ms_checkpoint *ck, ms_binder *b, const ms_model_opts *opts,
                ms_model **out, ms_err *err);
    void (*close)(ms_model *m);
    /* Prints every config dimension the family uses, one "key: value" per line. */
    void (*describe)(const ms_model *m, FILE *out);
    int (*forward)(ms_model *m, const ms_fwd *f, ms_err *err);
} ms_family;

/* The families this binary runs (listed in registry.c). */
extern const ms_family ms_family_gpt_oss;
extern const ms_family ms_family_qwen3_moe;
extern const ms_family ms_family_deepseek_v3;
extern const ms_family ms_family_longcat_flash;
extern const ms_family ms_family_glm4_moe;

/* The family for a checkpoint's config.json model_type; an error listing
 * the supported ones otherwise. */
const ms_family *ms_family_find(const ms_checkpoint *ck, ms_err *err);

/* Allocates the ms_model part of a family model of `size` bytes (zeroed),
 * with per-layer KV tables for n_layers. */
void *ms_model_alloc(size_t size, const ms_family *fam, int n_layers, ms_err *err);

/* What a family's open knows once its config is read: its struct (`tmp`,
 * ms_model first, of `size` bytes, hyper-parameters filled) and the
 * dimensions every model has. */
typedef struct ms_model_spec {
    const void *tmp;
    size_t size;
    const ms_family *family;
    int n_layers, n_experts, n_used;
    int64_t d_model, vocab;
    int64_t max_ctx;          /* max_position_embeddings; 0: as tmp's ms_model has it */
} ms_model_spec;

/* The common start of a family's open: allocates the model, copies tmp into
 * it, fills the shared fields (dimensions, batch size, experts) and points
 * the binder at the model's arena (unless check-only). */
void *ms_model_create(const ms_model_spec *spec, const ms_model_opts *opts, ms_binder *b,
                      ms_err *err);
void ms_model_free(ms_model *m);

#endif
