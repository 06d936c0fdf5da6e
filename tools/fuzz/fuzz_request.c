/* libFuzzer target for the server's request parser (app/serve_request.c and
 * the other APIs' app/serve_*_request.c): any byte string as the body of
 * /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages,
 * /v1/messages/count_tokens, /api/chat and /api/generate, and as an
 * Authorization header. The parser must never crash, leak or read
 * out of bounds; on success the request must hold what the rest of the server
 * relies on, on failure the error must be a valid JSON object with a 4xx/5xx
 * status. Build and run: tools/fuzz/run.sh (clang, -fsanitize=fuzzer,address,undefined). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_request(const srv_request *r)
{
    if (r->kind != SRV_COMPLETION) {
        if (r->n_msgs < 1 || !r->msgs || !r->chat_json)
            abort();
        for (int i = 0; i < r->n_msgs; i++)
            if (!r->msgs[i].role || !r->msgs[i].content)
                abort();
    } else if (!r->prompt) {
        abort();
    }
    if (r->n_stop < 0 || r->n_stop > SRV_MAX_STOP)
        abort();
    for (int i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0])
            abort();
    if (r->max_tokens == 0 || r->max_tokens < -1)
        abort();
    if (r->have_temperature && !(r->temperature >= 0 && r->temperature <= 2))
        abort();
    if (r->have_top_p && !(r->top_p >= 0 && r->top_p <= 1))
        abort();
}

/* The error in each API's shape: a JSON object with its "error" (an object;
 * Ollama's a string). */
static void check_error(const srv_err *e)
{
    char *(*const shape[3])(const srv_err *) = {srv_error_json, srv_error_json_anthropic,
                                                srv_error_json_ollama};
    if (e->status < 400 || e->status > 599)
        abort();
    for (int k = 0; k < 3; k++) {
        char *s = shape[k](e);
        json_t *o = s ? json_loads(s, 0, NULL) : NULL, *err = json_object_get(o, "error");
        if (!(k == 2 ? json_is_string(err) : json_is_object(err)))
            abort();
        json_decref(o);
        free(s);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int kind = 0; kind < SRV_N_KINDS; kind++) {
        srv_request r;
        srv_err e;
        if (srv_parse_request(kind, (const char *)data, size, &r, &e) == 0)
            check_request(&r);
        else
            check_error(&e);
        srv_request_free(&r);
    }
    char *hdr = malloc(size + 1);
    if (hdr) {
        memcpy(hdr, data, size);
        hdr[size] = 0;
        (void)srv_auth_ok(hdr, "sekret-key");
        free(hdr);
    }
    return 0;
}
