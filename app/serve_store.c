/* moestream serve: responses of the Responses API kept for a while, as
 * OpenAI keeps them (store, the default): a request naming one in
 * previous_response_id continues its conversation, and GET / DELETE
 * /v1/responses/ID read or drop it. Kept in memory, the oldest dropped
 * first beyond SRV_STORE_MAX responses or SRV_STORE_BYTES bytes; a
 * continued conversation's prompt comes back from the prompt cache, so
 * what it costs is its new tokens. Thread-safe (connections read, the
 * worker writes). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

struct srv_stored {
    char id[48];
    char *conversation;        /* JSON array of chat messages, the answer last */
    char *response;            /* the response object */
    size_t bytes;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void drop(srv_store *st, int i)
{
    st->bytes -= st->e[i].bytes;
    free(st->e[i].conversation);
    free(st->e[i].response);
    memmove(st->e + i, st->e + i + 1, sizeof *st->e * (size_t)(st->n - i - 1));
    st->n--;
}

void srv_store_put(srv_store *st, const char *id, char *conversation, char *response)
{
    size_t bytes = strlen(conversation) + strlen(response);
    pthread_mutex_lock(&mu);
    if (!st->e && !(st->e = calloc(SRV_STORE_MAX, sizeof *st->e))) {
        pthread_mutex_unlock(&mu);
        free(conversation);
        free(response);
        return;
    }
    while (st->n && (st->n == SRV_STORE_MAX || st->bytes + bytes > SRV_STORE_BYTES))
        drop(st, 0); /* the oldest */
    struct srv_stored *s = &st->e[st->n++];
    snprintf(s->id, sizeof s->id, "%s", id);
    s->conversation = conversation;
    s->response = response;
    s->bytes = bytes;
    st->bytes += bytes;
    pthread_mutex_unlock(&mu);
}

static int find(const srv_store *st, const char *id)
{
    for (int i = st->n - 1; i >= 0; i--)
        if (!strcmp(st->e[i].id, id))
            return i;
    return -1;
}

char *srv_store_get(srv_store *st, const char *id, int conversation)
{
    pthread_mutex_lock(&mu);
    int i = find(st, id);
    char *s = i < 0 ? NULL : strdup(conversation ? st->e[i].conversation : st->e[i].response);
    pthread_mutex_unlock(&mu);
    return s;
}

int srv_store_delete(srv_store *st, const char *id)
{
    pthread_mutex_lock(&mu);
    int i = find(st, id);
    if (i >= 0)
        drop(st, i);
    pthread_mutex_unlock(&mu);
    return i >= 0;
}

void srv_store_free(srv_store *st)
{
    while (st->n)
        drop(st, st->n - 1);
    free(st->e);
    st->e = NULL;
}
