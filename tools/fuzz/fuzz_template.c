/* libFuzzer target for what a client's chat request does to a release chat
 * template: the first input byte picks one of the templates in
 * $MS_TEMPLATES (default ../shared/templates) and the render options, the
 * rest is the OpenAI request body, rendered as the server renders it
 * (ms_chat_template_render: messages, tools, chat_template_kwargs). The
 * render may fail, with a message; nothing may crash, leak, read out of
 * bounds or hang. Seeds: the suite's chat requests
 * (tests/runtime/chat_requests). Build and run: tools/fuzz/run.sh template. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moestream.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_TEMPLATES = 32 };
static ms_chat_template *templates[MAX_TEMPLATES];
static int n_templates;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *env = getenv("MS_TEMPLATES");
    const char *dir = env && *env ? env : "../shared/templates";
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "fuzz_template: no templates in %s\n", dir);
        exit(1);
    }
    char names[MAX_TEMPLATES][256];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < MAX_TEMPLATES;) {
        size_t k = strlen(e->d_name);
        if (k > 6 && !strcmp(e->d_name + k - 6, ".jinja"))
            snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    for (int i = 0; i < n; i++) {
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        ms_error err = {0};
        if (ms_chat_template_open(NULL, path, NULL, &templates[n_templates], &err) == 0)
            n_templates++;
        else
            fprintf(stderr, "fuzz_template: %s\n", err.msg);
    }
    if (!n_templates)
        exit(1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int pick = data[0];
    char *req = malloc(size);
    if (!req)
        return 0;
    memcpy(req, data + 1, size - 1);
    req[size - 1] = 0;
    ms_template_opts o = {.add_generation_prompt = pick >> 7 & 1, .now = 1768435200,
                          .thinking = (pick >> 5 & 3) - 1,
                          .reasoning_effort = pick & 16 ? "high" : NULL,
                          .bos_token = "<s>", .eos_token = "</s>"};
    char *out = NULL;
    ms_error err = {0};
    if (ms_chat_template_render(templates[(pick & 15) % n_templates], req, &o, &out, &err)) {
        if (!err.msg[0] || out)
            abort();
    } else if (!out) {
        abort();
    }
    free(out);
    free(req);
    return 0;
}
