/* model_type -> family. The only list of supported families. */
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "models/family.h"

static const ms_family *const families[] = {
    &ms_family_gpt_oss,
    &ms_family_qwen3_moe,
    &ms_family_deepseek_v3,
    &ms_family_longcat_flash,
    &ms_family_glm4_moe,
};

const ms_family *ms_family_find(const ms_checkpoint *ck, ms_err *err)
{
    const char *type;
    if (ms_json_str(ck->config, "config.json", "model_type", &type, err))
        return NULL;
    size_t n = sizeof families / sizeof families[0];
    for (size_t i = 0; i < n; i++)
        if (strcmp(families[i]->model_type, type) == 0)
            return families[i];
    char list[256] = "";
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "",
                              families[i]->model_type);
    ms_err_set(err, MS_E_UNSUPPORTED,
               "%s/config.json: model_type \"%s\" is not supported (supported: %s)", ck->dir,
               type, list);
    return NULL;
}

void *ms_model_alloc(size_t size, const ms_family *fam, int n_layers, ms_err *err)
{
    if (n_layers <= 0 || n_layers > 4096) {
        ms_err_set(err, MS_E_FORMAT, "config.json: num_hidden_layers %d out of range", n_layers);
        return NULL;
    }
    ms_model *m = ms_calloc(1, size, "model", err);
    if (!m)
        return NULL;
    m->family = fam;
    m->n_layers = n_layers;
    m->kv_row = ms_calloc((size_t)n_layers, sizeof *m->kv_row, "kv table", err);
    m->kv_window = ms_calloc((size_t)n_layers, sizeof *m->kv_window, "kv table", err);
    m->kv_group = ms_calloc((size_t)n_layers, sizeof *m->kv_group, "kv table", err);
    m->kv_plane = ms_calloc((size_t)n_layers, sizeof *m->kv_plane, "kv table", err);
    m->kv_kplanes = ms_calloc((size_t)n_layers, sizeof *m->kv_kplanes, "kv table", err);
    if (!m->kv_row || !m->kv_window || !m->kv_group || !m->kv_plane || !m->kv_kplanes) {
        ms_model_free(m);
        return NULL;
    }
    return m;
}

void *ms_model_create(const ms_model_spec *spec, const ms_model_opts *opts, ms_binder *b,
                      ms_err *err)
{
    ms_model *m = ms_model_alloc(spec->size, spec->family, spec->n_layers, err);
    if (!m)
        return NULL;
    ms_model own = *m; /* what the allocation made: KV tables, arena */
    memcpy(m, spec->tmp, spec->size);
    int64_t max_ctx = spec->max_ctx > 0 ? spec->max_ctx : m->max_ctx;
    *m = own;
    m->max_ctx = max_ctx;
    m->d_model = spec->d_model;
    m->vocab = spec->vocab;
    m->max_batch = opts->max_batch > 0 ? opts->max_batch : 1;
    m->max_span = m->max_batch;
    m->n_experts = spec->n_experts;
    m->n_experts_used = spec->n_used;
    m->layer0 = opts->stage_first;
    m->layer1 = opts->stage_end > 0 ? opts->stage_end : m->n_layers;
    m->ends = !opts->stage_no_ends;
    if (m->layer0 < 0 || m->layer1 > m->n_layers || m->layer0 >= m->layer1) {
        ms_err_set(err, MS_E_ARG, "a pipeline stage of layers %d-%d: the model has layers "
                   "0-%d", m->layer0, m->layer1 - 1, m->n_layers - 1);
        ms_model_free(m);
        return NULL;
    }
    if (!opts->check_only)
        ms_binder_set_arena(b, &m->arena);
    return m;
}

void ms_model_free(ms_model *m)
{
    if (!m)
        return;
    ms_expert_store_close(m->experts);
    ms_arena_free(&m->arena);
    free(m->span.p);
    free(m->kv_row);
    free(m->kv_window);
    free(m->kv_group);
    free(m->kv_plane);
    free(m->kv_kplanes);
    free(m);
}
