/* Notices for the caller: the library never prints.
 *
 * A notice is one sentence about something the user should know but that
 * is not an error (a fallback taken, a size chosen for them). The library
 * hands it to the caller's function, which decides where it goes; with no
 * function it is dropped. */
#ifndef MS_BASE_LOG_H
#define MS_BASE_LOG_H

typedef struct ms_logger {
    void (*fn)(void *user, const char *line);
    void *user;
} ms_logger;

/* Formats one notice (no trailing newline) and passes it to lg->fn; lg may
 * be NULL. */
void ms_logf(const ms_logger *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
