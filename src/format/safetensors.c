/* Safetensors reader: map, parse, validate. Every refusal names the file and
 * the tensor; nothing is trusted before its bounds are checked. */
#include "format/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "base/sysmem.h"

/* Open files, for naming the culprit when a mapped page cannot be read
 * (SIGBUS after a shard is truncated under us). Slots are claimed with an
 * atomic exchange so opens on several threads do not collide. */
#define MAX_LIVE 8192
static ms_st_file *live[MAX_LIVE];

static void live_add(ms_st_file *f)
{
    for (int i = 0; i < MAX_LIVE; i++) {
        ms_st_file *expected = NULL;
        if (__atomic_compare_exchange_n(&live[i], &expected, f, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            return;
    }
}

static void live_remove(ms_st_file *f)
{
    for (int i = 0; i < MAX_LIVE; i++) {
        ms_st_file *expected = f;
        if (__atomic_compare_exchange_n(&live[i], &expected, NULL, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            return;
    }
}

int ms_st_describe_address(const void *addr, char *buf, int cap)
{
    const uint8_t *p = addr;
    for (int i = 0; i < MAX_LIVE; i++) {
        ms_st_file *f = __atomic_load_n(&live[i], __ATOMIC_SEQ_CST);
        if (!f || !f->map || p < f->map || p >= f->map + f->size)
            continue;
        uint64_t off = (uint64_t)(p - f->map);
        const char *tensor = "(header)";
        for (int t = 0; t < f->n_tensors; t++)
            if (off >= f->tensors[t].offset && off < f->tensors[t].offset + f->tensors[t].nbytes)
                tensor = f->tensors[t].name;
        snprintf(buf, (size_t)cap, "%s: file offset %llu, in tensor %s", f->path,
                 (unsigned long long)off, tensor);
        return 1;
    }
    return 0;
}

int64_t ms_tensor_numel(const ms_tensor_info *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++)
        n *= t->shape[i];
    return n;
}

const char *ms_shape_str(const int64_t *shape, int n_dims, char *buf, int cap)
{
    int k = snprintf(buf, (size_t)cap, "[");
    for (int i = 0; i < n_dims && k < cap; i++)
        k += snprintf(buf + k, (size_t)(cap - k), "%s%lld", i ? ", " : "",
                      (long long)shape[i]);
    if (k < cap)
        snprintf(buf + k, (size_t)(cap - k), "]");
    return buf;
}

/* Parses one {"dtype", "shape", "data_offsets"} entry into t (name set by
 * the caller); offsets are checked against the data section. */
static int parse_entry(const char *path, const char *name, const json_t *v,
                       uint64_t data_start, uint64_t data_size, ms_tensor_info *t,
                       ms_err *err)
{
    if (!json_is_object(v))
        return ms_err_set(err, MS_E_FORMAT, "%s: tensor \"%s\": header entry is not an object",
                          path, name);
    const json_t *dt = json_object_get(v, "dtype");
    const json_t *shape = json_object_get(v, "shape");
    const json_t *offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs))
        return ms_err_set(err, MS_E_FORMAT,
                          "%s: tensor \"%s\": entry needs string \"dtype\", list \"shape\" "
                          "and list \"data_offsets\"", path, name);
    t->dtype = ms_dtype_from_name(json_string_value(dt));
    if (t->dtype == MS_DTYPE_INVALID)
        return ms_err_set(err, MS_E_FORMAT, "%s: tensor \"%s\": unknown dtype \"%s\"", path,
                          name, json_string_value(dt));
    size_t nd = json_array_size(shape);
    if (nd > MS_MAX_DIMS)
        return ms_err_set(err, MS_E_FORMAT, "%s: tensor \"%s\": %zu dimensions (max %d)",
                          path, name, nd, MS_MAX_DIMS);
    t->n_dims = (int)nd;
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        const json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return ms_err_set(err, MS_E_FORMAT,
                              "%s: tensor \"%s\": shape[%zu] is not a non-negative integer",
                              path, name, i);
        t->shape[i] = json_integer_value(d);
        if (__builtin_mul_overflow(numel, (uint64_t)t->shape[i], &numel))
            return ms_err_set(err, MS_E_FORMAT, "%s: tensor \"%s\": shape overflows", path,
                              name);
    }
    const json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
    if (json_array_size(offs) != 2 || !json_is_integer(b) || !json_is_integer(e) ||
        json_integer_value(b) < 0 || json_integer_value(e) < json_integer_value(b))
        return ms_err_set(err, MS_E_FORMAT,
                          "%s: tensor \"%s\": data_offsets must be [begin, end] with "
                          "0 <= begin <= end", path, name);
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
    if (end > data_size)
        return ms_err_set(err, MS_E_FORMAT,
                          "%s: tensor \"%s\": data_offsets [%llu, %llu] end past the data "
                          "section (%llu bytes): file truncated or header corrupt",
                          path, name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)data_size);
    uint64_t want;
    if (__builtin_mul_overflow(numel, (uint64_t)ms_dtype_size(t->dtype), &want) ||
        want != end - begin) {
        char sb[128];
        return ms_err_set(err, MS_E_FORMAT,
                          "%s: tensor \"%s\": %llu bytes in data_offsets but shape %s x %s "
                          "(%d bytes) needs %llu", path, name,
                          (unsigned long long)(end - begin),
                          ms_shape_str(t->shape, t->n_dims, sb, sizeof sb),
                          ms_dtype_name(t->dtype), ms_dtype_size(t->dtype),
                          (unsigned long long)(numel * (uint64_t)ms_dtype_size(t->dtype)));
    }
    t->offset = data_start + begin;
    t->nbytes = end - begin;
    return 0;
}

