/* libFuzzer target for tokenizer.json, the file a checkpoint folder brings:
 * the input up to its first 0xFF byte is written as MODEL_DIR/tokenizer.json
 * (in /dev/shm) and opened; the rest is encoded (special tokens parsed or
 * not by the input's length), decoded back and decoded again as a stream.
 * Opening may fail, with a message; nothing may crash, leak, read out of
 * bounds or hang. Seeds: tools/fuzz/tokenizer_seeds.py (small byte-level BPE
 * files of the released kinds). Build and run: tools/fuzz/run.sh tokenizer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moestream.h"
#include "scratch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s", scratch_path("tok"));
        mkdir(dir, 0755);
    }
    const uint8_t *ff = memchr(data, 0xFF, size);
    size_t file_n = ff ? (size_t)(ff - data) : size;
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    fwrite(data, 1, file_n, f);
    fclose(f);
    ms_tokenizer *tok;
    ms_error err = {0};
    if (ms_tokenizer_open(dir, &tok, &err)) {
        if (!err.msg[0])
            abort();
        return 0;
    }
    const char *text = ff ? (const char *)ff + 1 : "";
    size_t len = ff ? size - file_n - 1 : 0;
    int32_t *ids = NULL;
    int64_t n = 0;
    if (ms_tokenizer_encode(tok, text, len, (int)(size & 1), &ids, &n, &err) == 0) {
        char *back = NULL;
        size_t back_n = 0;
        if (ms_tokenizer_decode(tok, ids, n, &back, &back_n, &err) == 0)
            free(back);
        ms_detok *d;
        if (ms_detok_open(tok, &d, &err) == 0) {
            const char *piece;
            size_t k;
            for (int64_t i = 0; i < n; i++)
                ms_detok_push(d, ids[i], &piece, &k, &err);
            ms_detok_flush(d, &piece, &k);
            ms_detok_close(d);
        }
        free(ids);
    } else if (!err.msg[0]) {
        abort();
    }
    ms_tokenizer_close(tok);
    return 0;
}
