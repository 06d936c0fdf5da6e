/* Memory available to the process, cgroup-aware. */
#include "base/sysmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t meminfo_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

static int read_u64(const char *path, uint64_t *v)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[64] = "";
    int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok || strncmp(buf, "max", 3) == 0)
        return -1;
    *v = strtoull(buf, NULL, 10);
    return 0;
}

/* cgroup v2 limit headroom for the cgroup in /proc/self/cgroup ("0::/path"). */
static uint64_t cgroup_headroom(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return 0;
    char line[1024], rel[900] = "";
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) {
            snprintf(rel, sizeof rel, "%.899s", line + 3);
            rel[strcspn(rel, "\n")] = 0;
        }
    fclose(f);
    char path[1100];
    uint64_t max, cur;
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", rel);
    if (read_u64(path, &max))
        return 0;
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", rel);
    if (read_u64(path, &cur))
        cur = 0;
    return max > cur ? max - cur : 1;
}

uint64_t ms_mem_available(void)
{
    uint64_t a = meminfo_available(), c = cgroup_headroom();
    if (c && (!a || c < a))
        return c;
    return a;
}

int64_t ms_parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end += *end == 'i' ? 1 : 0;
    if (*end == 'B')
        end++;
    if (*end)
        return -1;
    return (int64_t)(v * mul);
}
