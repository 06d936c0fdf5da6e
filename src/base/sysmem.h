/* What the machine (or the memory cgroup we run in) can give us. */
#ifndef MS_BASE_SYSMEM_H
#define MS_BASE_SYSMEM_H

#include <stdint.h>

/* Bytes available to this process now: MemAvailable from /proc/meminfo,
 * lowered to (memory.max - memory.current) of our cgroup when that is
 * tighter (so `memlimit 6G` is seen as 6G). 0 when unknown. */
uint64_t ms_mem_available(void);

/* ms_parse_size (a size as users write it) is declared in moestream.h. */

#endif
