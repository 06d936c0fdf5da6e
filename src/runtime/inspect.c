/* `inspect`: the L0 report of a checkpoint folder. Binds every tensor in
 * check-only mode (no copies) and prints dimensions, tensor statistics,
 * dense vs expert bytes and the verdict. */
#include <stdlib.h>
#include <string.h>

#include "runtime/engine.h"

static void print_tensors(const ms_checkpoint *ck, const ms_binder *b, FILE *out)
{
    fprintf(out, "tensors: %lld in %d file%s (%.3f GB of tensor data)\n",
            (long long)ck->n_tensors, ck->n_files, ck->n_files > 1 ? "s" : "",
            (double)ck->total_bytes / 1e9);
    if (ck->index_total_size >= 0 && (uint64_t)ck->index_total_size != ck->total_bytes)
        fprintf(out, "  note: index metadata.total_size %lld differs from the tensor bytes "
                "%llu\n", (long long)ck->index_total_size,
                (unsigned long long)ck->total_bytes);
    for (int d = 1; d < MS_DTYPE_COUNT; d++)
        if (b->dtype_count[d])
            fprintf(out, "  %-8s %8lld tensors %14llu bytes\n", ms_dtype_name((ms_dtype)d),
                    (long long)b->dtype_count[d], (unsigned long long)b->dtype_bytes[d]);
}

static void print_sizes(const ms_model *m, const ms_binder *b, FILE *out)
{
    uint64_t dense = b->bytes[MS_ROLE_DENSE] + b->bytes[MS_ROLE_EMBED];
    fprintf(out, "bytes: dense (resident) %llu (%.3f GB, of which embeddings %.3f GB), "
            "routed experts %llu (%.3f GB)\n", (unsigned long long)dense, (double)dense / 1e9,
            (double)b->bytes[MS_ROLE_EMBED] / 1e9,
            (unsigned long long)b->bytes[MS_ROLE_EXPERT],
            (double)b->bytes[MS_ROLE_EXPERT] / 1e9);
    if (m->experts && m->n_experts)
        fprintf(out, "one expert: %llu bytes (%.2f MB), %d experts x %d layers, top-%d\n",
                (unsigned long long)ms_expert_bytes_typical(m->experts),
                (double)ms_expert_bytes_typical(m->experts) / 1e6, m->n_experts, m->n_layers,
                m->n_experts_used);
    int64_t win = 0;
    for (int l = 0; l < m->n_layers; l++)
        if (m->kv_window[l])
            win += m->kv_row[l] * 4;
    int64_t full = ms_kv_bytes_per_token(m, MS_KV_F32);
    int64_t half = ms_kv_bytes_per_token(m, MS_KV_BF16), quarter = ms_kv_bytes_per_token(m, MS_KV_FP8);
    fprintf(out, "KV cache: %lld bytes/token in f32 (full-attention layers; bf16 %lld, fp8 %lld)",
            (long long)full, (long long)half, (long long)quarter);
    if (win)
        fprintf(out, " + %lld bytes/token on sliding layers, bounded by their window",
                (long long)win);
    fprintf(out, "\nKV cache at the model's %lld-token context: %.2f GB f32, %.2f GB bf16, "
            "%.2f GB fp8\n", (long long)m->max_ctx, (double)full * (double)m->max_ctx / 1e9,
            (double)half * (double)m->max_ctx / 1e9, (double)quarter * (double)m->max_ctx / 1e9);
    /* what the engine's memory plan needs at the least: the dense weights
     * pinned, a bf16 KV cache, one layer's top-k experts in the cache, and
     * its working memory (ms_mem_reserve) */
    int64_t ctx = m->max_ctx < 4096 ? m->max_ctx : 4096;
    uint64_t resident = b->bytes[MS_ROLE_DENSE], kv = (uint64_t)(half * ctx);
    uint64_t topk = ms_topk_bytes(m);
    uint64_t least = ms_mem_smallest(resident + kv + topk);
    fprintf(out, "smallest memory limit: %.0f MB (dense weights %.0f MB, KV cache of a "
            "%lld-token context in bf16 %.0f MB, one layer's top-%d experts %.0f MB, working "
            "memory %.0f MB); the whole model in the page cache: %.2f GB\n",
            (double)least / 1e6, (double)resident / 1e6, (long long)ctx, (double)kv / 1e6,
            m->n_experts_used, (double)topk / 1e6,
            (double)(least - resident - kv - topk) / 1e6,
            (double)(resident + b->bytes[MS_ROLE_EMBED] + b->bytes[MS_ROLE_EXPERT] + kv) / 1e9);
}

int ms_check_open(const char *model_dir, ms_checked *c, ms_err *err)
{
    memset(c, 0, sizeof *c);
    ms_model_opts mo = {.max_batch = 1, .check_only = 1};
    if (ms_ckpt_open(model_dir, &c->ck, err) || !(c->fam = ms_family_find(c->ck, err)) ||
        ms_binder_init(&c->b, c->ck, 1, err) || ms_binder_config(&c->b, c->ck->config, err) ||
        c->fam->open(c->ck, &c->b, &mo, &c->m, err)) {
        ms_check_close(c);
        return -1;
    }
    ms_bind_finish(&c->b);
    return 0;
}

void ms_check_close(ms_checked *c)
{
    if (c->m)
        c->fam->close(c->m);
    ms_binder_free(&c->b);
    ms_ckpt_close(c->ck);
    memset(c, 0, sizeof *c);
}

int ms_inspect(const char *model_dir, FILE *out, ms_error *err)
{
    ms_checked c;
    if (ms_check_open(model_dir, &c, err))
        return -1;
    const ms_binder *b = &c.b;
    int rc;
    fprintf(out, "model: %s\nfamily: %s\nkernels: %s\nconfig:\n", model_dir, c.fam->model_type,
            ms_kernel_path());
    c.fam->describe(c.m, out);
    print_tensors(c.ck, b, out);
    print_sizes(c.m, b, out);
    for (int i = 0; i < b->n_notes; i++)
        fprintf(out, "note: %s\n", b->notes[i]);
    if (b->n_problems == 0) {
        fprintf(out, "L0: PASS (%lld tensors bound, none missing, none unexpected)\n",
                (long long)b->n_used);
        rc = 0;
    } else {
        fprintf(out, "L0: FAIL (%d problem%s)\n", b->n_problems, b->n_problems > 1 ? "s" : "");
        for (int i = 0; i < b->n_problems; i++)
            fprintf(out, "  %s\n", b->problems[i]);
        rc = ms_err_set(err, MS_E_MISMATCH, "%s: L0 check failed with %d problem%s", model_dir,
                        b->n_problems, b->n_problems > 1 ? "s" : "");
    }
    ms_check_close(&c);
    return rc;
}