/* The reference writer pads the header to a multiple of 8 and keeps offsets
 * aligned to the element size; elsewhere every load of an element would be
 * a misaligned access (undefined behaviour in C), so such a file is refused. */
static int check_aligned(const char *path, const ms_tensor_info *t, uint64_t data_start,
                         ms_err *err)
{
    if (t->offset % (uint64_t)ms_dtype_size(t->dtype) == 0)
        return 0;
    return ms_err_set(err, MS_E_FORMAT,
                      "%s: tensor \"%s\" starts at file offset %llu, not a multiple of its "
                      "%d-byte %s elements (header of %llu bytes, data_offsets begin %llu): "
                      "the file was not written by the safetensors library; rewrite it with "
                      "safetensors.torch.save_file", path, t->name,
                      (unsigned long long)t->offset, ms_dtype_size(t->dtype),
                      ms_dtype_name(t->dtype), (unsigned long long)(data_start - 8),
                      (unsigned long long)(t->offset - data_start));
}

static int cmp_offset(const void *a, const void *b)
{
    const ms_tensor_info *x = *(ms_tensor_info *const *)a, *y = *(ms_tensor_info *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Two tensors may not share bytes (zero-size tensors share nothing). */
static int check_overlaps(const char *path, ms_st_file *f, ms_err *err)
{
    if (f->n_tensors < 2)
        return 0;
    ms_tensor_info **v = ms_malloc(sizeof *v * (size_t)f->n_tensors, "tensor sort", err);
    if (!v)
        return -1;
    for (int i = 0; i < f->n_tensors; i++)
        v[i] = &f->tensors[i];
    qsort(v, (size_t)f->n_tensors, sizeof *v, cmp_offset);
    int rc = 0;
    const ms_tensor_info *prev = NULL;
    for (int i = 0; i < f->n_tensors && rc == 0; i++) {
        if (v[i]->nbytes == 0)
            continue;
        if (prev && v[i]->offset < prev->offset + prev->nbytes)
            rc = ms_err_set(err, MS_E_FORMAT,
                            "%s: tensors \"%s\" and \"%s\" overlap in the data section",
                            path, prev->name, v[i]->name);
        prev = v[i];
    }
    free(v);
    return rc;
}

int ms_st_parse_header(const char *path, const char *hdr, uint64_t len,
                       uint64_t data_start, uint64_t data_size, int file_index,
                       ms_st_file *f, ms_err *err)
{
    char what[1100];
    snprintf(what, sizeof what, "%s: header", path);
    json_t *root;
    if (ms_json_load_buf(hdr, (size_t)len, what, &root, err))
        return -1;
    int rc = -1;
    if (!json_is_object(root)) {
        ms_err_set(err, MS_E_FORMAT, "%s: header is not a JSON object", path);
        goto out;
    }
    size_t n = json_object_size(root), pool = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) pool += strlen(key) + 1;
    f->tensors = ms_calloc(n ? n : 1, sizeof *f->tensors, "tensor table", err);
    f->names = ms_malloc(pool ? pool : 1, "tensor names", err);
    if (!f->tensors || !f->names)
        goto out;
    char *p = f->names;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v)) {
                ms_err_set(err, MS_E_FORMAT, "%s: __metadata__ is not an object", path);
                goto out;
            }
            json_object_foreach(v, mk, mv) if (!json_is_string(mv)) {
                ms_err_set(err, MS_E_FORMAT, "%s: __metadata__[\"%s\"] is not a string",
                           path, mk);
                goto out;
            }
            f->has_metadata = 1;
            continue;
        }
        ms_tensor_info *t = &f->tensors[f->n_tensors];
        size_t kl = strlen(key) + 1;
        memcpy(p, key, kl);
        t->name = p;
        p += kl;
        t->file = file_index;
        if (parse_entry(path, key, v, data_start, data_size, t, err))
            goto out;
        f->n_tensors++;
    }
    rc = check_overlaps(path, f, err);
    if (rc == 0) {
        /* the data section ends exactly where the last tensor does, as the
         * reference library requires: a header length one byte short (the
         * JSON still parses without its padding) reads every tensor a byte
         * off, and trailing bytes mean the same kind of mismatch */
        uint64_t end = 0;
        for (int i = 0; i < f->n_tensors; i++)
            if (f->tensors[i].offset + f->tensors[i].nbytes - data_start > end)
                end = f->tensors[i].offset + f->tensors[i].nbytes - data_start;
        if (end != data_size)
            rc = ms_err_set(err, MS_E_FORMAT, "%s: the data section holds %llu bytes but the "
                            "tensors end at %llu: the header length (%llu) does not match the "
                            "header, or the file has bytes no tensor owns", path,
                            (unsigned long long)data_size, (unsigned long long)end,
                            (unsigned long long)len);
    }
    for (int i = 0; i < f->n_tensors && rc == 0; i++)
        rc = check_aligned(path, &f->tensors[i], data_start, err);
