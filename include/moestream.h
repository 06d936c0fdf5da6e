/* moestream public API.
 *
 * An engine is a loaded model (read-only after open: config, resident
 * weights, expert store). A session is one timeline over an engine: its KV
 * cache, its position and the logits of its last evaluated token. Front ends
 * (CLI, server, bench) see only this header.
 *
 * Ownership: ms_engine_open/ms_engine_close and ms_session_open/
 * ms_session_close pair up; close functions accept NULL. A session must be
 * closed before its engine. Errors are returned as a status (0 = ok,
 * negative = failure) with an ms_error that says what was expected and found.
 */
#ifndef MOESTREAM_H
#define MOESTREAM_H

#include <stdint.h>
#include <stdio.h>

#define MS_VERSION "0.1.0"

enum ms_status {
    MS_OK = 0,
    MS_E_IO = -1,           /* a file could not be opened or read */
    MS_E_FORMAT = -2,       /* a file is malformed (header, JSON, shapes) */
    MS_E_UNSUPPORTED = -3,  /* well formed, but not something we run */
    MS_E_NOMEM = -4,
    MS_E_ARG = -5,          /* bad argument from the caller */
    MS_E_CONTEXT_FULL = -6, /* the KV cache has no room for the request */
    MS_E_MISMATCH = -7,     /* L0: checkpoint does not match its family */
    MS_E_CANCELLED = -8,    /* the caller's cancel flag was set (ms_session_set_cancel) */
};

typedef struct ms_error {
    int code;       /* one of enum ms_status */
    char msg[1024]; /* one sentence: object, expected, found */
} ms_error;

typedef struct ms_engine ms_engine;
typedef struct ms_session ms_session;

/* Where routed experts live while the model runs (speed only, never math). */
enum ms_placement {
    MS_PLACE_AUTO = 0,   /* page cache when the model fits in memory, else cache */
    MS_PLACE_PAGECACHE,  /* experts used in place from the file mapping */
    MS_PLACE_CACHE,      /* engine-owned expert cache within a byte budget */
};

/* Format of the KV cache. F32 is the reference; BF16 halves its bytes
 * (what the upstream models run with in practice); FP8 (e4m3 with a scale
 * per head) quarters them, for the longest contexts. AUTO: f32 while the
 * context fits the KV budget (an eighth of the memory available), else
 * bf16, said once on stderr. */
enum ms_kv_format { MS_KVCACHE_AUTO = 0, MS_KVCACHE_F32, MS_KVCACHE_BF16, MS_KVCACHE_FP8 };

/* Progress of a long step, for a front end to show: `what` is "loading"
 * (done/total: bytes of dense weights pinned), "prefill" (prompt positions
 * through the layers) or "synth" (bytes written); seconds since the step
 * began. A step's last report has done == total. */
typedef struct ms_progress {
    const char *what;
    int64_t done, total;
    double seconds;
} ms_progress;
typedef void (*ms_progress_fn)(void *user, const ms_progress *p);

/* Engine options. Zero-initialise, then set what you need. */
typedef struct ms_engine_opts {
    int n_threads;       /* compute threads, 1..64 (process-wide); 0 = the CPUs we may run on */
    int64_t ctx;         /* default context for sessions; 0 = the config's maximum,
                          * capped by the KV budget */
    int kv_format;       /* enum ms_kv_format of sessions' caches */
    int quiet;           /* no notices at all, even with a log function */
    /* Notices (a size chosen for the user, a fallback taken): one sentence
     * each, without a newline, passed here; the library never prints. NULL
     * drops them. */
    void (*log)(void *user, const char *line);
    void *log_user;
    ms_progress_fn progress; /* loading and prefill progress; NULL: none */
    void *progress_user;
    int placement;       /* enum ms_placement */
    int64_t ram;         /* expert cache budget in bytes; 0 = derived from memory */
    int cache_slots;     /* > 0: expert cache of exactly that many experts (tests, tuning) */
    int io_threads;      /* 0 = io_uring; > 0 = that many pread threads */
    int reads;           /* experts of a layer read at once (0 = 2) */
    int span;            /* most prompt positions run through a layer at once (each layer's
                          * experts are read once per span); 0 = sized from memory */
    int no_prefetch;     /* disable decode prefetch of the next layer's experts */
    int prefetch_early;  /* decode: also predict this many of the next layer's experts from
                          * the residual before a layer's MoE, read while it computes */
    int buffered;        /* never use O_DIRECT for expert reads */
    const char *trace_path; /* write the expert routing trace here */
    /* Per-expert routing counts kept across runs (engine-cache placement
     * only): read at open to seed eviction and to read the experts used far
     * above their layer's average into the cache before the first prompt,
     * written back at close. A file of another model is refused with a
     * notice and rewritten. NULL: none (each run starts from nothing). */
    const char *expert_usage_file;
    int precision;       /* enum ms_precision (process-wide, like n_threads) */
    const char *chat_template_file; /* a Jinja file used instead of the folder's template */
    /* A pipeline stage (see "Pipeline stages" below): the engine binds and
     * runs only layers [stage_first, stage_end) (0, 0: all of them) and,
     * with stage_no_ends, neither the embedding nor the final norm and
     * lm_head; link (copied at open) carries the residual to the stages
     * after it. NULL: this engine runs the whole model or serves a stage
     * through ms_stage_eval. */
    int stage_first, stage_end, stage_no_ends;
    const struct ms_stage_link *link;
} ms_engine_opts;

