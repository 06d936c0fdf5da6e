/* Minimal test harness shared by every C test binary.
 *
 * A test binary runs test cases (TEST_CASE) made of checks (CHECK*); it
 * prints one "PASS name" or "FAIL name: why" line per case and exits 1 if any
 * case failed. tests/run.sh tallies these lines over all binaries and
 * scripts and prints the closing "N passed, N failed". */
#ifndef MS_TEST_H
#define MS_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_case_failed, t_passed, t_failed;
static const char *t_case_name;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            if (!t_case_failed)                                                \
                printf("FAIL %s: ", t_case_name);                              \
            else                                                               \
                printf("     %s: ", t_case_name);                              \
            printf("%s:%d: ", __FILE__, __LINE__);                             \
            printf(__VA_ARGS__);                                               \
            printf("\n");                                                      \
            t_case_failed = 1;                                                 \
        }                                                                      \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                        \
    CHECK(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"",       \
          (needle), (hay))

/* Runs fn as one test case named after it. */
#define TEST_CASE(fn) t_run_case(#fn, fn)

static inline void t_run_case(const char *name, void (*fn)(void))
{
    t_case_name = name;
    t_case_failed = 0;
    fn();
    if (t_case_failed) {
        t_failed++;
    } else {
        t_passed++;
        printf("PASS %s\n", name);
    }
    fflush(stdout);
}

static inline int t_finish(void)
{
    return t_failed ? 1 : 0;
}

/* Directory holding the shared upstream fixtures (../shared/fixtures from the
 * repo root unless MOESTREAM_FIXTURES says otherwise). */
static inline const char *t_fixtures_dir(void)
{
    const char *e = getenv("MOESTREAM_FIXTURES");
    return e && *e ? e : "../shared/fixtures";
}

/* The suite's work folder ($MS_TMP, else /tmp). */
static inline const char *t_tmpdir(void)
{
    const char *t = getenv("MS_TMP");
    return t && *t ? t : "/tmp";
}

/* Writes a tiny checkpoint with tools/tinyckpt/<gen> (a script and its
 * arguments) into out; the writer's exit status. */
static inline int t_make_model(const char *gen, const char *out)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/tinyckpt/%s --out %s >/dev/null 2>&1",
             gen, out);
    return system(cmd);
}

/* The lowest index of the largest of n values. */
static inline int t_argmax(const float *l, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b])
            b = i;
    return b;
}

#endif
