/* moestream tokenize MODEL_DIR (--text TEXT | --text-file FILE): prints the
 * ids of the text on one line, space separated, as HF tokenizers'
 * encode(text, add_special_tokens=False): special-token strings in the text
 * match as special tokens; no BOS/EOS is added. The text is read as bytes;
 * ill-formed UTF-8 is replaced by U+FFFD per maximal ill-formed subsequence
 * (see include/moestream.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int read_text_file(const char *path, char **text, size_t *len, ms_error *err)
{
    return ms_read_input(path, (size_t)1 << 30, text, len, err);
}

int cmd_tokenize(int argc, char **argv)
{
    cli_args a;
    int rc = cli_parse(CMD_TOKENIZE, argc, argv, &a);
    if (rc)
        return cli_exit(rc);
    const char *dir = a.model, *text_arg = a.prompt_text, *file = a.prompt_file;
    if (!text_arg == !file)
        return cli_usage_error("tokenize", "expected exactly one of --text and --text-file");

    ms_error err = {0};
    char *owned = NULL;
    size_t len = 0;
    if (file && read_text_file(file, &owned, &len, &err))
        return cli_fail(&err);
    const char *text = file ? owned : text_arg;
    if (!file)
        len = strlen(text_arg);

    ms_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    if (ms_tokenizer_open(dir, &tok, &err) ||
        ms_tokenizer_encode(tok, text, len, 1, &ids, &n, &err)) {
        rc = cli_fail(&err);
    } else {
        for (int64_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        if (fflush(stdout) != 0 || ferror(stdout)) {
            fprintf(stderr, "moestream: error writing the ids to stdout\n");
            rc = 1;
        }
    }
    free(ids);
    ms_tokenizer_close(tok);
    free(owned);
    return rc;
}