/* Arithmetic of the products. EXACT keeps float32 activations (results
 * within float32 rounding of the reference, the validated default). FAST
 * rounds activations to bf16 for BF16, MXFP4 and FP8 weights and uses the
 * CPU's bf16 dot products (AVX512-BF16). INT8 quantises activations to
 * int8 per block of 32 columns for MXFP4 weights (llama.cpp's Q8_0) and
 * uses the CPU's byte dot products (AVX512-VNNI, else AVX2's vpmaddubsw);
 * other formats stay exact. Both
 * are faster and further from the reference (docs/perf.md gives the
 * measured deviation) and refused where the CPU lacks the instructions. */
enum ms_precision { MS_PRECISION_EXACT = 0, MS_PRECISION_FAST = 1, MS_PRECISION_INT8 = 2 };

/* What a front end needs to know about a loaded model. Owned by the engine. */
typedef struct ms_model_info {
    const char *family;       /* model_type, e.g. "gpt_oss" */
    int32_t vocab_size;
    int64_t max_ctx;          /* max_position_embeddings from config */
    int64_t ctx;              /* sessions' default context */
    const char *kv_format;    /* their KV cache format: "f32", "bf16" or "fp8" */
    int64_t prefill_span;     /* most prompt positions run through a layer at once */
    int32_t pass_rows;        /* most rows of several sessions in one pass over the
                               * weights (ms_session_eval_batch, _eval_many) */
    int32_t n_stop;
    const int32_t *stop_ids;  /* eos ids from generation_config/config */
    int32_t bos_id;           /* -1 when none */
} ms_model_info;

int ms_engine_open(const char *model_dir, const ms_engine_opts *opts,
                   ms_engine **out, ms_error *err);
void ms_engine_close(ms_engine *eng);
const ms_model_info *ms_engine_info(const ms_engine *eng);
/* The compute threads the engine runs with. */
int ms_engine_threads(const ms_engine *eng);

/* Session options. Zero-initialise. */
typedef struct ms_session_opts {
    int64_t ctx;           /* KV capacity in tokens; 0 = engine default */
    int kv_format;         /* enum ms_kv_format; AUTO = the engine's */
    const char *dump_dir;  /* write named intermediates here (tests); NULL = off */
} ms_session_opts;

int ms_session_open(ms_engine *eng, const ms_session_opts *opts,
                    ms_session **out, ms_error *err);
void ms_session_close(ms_session *s);

/* Number of positions held in the KV cache (the next token's position). */
int64_t ms_session_pos(const ms_session *s);
int64_t ms_session_ctx(const ms_session *s);
/* The format of its KV cache: "f32", "bf16" or "fp8". */
const char *ms_session_kv_format(const ms_session *s);

/* Forget positions >= keep (0 <= keep <= pos); logits become undefined until
 * the next eval. */
int ms_session_truncate(ms_session *s, int64_t keep, ms_error *err);

/* Feeds n tokens at positions pos..pos+n-1. If logits is not NULL it
 * receives [n][vocab] float32 rows (row t predicts the token after ids[t]);
 * in all cases the last row is kept and returned by ms_session_logits.
 * Fails with MS_E_CONTEXT_FULL, before touching the cache, when
 * pos + n > ctx. */
int ms_session_eval(ms_session *s, const int32_t *ids, int64_t n,
                    float *logits, ms_error *err);
/* A flag ms_session_eval polls after each layer (NULL: none; not with
 * pipeline stages). Once it is set, the call stops with MS_E_CANCELLED:
 * the session keeps the spans of the call already done, or holds nothing
 * where the stopped span had overwritten history a sliding-window layer
 * still needed. ms_session_eval_many and _eval_batch do not poll it. */
void ms_session_set_cancel(ms_session *s, const volatile int *flag);

/* One decode step of several sessions of one engine at once: ids[i] is
 * evaluated at session i's next position (each session appears once; at
 * most the engine's batch size). Every dense weight and every routed expert
 * of the step is read once for all of them, and each session's logits,
 * cache and position come out bit-identical to ms_session_eval of its id
 * alone. Refuses before evaluating anything if a session is full. */
int ms_session_eval_batch(ms_session *const *ss, const int32_t *ids, int n, ms_error *err);

/* Several sessions' tokens at once (prompts arriving together): session i
 * is fed counts[i] >= 1 tokens ids[i] at its next positions, in as few
 * passes over the weights as the engine's batch size allows, each pass
 * holding rows of several sessions. Each session's logits (those after its
 * last token), cache and position come out bit-identical to ms_session_eval
 * of its tokens alone. Refuses before evaluating anything if a session
 * would overflow its context. A session fed one token and others fed
 * prompts make one pass: decode steps need not wait for a newcomer's
 * prompt. */
int ms_session_eval_many(ms_session *const *ss, const int32_t *const *ids,
                         const int64_t *counts, int n, ms_error *err);
const float *ms_session_logits(const ms_session *s);

/* For benchmarks of long contexts: appends n positions whose keys and
 * values are pseudo-random (seeded, finite, of unit scale) without
 * evaluating anything, as if a prompt of n tokens had been read. What is
 * generated after them means nothing; only its speed does. Fails with
 * MS_E_CONTEXT_FULL when pos + n > ctx. */
int ms_session_fill_synthetic(ms_session *s, int64_t n, uint64_t seed, ms_error *err);

