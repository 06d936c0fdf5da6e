/* One safetensors file, memory-mapped read-only and fully validated.
 *
 * Layout: u64 LE header length N, N bytes of JSON header
 * {"__metadata__": {str: str}?, name: {"dtype", "shape", "data_offsets"}},
 * then the data section; offsets are relative to the data section.
 *
 * Refuses (MS_E_FORMAT, naming the file and the tensor): a header length
 * past the end of the file or above 100 MiB, invalid JSON or UTF-8, duplicate
 * names, an unknown dtype, a shape that is not a list of non-negative
 * integers, offsets out of the data section or overlapping another tensor,
 * and a byte size different from product(shape) x dtype size. No pointer into
 * the mapping is handed out before these checks pass. */
#ifndef MS_FORMAT_SAFETENSORS_H
#define MS_FORMAT_SAFETENSORS_H

#include <stdint.h>

#include "base/error.h"
#include "format/dtype.h"

#define MS_MAX_DIMS 8
#define MS_ST_MAX_HEADER (100u << 20)

typedef struct ms_tensor_info {
    const char *name;            /* owned by the file's string pool */
    ms_dtype dtype;
    int n_dims;
    int64_t shape[MS_MAX_DIMS];
    uint64_t offset;             /* absolute byte offset in the file */
    uint64_t nbytes;
    int file;                    /* index of the file in its checkpoint */
} ms_tensor_info;

typedef struct ms_st_file {
    char *path;
    int fd;
    uint64_t size;               /* file size in bytes */
    const uint8_t *map;          /* whole file, PROT_READ; NULL when empty */
    uint64_t data_start;         /* 8 + header length */
    int n_tensors;
    ms_tensor_info *tensors;     /* in header order */
    char *names;                 /* string pool for tensor names */
    int has_metadata;            /* a __metadata__ entry was present */
} ms_st_file;

/* Opens, maps and validates path. On failure f is left closed (safe to
 * pass to ms_st_close). `file_index` is stored in every tensor's info. */
int ms_st_open(const char *path, int file_index, ms_st_file *f, ms_err *err);
void ms_st_close(ms_st_file *f);

/* Validates a header already in memory (used by ms_st_open and tests):
 * parses `hdr` (len bytes) for a file whose data section has data_size
 * bytes and starts at data_start. */
int ms_st_parse_header(const char *path, const char *hdr, uint64_t len,
                       uint64_t data_start, uint64_t data_size, int file_index,
                       ms_st_file *f, ms_err *err);

/* Describes the mapped shard byte at addr ("<file>: offset N, in tensor T")
 * into buf; returns 0 when addr lies in no open shard. Async-signal-safe
 * enough for a fatal-signal handler (no locks, no allocation). */
int ms_st_describe_address(const void *addr, char *buf, int cap);

/* Number of elements of a tensor (product of its shape). */
int64_t ms_tensor_numel(const ms_tensor_info *t);

/* "[a, b, c]" into buf. */
const char *ms_shape_str(const int64_t *shape, int n_dims, char *buf, int cap);

#endif
