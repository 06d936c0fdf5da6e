/* A family's hyper-parameters as a table of config.json keys (config.c):
 * one row per key with its type, range, default (or required) and the
 * field it fills, read by one reader that also prints `describe`. A family
 * states its dimensions once, and every key is range-checked by name. */
#ifndef MS_MODELS_CONFIG_H
#define MS_MODELS_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "base/error.h"

typedef enum ms_key_type {
    MS_KEY_INT,    /* int64_t field */
    MS_KEY_BOOL,   /* int field */
    MS_KEY_NUM,    /* double field; range (lo, hi] when lo_open */
} ms_key_type;

typedef struct ms_cfg_key {
    const char *key;
    ms_key_type type;
    int required;       /* else `def` when absent */
    double def;
    double lo, hi;
    int lo_open;        /* MS_KEY_NUM: lo itself refused; MS_KEY_INT: the default 0
                         * stands for a value the family derives, and 0 written
                         * in the file is refused */
    size_t off;         /* of the field in the family's struct */
} ms_cfg_key;

/* Reads every key of the table from config object c (named `file` in
 * errors) into the struct at dst; the first missing required key, wrong
 * type or value out of range is an error naming it. */
int ms_cfg_read(const json_t *c, const char *file, const ms_cfg_key *keys, int n, void *dst,
                ms_err *err);

/* String keys whose only supported value is upstream's: one present with
 * another value is refused, naming the key, the value and what `family`
 * runs. */
typedef struct ms_cfg_fixed {
    const char *key, *want;
} ms_cfg_fixed;
int ms_cfg_check_fixed(const json_t *c, const char *file, const char *family,
                       const ms_cfg_fixed *fixed, int n, ms_err *err);

/* "  key: value" for every key of the table, as read into src. */
void ms_cfg_describe(const ms_cfg_key *keys, int n, const void *src, FILE *out);

#endif