/* Makes the session hold exactly ids[0..n): keeps the longest prefix it
 * already holds (at most n - 1 tokens, so that the last one is evaluated),
 * drops the rest and evaluates the remainder. *reused (may be NULL) gets the
 * number of positions kept. Fails with MS_E_CONTEXT_FULL, before changing
 * anything, when n exceeds the context. */
int ms_session_sync(ms_session *s, const int32_t *ids, int64_t n, int64_t *reused,
                    ms_error *err);
/* The two halves of ms_session_sync, for evaluating a prompt in pieces:
 * shared counts the positions of ids the session already holds (at most
 * n - 1); reuse truncates the session to them (to 0 where sliding-window
 * layers cannot rewind that far) and says how many it kept, refusing a
 * prompt longer than the context. */
/* Bytes a session holds (its KV cache and scratch). */
int64_t ms_session_bytes(const ms_session *s);
int64_t ms_session_shared(const ms_session *s, const int32_t *ids, int64_t n);
/* The ids the session holds ([0, *n), *n its position); valid until it
 * changes. */
const int32_t *ms_session_ids(const ms_session *s, int64_t *n);

/* A session's cache in a file: the ids it holds, its KV cache and its last
 * logits (runtime/session_file.c). ms_session_load reads one back into a
 * session of the same engine, context and KV format, after which it is as
 * the saved one was (the same logits, the same next tokens); another model
 * (or the same folder with other weights), context or format are refused
 * from the header, naming what differs, with the session unchanged; a
 * damaged body is refused too and leaves the session empty (position 0).
 * ms_session_file_ids reads only the ids (caller frees), to match a prompt
 * without loading. With pipeline stages each stage keeps its layers' part
 * in a file of its own beside path (ms_stage_link.file): the first
 * engine's file, written last, holds the ids and logits; a stage's load
 * that fails leaves the session empty. ms_session_file_remove deletes a
 * session file and its stages' parts. */
int ms_session_save(const ms_session *s, const char *path, ms_error *err);
/* The same file built in memory (*data, *bytes; caller frees) at the speed
 * of a copy, and written later, on any thread, by ms_session_write_image
 * (which adds the checksum): a server saves a conversation this way
 * without holding up the others' decoding. Refused with a pipeline, and
 * with MS_E_NOMEM (nothing allocated) when the image would take more than
 * half the memory available (a memory cgroup's limit counted): write the
 * file directly then. */
int ms_session_image(const ms_session *s, void **data, size_t *bytes, ms_error *err);
int ms_session_write_image(const void *data, size_t bytes, const char *path, ms_error *err);
int ms_session_load(ms_session *s, const char *path, ms_error *err);
int ms_session_file_remove(const ms_engine *eng, const char *path, ms_error *err);
int ms_session_file_ids(const char *path, const ms_engine *eng, int32_t **ids, int64_t *n,
                        ms_error *err);
int ms_session_reuse(ms_session *s, const int32_t *ids, int64_t n, int64_t *kept, ms_error *err);

/* Per-session timing and traffic counters, accumulated since open. */
typedef struct ms_stats {
    int64_t n_prefill_tokens, n_decode_tokens;
    double t_prefill, t_decode;          /* seconds of wall time in eval */
    double t_attn, t_experts, t_head, t_other;
    /* attention over the KV cache (part of t_attn), the cache bytes it
     * read (each attended position's keys and values once per row) and its
     * arithmetic (per query head and position, a multiply-add per key and
     * per value dimension, counted as 2 operations) */
    double t_attn_kv;
    int64_t kv_bytes_read;
    double attn_flops;
    /* expert store, engine-wide since open. Each request is one of: a hit
     * (in memory, no read issued for it by anyone), a prefetch hit (read,
     * or being read, because a prefetch predicted it) or a miss (read on
     * demand). bytes_read counts demand and prefetch reads, prefetch_bytes
     * the second; the page-cache placement reads nothing itself (0). */
    int64_t expert_requests, expert_hits, expert_prefetch_hits, expert_misses;
    int64_t bytes_read, prefetch_bytes;
    int64_t prefetch_predicted, prefetch_correct, prefetch_issued;
    int64_t prefetch_wasted_bytes;
    double t_io_wait;
    double t_stages;   /* pipeline: waiting for the other stages (sending, receiving) */
} ms_stats;

/* One line: where experts live (policy, budget, slots, I/O backend). */
const char *ms_engine_placement(const ms_engine *eng);

/* What the benchmark needs to know about the expert tier. */
typedef struct ms_expert_info {
    int n_layers, n_experts, n_used;
    uint64_t expert_bytes;       /* one expert */
    uint64_t slot_bytes;         /* cache slot (aligned reads), 0 for the page cache */
    int slots;                   /* cache slots, 0 for the page cache */
    uint64_t dense_bytes;
} ms_expert_info;
int ms_engine_expert_info(const ms_engine *eng, ms_expert_info *out);

/* What the engine would choose if it opened with `mem` bytes available (a
 * memory limit or the machine's free memory), its context and options
 * (--experts, --prefill-span) otherwise as now: where the experts go and
 * the expert cache's budget. */
typedef struct ms_mem_plan {
    int placement;            /* MS_PLACE_PAGECACHE or MS_PLACE_CACHE */
    int fits;                 /* 0: the engine would refuse to open */
    uint64_t fixed_bytes;     /* dense weights, KV cache, reserve, prefill buffers */
    uint64_t cache_bytes;     /* the expert cache's budget (MS_PLACE_CACHE) */
    int64_t cache_slots;      /* experts it holds */
} ms_mem_plan;
int ms_engine_mem_plan(const ms_engine *eng, uint64_t mem, ms_mem_plan *out);

