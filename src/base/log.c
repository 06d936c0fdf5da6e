/* Notices passed to the caller's function (log.h). */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>

void ms_logf(const ms_logger *lg, const char *fmt, ...)
{
    if (!lg || !lg->fn)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    lg->fn(lg->user, line);
}
