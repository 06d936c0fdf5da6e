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

int ms_read_file(const char *path, size_t max, char **buf, size_t *len, ms_error *err)
{
    *buf = NULL;
    if (len)
        *len = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return ms_err_set(err, MS_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return ms_err_set(err, MS_E_IO, "%s: not a regular file", path);
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