/* Disk bandwidth (bytes/s) reading n whole experts as the engine cache
 * reads them (O_DIRECT where the filesystem allows it, io_uring reads of
 * 4 MiB in order, 3 in flight, into registered buffers in huge pages),
 * `depth` experts queued at a time. The cache is not touched. */
int ms_engine_disk_probe(const ms_engine *eng, int n, int depth, double *bytes_per_s,
                         ms_error *err);
void ms_session_stats(const ms_session *s, ms_stats *out);

/* The expert store's counters (the expert_* fields of ms_stats, the rest
 * zero), for an engine without a session of its own (a pipeline stage). */
void ms_engine_stats(const ms_engine *eng, ms_stats *out);

/* Pipeline stages. A model can run as a chain of engines, each holding a
 * contiguous range of its layers (in one process or, through a transport
 * such as app/pipeline_mpi.c, in several): the first holds the embedding,
 * its layers and the head, and is the one sessions, samplers and front
 * ends use; the others only run their layers on the residual stream they
 * are sent (ms_stage_eval), with caches of their own per session. Results
 * are bit-identical to one engine running the whole model. */
typedef struct ms_stage_rows {
    int64_t n, d;              /* rows of the call, floats per row */
    int n_seq;                 /* sessions the call may touch */
    const uint64_t *sid;       /* [n_seq] their ids (ms_session_id) */
    const int64_t *ctx;        /* [n_seq] their contexts */
    const int32_t *kv_format;  /* [n_seq] their KV formats (enum ms_kv_format) */
    const int32_t *seq;        /* [n] row t is of session seq[t] ... */
    const int64_t *pos;        /* [n] ... at position pos[t] */
} ms_stage_rows;

/* How the first engine reaches the others. send passes a call's residual
 * x [n][d] after the first engine's layers on to the next stage; recv
 * returns into x the residual after the model's last layer of the oldest
 * call sent and not yet received. Up to in_flight calls (at least 1) are
 * sent before the first is received: a prompt or a batched step is split
 * into that many micro-batches so that the stages work at the same time.
 * closed says a session is gone (from any thread); its stages drop its
 * caches. */
/* file asks every other stage to save (MS_STAGE_SAVE), load (MS_STAGE_LOAD,
 * into a session of context ctx and format kv_format, made if it has none)
 * or remove (MS_STAGE_REMOVE) its part of session sid's cache in the file
 * `path` names (each stage its own file beside it); NULL where the link
 * cannot, and ms_session_save / load are refused with a pipeline. */
enum { MS_STAGE_SAVE = 1, MS_STAGE_LOAD, MS_STAGE_REMOVE };
typedef struct ms_stage_link {
    int (*send)(void *user, const ms_stage_rows *rows, const float *x, ms_error *err);
    int (*recv)(void *user, float *x, int64_t n, int64_t d, ms_error *err);
    void (*closed)(void *user, uint64_t sid);
    int (*file)(void *user, int op, uint64_t sid, int64_t ctx, int32_t kv_format,
                const char *path, ms_error *err);
    void *user;
    int in_flight;
} ms_stage_link;
/* The file of stage `stage`'s part of a session file: "PATH.stageN". */
int ms_stage_file_path(const char *path, int stage, char *out, size_t size);

/* A session's id, unique within its engine (what a stage keys its caches by). */
uint64_t ms_session_id(const ms_session *s);
/* A stage's work: x [rows->n][rows->d], the residual entering this
 * engine's first layer, becomes the residual after its last; the caches
 * are those of ss[0..rows->n_seq) (row t: ss[seq[t]] at pos[t]). Rows of
 * one session are consecutive positions, or the call is a batched step of
 * one row per session. A session that holds positions at or past its
 * first row is truncated to it (the first engine rewound); one that holds
 * fewer is refused. */
int ms_stage_eval(ms_session *const *ss, const ms_stage_rows *rows, float *x, ms_error *err);
/* Bytes of the checkpoint per decoder layer (*bytes [*n_layers], caller
 * frees) and of the rest (embedding, final norm, head: *ends), from the
 * tensors' headers: what a split into stages balances. */
int ms_layer_bytes(const char *model_dir, int64_t **bytes, int *n_layers, int64_t *ends,
                   ms_error *err);

/* Sampling. temperature 0 is greedy (argmax, lowest id on ties); top_k 0,
 * top_p 1 and min_p 0 disable those filters. Applied in the order
 * temperature, top-k, softmax, top-p, min-p, then one draw. */
typedef struct ms_sampling {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    uint64_t seed;
    float repetition_penalty;   /* 0 or 1 = off; as transformers: a seen token's logit is
                                 * divided by it when positive, multiplied when negative */
    float presence_penalty;     /* subtracted once from every seen token's logit */
    float frequency_penalty;    /* subtracted per occurrence */
} ms_sampling;

typedef struct ms_sampler ms_sampler;

/* Defaults of the checkpoint (generation_config.json temperature, top_p,
 * top_k; greedy when do_sample is false), else temperature 1. */
void ms_engine_default_sampling(const ms_engine *eng, ms_sampling *out);

int ms_sampler_open(const ms_sampling *p, int32_t vocab, ms_sampler **out, ms_error *err);
void ms_sampler_close(ms_sampler *s);
/* Draws the next token from a logits row of vocab floats (penalties use the
 * tokens passed to ms_sampler_accept). */