out:
    json_decref(root);
    return rc;
}

static void reset(ms_st_file *f)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

void ms_st_close(ms_st_file *f)
{
    if (!f)
        return;
    live_remove(f);
    if (f->map)
        munmap((void *)f->map, f->size);
    if (f->fd >= 0)
        close(f->fd);
    free(f->tensors);
    free(f->names);
    free(f->path);
    reset(f);
}

int ms_st_open(const char *path, int file_index, ms_st_file *f, ms_err *err)
{
    reset(f);
    f->path = strdup(path);
    f->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block us */
    if (!f->path || f->fd < 0) {
        ms_err_set(err, MS_E_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(f->fd, &st) || !S_ISREG(st.st_mode)) {
        ms_err_set(err, MS_E_IO, "%s: not a regular file", path);
        goto fail;
    }
    f->size = (uint64_t)st.st_size;
    if (f->size < 8) {
        ms_err_set(err, MS_E_FORMAT,
                   "%s: file is %llu bytes, too short for the 8-byte header length",
                   path, (unsigned long long)f->size);
        goto fail;
    }
    f->map = ms_map_file_huge(f->fd, f->size);
    if (!f->map) {
        ms_err_set(err, MS_E_IO, "%s: mmap failed: %s", path, strerror(errno));
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | f->map[i];
    if (hlen > f->size - 8 || hlen > MS_ST_MAX_HEADER || hlen < 2) {
        ms_err_set(err, MS_E_FORMAT,
                   "%s: header length %llu is impossible for a %llu-byte file "
                   "(max %u): truncated or not a safetensors file",
                   path, (unsigned long long)hlen, (unsigned long long)f->size,
                   MS_ST_MAX_HEADER);
        goto fail;
    }
    f->data_start = 8 + hlen;
    if (ms_st_parse_header(path, (const char *)f->map + 8, hlen, f->data_start,
                           f->size - f->data_start, file_index, f, err))
        goto fail;
    live_add(f);
    return 0;
fail:
    ms_st_close(f);
    return -1;
}
