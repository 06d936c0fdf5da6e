/* A Hugging Face model folder as released: config.json, optional
 * generation_config.json, and either model.safetensors or shards listed by
 * model.safetensors.index.json (shard names are read from the index, never
 * built). All shards are opened, mapped and validated up front.
 *
 * Tensor lookup by name is a hash table (O(1)) over every tensor of every
 * shard. Refuses: a missing config.json, no weights file, a shard named by
 * the index that is missing or unreadable (naming the shard and a tensor
 * mapped to it), a tensor the index places in a shard that does not hold it,
 * the same tensor stored in two shards. Tensors present in a shard but absent
 * from the index are kept (the family's L0 check reports them). */
#ifndef MS_FORMAT_CHECKPOINT_H
#define MS_FORMAT_CHECKPOINT_H

#include <jansson.h>

#include "format/safetensors.h"

typedef struct ms_checkpoint {
    char *dir;
    json_t *config;          /* config.json */
    json_t *gen_config;      /* generation_config.json or NULL */
    int n_files;
    ms_st_file *files;
    int64_t n_tensors;
    uint64_t total_bytes;    /* sum of tensor bytes over all shards */
    int64_t index_total_size;/* metadata.total_size of the index, -1 if none */
    /* open-addressing hash: slots hold tensor pointers or NULL */
    const ms_tensor_info **slots;
    uint64_t n_slots;
} ms_checkpoint;

int ms_ckpt_open(const char *dir, ms_checkpoint **out, ms_err *err);
void ms_ckpt_close(ms_checkpoint *ck);

/* NULL when absent. */
const ms_tensor_info *ms_ckpt_find(const ms_checkpoint *ck, const char *name);

/* Bytes of a tensor inside its shard's mapping. Valid until close. */
const void *ms_ckpt_data(const ms_checkpoint *ck, const ms_tensor_info *t);

/* The shard file path holding t. */
const char *ms_ckpt_file_of(const ms_checkpoint *ck, const ms_tensor_info *t);

/* Calls fn for every tensor (shard order, then header order). */
void ms_ckpt_foreach(const ms_checkpoint *ck,
                     void (*fn)(const ms_tensor_info *t, void *ctx), void *ctx);

/* Path of a file inside the checkpoint folder, into buf. */
const char *ms_ckpt_path(const ms_checkpoint *ck, const char *file, char *buf, size_t cap);

#endif