int32_t ms_sampler_next(ms_sampler *s, const float *logits);
/* Records tokens as seen (prompt and generated) for the penalties. */
void ms_sampler_accept(ms_sampler *s, const int32_t *ids, int64_t n);
void ms_sampler_reset(ms_sampler *s);
/* Never draw ids >= n (e.g. the padding rows of a vocabulary larger than the
 * tokenizer's, which have no text); n <= 0 lifts the limit. */
void ms_sampler_limit(ms_sampler *s, int32_t n);

/* L0 report: family, dimensions, tensor counts per dtype, dense vs expert
 * bytes and a verdict. Writes the report to out; returns 0 when every
 * tensor the family needs is present with the right dtype and shape and
 * nothing unexpected is stored, MS_E_MISMATCH otherwise (err says how many),
 * or another error when the folder cannot be read at all. */
int ms_inspect(const char *model_dir, FILE *out, ms_error *err);

/* Writes a random-weight checkpoint with a released configuration (built-in
 * name, or a config.json path) in that release's exact on-disk layout. */
typedef struct ms_synth_opts {
    const char *like;        /* built-in configuration name, or NULL */
    const char *config_path; /* a config.json (generation_config.json beside it) */
    const char *out_dir;
    int layers;              /* > 0: keep only that many layers */
    uint64_t seed;
    int64_t shard_bytes;     /* 0 = about 4.6 GB per shard, as releases */
    int quiet;
    int force;               /* write into a folder that is not empty */
    void (*log)(void *user, const char *line); /* what was written; NULL drops them */
    void *log_user;
    ms_progress_fn progress; /* "synth": bytes written of the total; NULL: none */
    void *progress_user;
} ms_synth_opts;
/* Writes a random-weight checkpoint into out_dir, which must be empty or
 * absent unless force. Every file is written under a temporary name,
 * opened with O_NOFOLLOW | O_EXCL (never through a symbolic link), and
 * renamed into place once complete; config.json comes last, so a folder
 * left by a failure does not look like a model. */
int ms_synth(const ms_synth_opts *o, ms_error *err);
/* Built-in configuration names, NULL-terminated. */
const char *ms_synth_name(int i);

/* Offline replay of an expert routing trace (written with trace_path):
 * hit rates of LRU and of the optimum (Belady: evict the expert next used
 * furthest in the future) for a cache of `slots` experts, or of `ram` bytes
 * divided by the trace's slot size when slots is 0, or of the engine's own
 * cache when both are 0. */
typedef struct ms_replay_result {
    int64_t requests, slots;
    double lru_hit, opt_hit;   /* fractions in [0, 1] */
    double engine_hit;         /* the engine's own eviction policy */
    /* the best fixed set: the experts most used over the trace, each read
     * once and kept (the best a policy can do knowing only how often each
     * expert is used, when requests are independent draws) */
    double fixed_hit;
} ms_replay_result;
int ms_replay(const char *trace_path, int64_t slots, int64_t ram, ms_replay_result *out,
              ms_error *err);
/* The same counting only the requests after the first `skip`, which warm
 * the cache (a prompt's, before the decode that is judged). */
int ms_replay_after(const char *trace_path, int64_t skip, int64_t slots, int64_t ram,
                    ms_replay_result *out, ms_error *err);

/* Reads a whole regular file of at most max bytes into *buf (malloc'd,
 * NUL-terminated; *len bytes, len may be NULL). Anything else (a FIFO, a
 * device, a directory: checked before any read, without blocking) and a
 * larger file are refused naming the file. */
int ms_read_file(const char *path, size_t max, char **buf, size_t *len, ms_error *err);
/* The same for a file the user names on the command line (a request, a
 * text, ids, a schema, a template): a pipe is read to its end too (process
 * substitution, a FIFO), bounded by max; devices and folders are refused. */
int ms_read_input(const char *path, size_t max, char **buf, size_t *len, ms_error *err);

/* Parses a size as users write it: "6G", "512M", "1.5G", "4096" (bytes;
 * K, M, G, T are powers of 1024, an optional "iB" or "B" after); -1 when
 * malformed. */
int64_t ms_parse_size(const char *s);

/* Turns SIGBUS on a mapped shard (a file truncated or unreadable while the
 * model runs) into a one-line error naming the shard, offset and tensor,
 * then exits with status 1. Front ends call it once at start. */
void ms_install_fault_handler(void);

/* ---- chat formats ---------------------------------------------------------- */

typedef struct ms_chat_msg {
    const char *role;       /* "system", "developer", "user" or "assistant" */
    const char *content;
    const char *reasoning;  /* assistant: its analysis / think text, or NULL */
} ms_chat_msg;

typedef struct ms_chat_opts {
    int add_generation_prompt;
    int thinking;                 /* qwen3_moe, longcat_flash: 1 on, 0 off, -1 default */
    const char *reasoning_effort; /* gpt_oss: "low", "medium" (default), "high" */
    const char *date;             /* gpt_oss: "YYYY-MM-DD"; NULL = today */
} ms_chat_opts;

/* The checkpoint's own chat template (a Jinja template rendered by
 * moestream's interpreter, byte-identical to transformers'
 * apply_chat_template). Found, in this order: `file` when not NULL;
 * MODEL_DIR/chat_template.jinja (which transformers lets win);
 * `chat_template` of MODEL_DIR/tokenizer_config.json, a string or a list of
 * {"name", "template"} (then the one named `name`, NULL = "default").
 * bos_token / eos_token come from tokenizer_config.json when it has them.
 * *out is NULL (and 0 returned) when the folder has no template; a template
 * that does not parse is an error naming the file and line. model_dir may
 * be NULL when file is given. Read-only once open: threads may share it. */
