/* moestream plan: what a model will do on this machine at a range of memory
 * sizes, and how much to give it.
 *
 * Measured here: the disk at expert-sized reads (the best of three rounds
 * at queue depth 8, as prefetch and demand reads run together), the
 * memory's read-stream bandwidth, and one short run (a --prompt-token
 * prompt, then --n-predict greedy tokens) that gives the decode's compute
 * time per token (its time less its waits on reads), the expert requests
 * per token. The routing is the run's own trace (or --trace FILE). For
 * each memory size the engine's own arithmetic (ms_engine_mem_plan) says
 * where the experts go and how many slots its cache has; the trace replayed
 * on that cache (the engine's eviction policy; the prompt's requests only
 * warm it) gives the hit rate; then a decoded token takes
 *
 *   compute + misses per token x slot bytes / disk
 *
 * as if no read overlapped compute. Prefetch does hide some of them, but
 * less than its accuracy would allow (decode takes 1.3-1.5x its own reads,
 * docs/perf.md): on the synthetic gpt-oss-20b under memlimit 4, 6 and 8 GiB
 * this sum was 3-11% slow where max(compute, reads) was 23-45% fast. A
 * model that stays in the page cache decodes at its compute time. Prints a
 * table; --svg draws it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define MAX_BUDGETS 32

typedef struct plan_row {
    uint64_t mem;
    ms_mem_plan mp;
    double hit, mb_per_token, tok_s;
} plan_row;

/* "4G,6G,8G" into mem[]; the count, or -1 after a usage error. */
static int parse_budgets(const char *s, uint64_t *mem)
{
    int n = 0;
    char buf[64];
    for (const char *p = s; *p && n < MAX_BUDGETS;) {
        size_t l = strcspn(p, ",");
        snprintf(buf, sizeof buf, "%.*s", (int)l, p);
        int64_t v = ms_parse_size(buf);
        if (v <= 0)
            return cli_usage_error("plan", "--budgets expects sizes like 4G,6G,8G; \"%s\" is "
                                   "not one", buf), -1;
        mem[n++] = (uint64_t)v;
        p += l + (p[l] == ',');
    }
    return n;
}

/* From the least memory the engine opens with to the first size where the
 * whole model stays in the page cache, in steps of a half GiB or more. */
static int default_budgets(const ms_engine *eng, uint64_t *mem)
{
    const uint64_t half = 1ull << 29;
    uint64_t lo = half, hi;
    ms_mem_plan p;
    for (; lo < (1ull << 44); lo += half)
        if (ms_engine_mem_plan(eng, lo, &p) == 0 && p.fits)
            break;
    for (hi = lo; hi < (1ull << 44); hi += half)
        if (ms_engine_mem_plan(eng, hi, &p) == 0 && p.placement == MS_PLACE_PAGECACHE)
            break;
    uint64_t step = (hi - lo) / 9;
    step = (step + half - 1) / half * half;
    step = step ? step : half;
    int n = 0;
    for (uint64_t m = lo; m < hi && n < MAX_BUDGETS - 1; m += step)
        mem[n++] = m;
    mem[n++] = hi;
    return n;
}

/* "6.00 GiB", "48 MiB" (sizes as --ram and --budgets read them) */
static void mem_text(uint64_t b, char *buf, size_t cap)
{
    if (b >= (1ull << 30))
        snprintf(buf, cap, "%.2f GiB", b / 1073741824.0);
    else
        snprintf(buf, cap, "%.1f MiB", b / 1048576.0);
}

static void svg(const char *path, const plan_row *r, int n, ms_error *err)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err->msg, sizeof err->msg, "%s: cannot write the chart", path);
        return;
    }
    const double W = 640, H = 360, L = 60, R = 60, T = 30, B = 50;
    double xmax = 0, ymax = 0;
    for (int i = 0; i < n; i++) {
        xmax = r[i].mem / 1073741824.0 > xmax ? r[i].mem / 1073741824.0 : xmax;
        ymax = r[i].tok_s > ymax ? r[i].tok_s : ymax;
    }
    ymax = ymax > 0 ? ymax * 1.1 : 1;
    xmax = xmax > 0 ? xmax * 1.05 : 1;
#define X(v) (L + (v) / xmax * (W - L - R))
#define Y(v, top) (H - B - (v) / (top) * (H - T - B))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
            "fill=\"white\"/>\n", W, H);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
            "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n",
            L, H - B, W - R, H - B, L, T, L, H - B);
    for (int k = 0; k <= 4; k++) {
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">%.1f</text>\n", L - 6,
                Y(ymax * k / 4, ymax) + 4, ymax * k / 4);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#c05000\">%d%%</text>\n", W - R + 6,
                Y(25.0 * k, 100.0) + 4, 25 * k);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">%.1f</text>\n",
                X(xmax * k / 4), H - B + 18, xmax * k / 4);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">memory (GiB)</text>\n",
            (L + W - R) / 2, H - 12);
    fprintf(f, "<text x=\"%.0f\" y=\"18\">decode tok/s</text>\n<text x=\"%.0f\" y=\"18\" "
            "fill=\"#c05000\" text-anchor=\"end\">expert hit rate</text>\n", L - 40, W - 10);
    const char *what[2] = {"#1060c0", "#c05000"};
    for (int s = 0; s < 2; s++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", what[s]);
        for (int i = 0; i < n; i++)
            if (r[i].mp.fits)
                fprintf(f, "%.1f,%.1f ", X(r[i].mem / 1073741824.0),
                        s ? Y(100 * r[i].hit, 100.0) : Y(r[i].tok_s, ymax));
        fprintf(f, "\"/>\n");
    }
    fprintf(f, "</svg>\n");
