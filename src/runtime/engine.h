/* Engine and session internals shared by the runtime files (not public). */
#ifndef MS_RUNTIME_ENGINE_H
#define MS_RUNTIME_ENGINE_H

#include "moestream.h"
#include "base/log.h"
#include "models/family.h"

#define MS_MAX_STOP 16
/* Positions a sliding-window layer keeps beyond its window, so a session can
 * rewind (ms_session_truncate) that far without losing keys it still needs. */
#define MS_REWIND_SLACK 256
/* Positions per attention block (and per forward call of a family that is
 * not layer-major). */
#define MS_MAX_BATCH 256
/* Most positions per layer-major prefill call (ms_engine_opts.span). */
#define MS_MAX_SPAN 16384

/* Working memory kept free beyond what the engine counts (dense weights, KV
 * cache, prefill span, expert cache): the tokenizer, scratch that grows,
 * page cache: 256 MB and a 20th of what is available, at most an eighth of
 * it (at least 32 MB), so small limits still leave room for experts. */
uint64_t ms_mem_reserve(uint64_t avail);
/* Bytes of one layer's top-k experts (0 for a dense model): the least an
 * expert cache must hold. */
uint64_t ms_topk_bytes(const ms_model *m);
/* The smallest memory limit that leaves `need` bytes beside its reserve. */
uint64_t ms_mem_smallest(uint64_t need);

struct ms_engine {
    ms_checkpoint *ck;
    const ms_family *family;
    ms_model *model;
    ms_model_info info;
    int32_t stop_ids[MS_MAX_STOP];
    int64_t default_ctx;
    int64_t span_opt;        /* --prefill-span as given (0: sized from memory) */
    int placement_opt;       /* --experts as given (enum ms_placement) */
    ms_kvfmt kv_fmt;         /* sessions' default KV cache format */
    int n_threads;
    uint64_t dense_bytes;    /* resident weights, embeddings included */
    uint64_t embed_bytes;    /* of which embeddings (one row per token: not pinned) */
    ms_span *dense;          /* the dense weights' whole 2 MiB regions (plan_pinning; pinned
                              * when experts stream) */
    int n_dense;
    uint64_t pin_bytes;      /* their bytes: the resident figure of the memory plan */
    uint64_t pinned_bytes;
    FILE *trace;             /* expert routing trace, or NULL */
    ms_chat_template *chat_template; /* the folder's (or the file's), NULL: none */
    ms_logger log;           /* the caller's notices function (none when quiet) */
    ms_progress_fn progress; /* the caller's progress function, or NULL */
    void *progress_user;
    ms_stage_link link;      /* the stages after this one (link.send NULL: none) */
    uint64_t next_sid;       /* ms_session_id of the next session opened */
};

/* A forward call of sessions ss (one, or f->n_seq of a batched step) over
 * the whole model: the family's forward, or, when the engine is the first
 * of a pipeline, its layers, the other stages through the link (in
 * micro-batches) and the head (runtime/stage.c). */
int ms_stage_forward(ms_engine *eng, const ms_fwd *f, ms_session *const *ss, ms_err *err);

/* The engine behind a session (the session struct is private to session.c). */
const ms_engine *ms_session_engine(const ms_session *s);

/* KV cache bytes per position of the full-attention layers in format f
 * (sliding-window layers keep a fixed ring), of the model's stage. */
int64_t ms_kv_bytes_per_token(const ms_model *m, ms_kvfmt f);

/* A checkpoint folder bound in check-only mode (nothing copied or pinned,
 * every tensor checked and counted): what inspect reports and the pipeline
 * splits by (inspect.c). ms_check_open closes what it opened on failure;
 * ms_check_close takes a zeroed or opened one. */
typedef struct ms_checked {
    ms_checkpoint *ck;
    const ms_family *fam;
    ms_binder b;
    ms_model *m;
} ms_checked;
int ms_check_open(const char *model_dir, ms_checked *c, ms_err *err);
void ms_check_close(ms_checked *c);

/* Reads the stop/bos ids from generation_config.json (else config.json). */
int ms_engine_read_special_ids(ms_engine *eng, ms_err *err);

#endif