typedef struct ms_chat_template ms_chat_template;
int ms_chat_template_open(const char *model_dir, const char *file, const char *name,
                          ms_chat_template **out, ms_error *err);
void ms_chat_template_close(ms_chat_template *t);
/* Where the template came from, e.g. "DIR/tokenizer_config.json chat_template". */
const char *ms_chat_template_source(const ms_chat_template *t);
/* Its Jinja source. */
const char *ms_chat_template_text(const ms_chat_template *t);

typedef struct ms_template_opts {
    int add_generation_prompt;
    const char *bos_token, *eos_token; /* NULL: the folder's (undefined when it has none) */
    int64_t now;          /* the time strftime_now formats (seconds, UTC); 0 = now */
    int thinking;         /* 1/0: enable_thinking and thinking set for the template; -1 not */
    const char *reasoning_effort; /* set as reasoning_effort when not NULL */
} ms_template_opts;

/* Renders an OpenAI chat request body (JSON text): its `messages` as they
 * are, `tools` (None when absent), and the keys of `chat_template_kwargs`
 * as template variables, as transformers' apply_chat_template(messages,
 * tools=tools, add_generation_prompt=..., **kwargs) does. A variable the
 * request sets wins over thinking / reasoning_effort of o. A template that
 * raises fails with MS_E_ARG and the template's own message. */
int ms_chat_template_render(const ms_chat_template *t, const char *request_json,
                            const ms_template_opts *o, char **out, ms_error *err);

/* The engine's chat template (opened with the engine, from
 * opts.chat_template_file or the folder), or NULL when the folder has none. */
const ms_chat_template *ms_engine_chat_template(const ms_engine *eng);

/* The prompt of a conversation for the engine's model: through its chat
 * template, or, when the folder has none, the built-in format of its family
 * (ms_chat_render; messages read as role / content / reasoning_content). */
int ms_chat_prompt(const ms_engine *eng, const char *request_json, const ms_template_opts *o,
                   char **out, ms_error *err);

/* ---- tool calls ---------------------------------------------------------------- */

/* The tool-call syntaxes models are trained on:
 *  HARMONY       gpt-oss: "<|channel|>commentary to=functions.NAME <|constrain|>json
 *                <|message|>ARGS<|call|>", analysis channel = reasoning
 *  QWEN3         "<tool_call>{"name": N, "arguments": {...}}</tool_call>", several
 *  QWEN3_CODER   "<tool_call><function=N><parameter=K>V</parameter></function></tool_call>"
 *  DEEPSEEK_V3   "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
 *                \n```json\nARGS\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>" (V3, R1)
 *  DEEPSEEK_V3_1 "<｜tool▁call▁begin｜>N<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>"
 *  LONGCAT       "<longcat_tool_call>{"name", "arguments"}</longcat_tool_call>"
 *  GLM45         "<tool_call>N\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>"
 *                (GLM-4.5 / 4.6; V is JSON unless the tool's schema says string) */
enum ms_tool_format {
    MS_TOOLS_HARMONY = 1, MS_TOOLS_QWEN3, MS_TOOLS_QWEN3_CODER, MS_TOOLS_DEEPSEEK_V3,
    MS_TOOLS_DEEPSEEK_V3_1, MS_TOOLS_LONGCAT, MS_TOOLS_GLM45,
};
/* "harmony", "qwen3", "qwen3_coder", "deepseek_v3", "deepseek_v3_1", "longcat", "glm45" */
int ms_tool_format_from_name(const char *name);   /* -1 when unknown */
const char *ms_tool_format_name(int format);
/* The format of a family, told apart by its chat template's text where the
 * family has several (Qwen3 / Qwen3-Coder, DeepSeek-V3 / V3.1). */
int ms_tool_format_for(const char *family, const char *template_text);
/* The engine's format (its family and chat template). */
int ms_engine_tool_format(const ms_engine *eng);

/* Parses a response into the OpenAI assistant message, as JSON text:
 * {"role": "assistant", "content": ..., "reasoning_content"?: ...,
 * "tool_calls"?: [{"id": "call_N", "type": "function", "function": {"name",
 * "arguments" (a JSON string)}}]}. tools_json (the request's tools, or
 * NULL) gives parameter types where the syntax writes values as text
 * (Qwen3-Coder). Flags: MS_PARSE_OPENS_REASONING, the prompt ended inside
 * reasoning (a "<think>" generation prompt); MS_PARSE_PARTIAL, the text is
 * a prefix of a response still being generated: a call not yet closed and
 * a trailing piece of a marker are left out instead of being read as text
 * (content and reasoning only grow as text is added, for streaming). A
 * malformed call stays in content and *note (malloc'd, may be NULL) says
 * what was wrong. */
enum { MS_PARSE_OPENS_REASONING = 1, MS_PARSE_PARTIAL = 2 };
int ms_chat_parse(int format, const char *text, size_t len, const char *tools_json, int flags,
                  char **message_json, char **note, ms_error *err);
/* Whether a rendered prompt leaves the model inside reasoning (it ends with
 * "<think>" or "<longcat_think>", maybe followed by a newline). */
int ms_chat_prompt_opens_reasoning(const char *prompt);

/* Renders msgs in the chat format of a family (model_type) as its released
 * chat_template does. *out is malloc'd, NUL-terminated; the caller frees. */
