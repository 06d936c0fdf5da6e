/* Reading whole small files (configs, tokenizers, templates, requests)
 * without ever blocking: opened O_NONBLOCK, checked to be a regular file
 * with fstat before anything is read, and bounded in size, so a FIFO, a
 * device or /dev/zero in place of a file is an error, not a hang. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

/* A pipe the user named (process substitution, a FIFO): read to its end,
 * blocking, at most max bytes. */
static int read_stream(int fd, const char *path, size_t max, char **buf, size_t *len,
                       ms_error *err)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    size_t cap = 65536, n = 0;
    char *b = malloc(cap + 1);
    for (;;) {
        if (!b) {
            close(fd);
            return ms_err_set(err, MS_E_NOMEM, "%s: out of memory reading it", path);
        }
        if (n == cap) {
            if (cap > max) {
                free(b);
                close(fd);
                return ms_err_set(err, MS_E_IO, "%s: more than the %zu bytes this input may "
                                  "have", path, max);
            }
            char *p = realloc(b, 2 * cap + 1);
            if (!p)
                free(b);
            b = p;
            cap *= 2;
            continue;
        }
        ssize_t k = read(fd, b + n, cap - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int e = errno;
            free(b);
            close(fd);
            return ms_err_set(err, MS_E_IO, "%s: read error: %s", path, strerror(e));
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    if (n > max) {
        free(b);
        return ms_err_set(err, MS_E_IO, "%s: more than the %zu bytes this input may have", path,
                          max);
    }
    b[n] = 0;
    *buf = b;
    if (len)
        *len = n;
    return 0;
}

static int read_any(const char *path, size_t max, int streams, char **buf, size_t *len,
                    ms_error *err)
{
    *buf = NULL;
    if (len)
        *len = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return ms_err_set(err, MS_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        close(fd);
        return ms_err_set(err, MS_E_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (streams && S_ISFIFO(st.st_mode))
        return read_stream(fd, path, max, buf, len, err);
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ms_err_set(err, MS_E_IO, "%s: not a regular file%s", path,
                          streams ? " or a pipe" : "");
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return ms_err_set(err, MS_E_IO, "%s: %lld bytes, more than the %zu this file may have",
                          path, (long long)st.st_size, max);
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *b = malloc(n + 1);
    if (!b) {
        close(fd);
        return ms_err_set(err, MS_E_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    while (got < n) {
        ssize_t k = read(fd, b + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int e = k < 0 ? errno : 0;
            free(b);
            close(fd);
            return ms_err_set(err, MS_E_IO, "%s: short read (%zu of %zu bytes)%s%s", path, got,
                              n, e ? ": " : "", e ? strerror(e) : "");
        }
        got += (size_t)k;
    }
    close(fd);
    b[n] = 0;
    *buf = b;
    if (len)
        *len = n;
    return 0;
}

int ms_read_file(const char *path, size_t max, char **buf, size_t *len, ms_error *err)
{
    return read_any(path, max, 0, buf, len, err);
}

int ms_read_input(const char *path, size_t max, char **buf, size_t *len, ms_error *err)
{
    return read_any(path, max, 1, buf, len, err);
}