#undef X
#undef Y
    if (fclose(f))
        snprintf(err->msg, sizeof err->msg, "%s: cannot write the chart", path);
}

int cmd_plan(int argc, char **argv)
{
    cli_args o;
    int rc = cli_parse(CMD_PLAN, argc, argv, &o);
    if (rc)
        return cli_exit(rc);
    uint64_t mem[MAX_BUDGETS];
    int nb = o.budgets ? parse_budgets(o.budgets, mem) : 0;
    if (nb < 0)
        return 2;
    ms_error err = {0};
    char tmp[] = "/tmp/moestream-plan-XXXXXX";
    const char *trace = o.trace ? o.trace : tmp;
    if (!o.trace) { /* record the measured run's own routing */
        int fd = mkstemp(tmp);
        if (fd < 0) {
            snprintf(err.msg, sizeof err.msg, "cannot create a trace file in /tmp");
            return cli_fail(&err);
        }
        close(fd);
    }
    ms_engine_opts eo = cli_engine_opts(&o);
    eo.trace_path = o.trace ? NULL : tmp;
    ms_engine *eng = NULL;
    ms_session *s = NULL;
    int32_t *ids = NULL;
    int64_t prompt = o.bench_prompt, n = o.n_predict;
    plan_row rows[MAX_BUDGETS];
    ms_expert_info ei = {0};
    double disk = 0, bw = 0, compute = 0, req_per_token = 0, floor_s = 0;
    int64_t skip = 0;
    int threads = 0;
    char family[64] = "";
    rc = 1;
    if (ms_engine_open(o.model, &eo, &eng, &err))
        goto out;
    if (ms_engine_expert_info(eng, &ei)) {
        snprintf(err.msg, sizeof err.msg, "%s has no routed experts: nothing to plan", o.model);
        goto out;
    }
    threads = ms_engine_threads(eng);
    const ms_model_info *info = ms_engine_info(eng);
    snprintf(family, sizeof family, "%s", info->family);
    int32_t vocab = info->vocab_size;
    ms_session_opts so = {.ctx = prompt + n + 1};
    if (!(ids = malloc(sizeof *ids * (size_t)prompt)) || ms_session_open(eng, &so, &s, &err))
        goto out;
    cli_synthetic_prompt(ids, prompt, vocab);
    fprintf(stderr, "moestream plan: measuring a %lld-token prompt and %lld decoded tokens\n",
            (long long)prompt, (long long)n);
    ms_stats s0, s1, s2;
    ms_session_stats(s, &s0);
    if (ms_session_eval(s, ids, prompt, NULL, &err))
        goto out;
    ms_session_stats(s, &s1);
    int64_t wb1 = ms_weight_bytes_read();
    for (int64_t i = 0; i < n; i++) {
        const float *l = ms_session_logits(s);
        int32_t best = 0;
        for (int32_t v = 1; v < vocab; v++)
            best = l[v] > l[best] ? v : best;
        if (ms_session_eval(s, &best, 1, NULL, &err))
            goto out;
    }
    ms_session_stats(s, &s2);
    int64_t wb2 = ms_weight_bytes_read();
    compute = ((s2.t_decode - s1.t_decode) - (s2.t_io_wait - s1.t_io_wait)) / (double)n;
    req_per_token = (double)(s2.expert_requests - s1.expert_requests) / (double)n;
    skip = o.trace ? 0 : (int64_t)(s1.expert_requests - s0.expert_requests);
    const int depth = 8;
    for (int round = 0; round < 3; round++) { /* the disk's speed swings: the best of three */
        double d = 0;
        if (ms_engine_disk_probe(eng, o.disk > 0 ? (int)o.disk : 96, depth, &d, &err))
            goto out;
        disk = d > disk ? d : disk;
    }
    if (ms_mem_bandwidth(threads, INT64_C(256) << 20, 2, &bw, NULL, &err))
        goto out;
    floor_s = (double)(wb2 - wb1) / (double)n / (bw * 1e9);
    if (!nb)
        nb = default_budgets(eng, mem);
    for (int i = 0; i < nb; i++) {
        rows[i].mem = mem[i];
        ms_engine_mem_plan(eng, mem[i], &rows[i].mp);
    }
    ms_session_close(s);
    s = NULL;
    ms_engine_close(eng); /* the trace is complete once the engine is closed */
    eng = NULL;
    for (int i = 0; i < nb; i++) {
        plan_row *r = &rows[i];
        r->hit = 1;
        r->mb_per_token = 0;
        if (r->mp.fits && r->mp.placement == MS_PLACE_CACHE) {
            ms_replay_result rr;
            if (ms_replay_after(trace, skip, r->mp.cache_slots, 0, &rr, &err))
                goto out;
            r->hit = rr.engine_hit;
            r->mb_per_token = (1 - r->hit) * req_per_token * (double)r->mp.cache_bytes /
                              (double)r->mp.cache_slots / 1e6;
        }
        r->tok_s = r->mp.fits ? 1 / (compute + r->mb_per_token * 1e6 / disk) : 0;
    }

    double best = 0;
    for (int i = 0; i < nb; i++)
        best = rows[i].tok_s > best ? rows[i].tok_s : best;
    int rec = -1;
    for (int i = 0; i < nb && rec < 0; i++)
        if (rows[i].mp.fits && rows[i].tok_s >= 0.9 * best)
            rec = i;
    printf("| %-36s | %-44s |\n|%s|%s|\n", "moestream plan", o.model,
           "--------------------------------------", "----------------------------------------------");
    char v[128];
#define ROW(k, ...) (snprintf(v, sizeof v, __VA_ARGS__), printf("| %-36s | %-44s |\n", k, v))
    ROW("family", "%s, %d layers x %d experts (top-%d)", family, ei.n_layers, ei.n_experts,
        ei.n_used);
    ROW("experts / dense weights", "%.2f GB / %.2f GB", (double)ei.expert_bytes * ei.n_layers *
        ei.n_experts / 1e9, (double)ei.dense_bytes / 1e9);
    ROW("disk at expert-sized reads",
        "%.0f MB/s (%d experts of %.1f MB queued, read as the cache does)", disk / 1e6, depth,
        ei.expert_bytes / 1e6);
    ROW("memory read bandwidth", "%.1f GB/s (%d threads)", bw, threads);
    ROW("decode compute (measured)", "%.1f ms/token (floor %.1f ms: weights / bandwidth)",
        1e3 * compute, 1e3 * floor_s);
    ROW("expert requests per token", "%.1f (routing: %s)", req_per_token,
        o.trace ? o.trace : "this run's trace");
    printf("\n| %-9s | %-24s | %-8s | %-13s | %-12s |\n", "memory", "experts", "hit rate",
           "MB read/token", "decode tok/s");
    printf("|-----------|--------------------------|----------|---------------|--------------|\n");
    for (int i = 0; i < nb; i++) {
        const plan_row *r = &rows[i];
        char where[64];
        if (!r->mp.fits)
            snprintf(where, sizeof where, "does not fit");
        else if (r->mp.placement == MS_PLACE_PAGECACHE)
            snprintf(where, sizeof where, "page cache (all)");
        else
        {
            char c[32];
            mem_text(r->mp.cache_bytes, c, sizeof c);
            snprintf(where, sizeof where, "cache %s (%lld)", c, (long long)r->mp.cache_slots);
        }
        char m[32];
        mem_text(r->mem, m, sizeof m);
        printf("| %9s | %-24s | %7.1f%% | %13.1f | %12.2f |%s\n", m, where, r->mp.fits ? 100 * r->hit : 0.0, r->mb_per_token, r->tok_s,
               i == rec ? " <- recommended" : "");
    }
    char m[32], c[32];
    if (rec >= 0) { /* --ram rounded down, as ms_parse_size reads it */
        uint64_t b = rows[rec].mp.cache_bytes;
        mem_text(rows[rec].mem, m, sizeof m);
        if (b >= (1ull << 30))
            snprintf(c, sizeof c, "%.1fG", (double)(b * 10 / (1ull << 30)) / 10);
        else
            snprintf(c, sizeof c, "%lluM", (unsigned long long)(b >> 20));
    }
    if (rec >= 0 && rows[rec].mp.placement == MS_PLACE_CACHE)
        printf("\nrecommended: %s of memory, --ram %s for the expert cache (%.2f tok/s, within "
               "10%% of the best predicted)\n", m, c, rows[rec].tok_s);
    else if (rec >= 0)
        printf("\nrecommended: %s of memory: the whole model stays in the page cache, no --ram "
               "needed (%.2f tok/s)\n", m, rows[rec].tok_s);
    printf("prediction: compute + misses x slot bytes / disk (reads counted as not overlapping "
           "compute)\n");
    if (o.svg) {
        svg(o.svg, rows, nb, &err);
        if (err.msg[0])
            goto out;
        fprintf(stderr, "moestream plan: chart in %s\n", o.svg);
    }
    rc = 0;
out:
    if (rc)
        rc = cli_fail(&err);
    ms_session_close(s);
    ms_engine_close(eng);
    if (!o.trace)
        unlink(tmp);
    free(ids);
    return rc;
}