int ms_chat_render(const char *family, const ms_chat_msg *msgs, int n, const ms_chat_opts *o,
                   char **out, ms_error *err);

/* Splits a response, as it streams, into reasoning and answer: feed decoded
 * text pieces; emit() receives classified text (never the format's markers). */
enum ms_chat_channel { MS_CHAT_ANSWER = 0, MS_CHAT_REASONING = 1 };
typedef struct ms_chat_parser ms_chat_parser;
int ms_chat_parser_open(const char *family, int thinking, ms_chat_parser **out,
                        ms_error *err);
void ms_chat_parser_close(ms_chat_parser *p);
void ms_chat_parser_feed(ms_chat_parser *p, const char *text, size_t len,
                         void (*emit)(void *ctx, int channel, const char *s, size_t n),
                         void *ctx);

/* The kernel path products use ("avx512", "avx2", "scalar", or the name of
 * an opt-in precision's table once an engine opened with it). */
const char *ms_kernel_path(void);
/* Whether this CPU can run a precision (enum ms_precision). */
int ms_kernels_precision_available(int precision);

/* The memory bandwidth that performance floors are judged against, in GB/s
 * (1e9 bytes/s), with `threads` threads at once over buffers of `bytes`
 * (at least 64 MiB; keep it far above the last-level cache): a plain read
 * stream (*read_gbs) and, for information, memcpy counting bytes read +
 * written (*copy_gbs, may be NULL). Each is the best of `rounds` passes
 * taken alternately. Allocates and frees the buffers. */
int ms_mem_bandwidth(int threads, int64_t bytes, int rounds, double *read_gbs,
                     double *copy_gbs, ms_error *err);

/* The arithmetic peak that compute floors are judged against, in GFLOP/s:
 * `threads` threads at once, each running independent fused multiply-adds
 * on the active kernel table's widest vectors (2 operations per lane per
 * FMA); the best of `rounds` (~6 ms each). */
int ms_compute_peak(int threads, int rounds, double *gflops, ms_error *err);

/* Bytes of weights the kernels have read since the process started (every
 * product counts its matrix once, whatever the batch): with the token
 * count, the bytes per token that a decode floor divides. */
int64_t ms_weight_bytes_read(void);

/* Where products' time goes, by kind of dispatch. While the profile is on
 * (ms_product_profile(1), which also empties it), every dispatch of
 * products (one or several matrices spread over the threads together: a
 * layer's q, k and v, the experts of a layer, the lm_head) adds its wall
 * time, its weight bytes (as ms_weight_bytes_read counts them) and its
 * arithmetic to the row of its kind: its first matrix's format and shape,
 * how many products it held, and the most tokens one of them took (5: five
 * or more). A dispatch run beside another (the next layer's expert
 * prediction, beside q, k and v) counts its own time too. Off (the
 * default) a dispatch pays one relaxed load. Process-wide, like the
 * threads. ms_product_stats copies up to `max` rows, in the order their
 * kinds first came, and returns how many there are; past 96 kinds the last
 * row, "other" with shape 0 x 0, takes the rest. */
typedef struct ms_product_stat {
    const char *format;    /* "bf16", "f16", "f32", "fp8_block", "mxfp4" */
    int64_t rows, cols;    /* the dispatch's first matrix */
    int products;          /* matrices in each dispatch */
    int tokens;            /* the most tokens of one product; 5: five or more */
    int64_t dispatches;
    double seconds;        /* wall time of its dispatches */
    int64_t weight_bytes;
    double flops;          /* 2 per multiply-add */
} ms_product_stat;
void ms_product_profile(int on);
int ms_product_stats(ms_product_stat *out, int max);

/* ---- Tokenizer ------------------------------------------------------------------
 * Byte-level BPE read from MODEL_DIR/tokenizer.json, token-exact with the
 * Hugging Face tokenizers library's encode(text, add_special_tokens=False):
 * added/special-token strings in the text match as those tokens; no BOS/EOS
 * is added. Text is bytes: ill-formed UTF-8 is read as Rust's
 * String::from_utf8_lossy reads it (each maximal ill-formed subsequence
 * becomes U+FFFD), since the reference only takes valid Unicode strings.
 * A tokenizer is read-only after open: several threads may encode and decode
 * with it at once. Arrays and strings handed to the caller are freed with free(). */
typedef struct ms_tokenizer ms_tokenizer;

/* Opens MODEL_DIR/tokenizer.json; refuses a missing file or a field this
 * implementation does not support with an error naming the file and field. */
int ms_tokenizer_open(const char *model_dir, ms_tokenizer **out, ms_error *err);
void ms_tokenizer_close(ms_tokenizer *tok);

/* Number of ids: 1 + the highest id of the vocabulary and the added tokens. */
int32_t ms_tokenizer_n_ids(const ms_tokenizer *tok);

/* Id of a token string, added tokens first, then the model vocabulary (as
 * HF's token_to_id), e.g. "<|return|>"; -1 when there is none. */
int32_t ms_tokenizer_token_id(const ms_tokenizer *tok, const char *token);

/* Encodes len bytes of text into *ids (*n_ids of them). parse_special != 0:
 * special-token strings in the text become their ids (HF's default); 0:
 * they are read as plain text (added tokens not marked special still match). */
int ms_tokenizer_encode(const ms_tokenizer *tok, const char *text, size_t len,
                        int parse_special, int32_t **ids, int64_t *n_ids, ms_error *err);

/* Decodes ids into *text (*len bytes, NUL-terminated): the bytes of each
 * token (ByteLevel inverse; added tokens as their content). The bytes are
 * raw: a multi-byte character cut by the end of the list is left cut.
 * Fails with MS_E_ARG on an id that has no token. */
int ms_tokenizer_decode(const ms_tokenizer *tok, const int32_t *ids, int64_t n,
                        char **text, size_t *len, ms_error *err);

/* Streaming decode, for printing tokens as they are generated: each push
 * returns the text that became complete (only whole UTF-8 characters; the
 * bytes of a character still being spelled are held back; an ill-formed
 * sequence comes out as U+FFFD). *text stays valid until the next call.
 * flush returns what is held (as U+FFFD) at the end of the stream. The
 * concatenated output equals the lossy UTF-8 reading of ms_tokenizer_decode.
 * The tokenizer must outlive the stream. */
typedef struct ms_detok ms_detok;
int ms_detok_open(const ms_tokenizer *tok, ms_detok **out, ms_error *err);
int ms_detok_push(ms_detok *d, int32_t id, const char **text, size_t *len, ms_error *err);
void ms_detok_flush(ms_detok *d, const char **text, size_t *len);
void ms_detok_close(ms_detok *d);

/* ---- constrained decoding ------------------------------------------------------------
 * A grammar the output must follow, over the bytes of the generated tokens:
 * n alternatives, each a literal prefix (may be NULL) then a JSON document
 * following schemas[i] (a JSON Schema as JSON text; NULL: any JSON object),
 * then the literal suffix (may be NULL) shared by all. The schema subset and
 * its refusals are listed in src/runtime/grammar.c; an unsupported keyword
 * is an error naming its path. */
typedef struct ms_grammar ms_grammar;
int ms_grammar_json(int n, const char *const *prefixes, const char *const *schemas,
                    const char *suffix, ms_grammar **out, ms_error *err);
void ms_grammar_free(ms_grammar *g);

/* The grammar that makes a model of this tool-call format answer with a JSON
 * document (response_format; schema_json NULL: any object): after its
 * answer header (Harmony's final channel) or the end of the reasoning the
 * prompt opened. */
int ms_grammar_for_answer(int format, int opens_reasoning, const char *schema_json,
                          ms_grammar **out, ms_error *err);
/* The grammar of one call, in the format's syntax, to a tool of tools_json
 * (the request's tools), or only to the one named `only`: its arguments
 * follow the tool's parameters schema (tool_choice required / named). */
int ms_grammar_for_tool_call(int format, int opens_reasoning, const char *tools_json,
                             const char *only, ms_grammar **out, ms_error *err);

/* The tokenizer's ids sorted by their bytes, for token masks; built once
 * (about a second for a 200k vocabulary), read-only after. */
typedef struct ms_vocab_index ms_vocab_index;
int ms_vocab_index_open(const ms_tokenizer *tok, ms_vocab_index **out, ms_error *err);
void ms_vocab_index_close(ms_vocab_index *v);

/* ---- generation ------------------------------------------------------------------ */

enum ms_stop_reason {
    MS_STOP_EOS = 0,      /* a stop id of the checkpoint (eos_token_id list) */
    MS_STOP_LENGTH,       /* max_tokens reached */
    MS_STOP_CONTEXT,      /* the KV cache is full (CONTEXT_FULL) */
    MS_STOP_CANCEL,       /* *cancel was set */
};

typedef struct ms_gen_opts {
    int64_t max_tokens;
    int ignore_eos;
    const volatile int *cancel;     /* polled before each token; may be NULL */
    ms_sampler *sampler;
    const ms_tokenizer *tok;        /* NULL: ids only, no text */
    ms_chat_parser *parser;         /* NULL: all text is answer */
    const ms_grammar *grammar;      /* the output must follow it (needs vocab); NULL: free */
    const ms_vocab_index *vocab;
    int64_t *mask_ns;               /* when not NULL: nanoseconds spent on masks added */
    void (*on_id)(void *ctx, int32_t id);                      /* may be NULL */
    void (*on_text)(void *ctx, int channel, const char *s, size_t n); /* may be NULL */
    void *ctx;
} ms_gen_opts;

typedef struct ms_gen_result {
    int64_t n_tokens;               /* emitted, the stop id included */
    int stop;                       /* enum ms_stop_reason */
} ms_gen_result;

/* Generates from the session's last logits: samples a token, reports it,
 * streams its text (whole UTF-8 characters, split by the chat parser), and
 * evaluates it, until a stop id, max_tokens, a full context or a cancel.
 * Every emitted token but the last is evaluated, so the session's history is
 * the prompt followed by the response. */
int ms_generate(ms_session *s, const ms_gen_opts *o, ms_gen_result *r, ms_error *err);

/* The same loop a token at a time, for front ends that step several
 * sessions together (ms_session_eval_batch): ms_gen_next samples and
 * reports one token; it returns 0 with *id when that id must be evaluated
 * before the next call, 1 when the generation has ended, -1 on an error.
 * ms_gen_end ends it (e.g. MS_STOP_CONTEXT when the session is full);
 * ms_gen_close flushes the text held back and gives the result. o (and what
 * it points to) must outlive the generation. */
typedef struct ms_gen ms_gen;
int ms_gen_open(ms_session *s, const ms_gen_opts *o, ms_gen **out, ms_error *err);
int ms_gen_next(ms_gen *g, int32_t *id, ms_error *err);
void ms_gen_end(ms_gen *g, int stop);
void ms_gen_close(ms_gen *g, ms_gen_result *r);

#endif
