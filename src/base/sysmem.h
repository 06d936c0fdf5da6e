/* What the machine (or the memory cgroup we run in) can give us. */
#ifndef MS_BASE_SYSMEM_H
#define MS_BASE_SYSMEM_H

#include <stddef.h>
#include <stdint.h>

/* Bytes available to this process now: MemAvailable from /proc/meminfo,
 * lowered to (memory.max - memory.current) of our cgroup when that is
 * tighter (so `memlimit 6G` is seen as 6G). 0 when unknown. */
uint64_t ms_mem_available(void);

/* Anonymous read-write memory of `bytes`, starting on a 2 MiB boundary and
 * asked for in transparent huge pages (MADV_HUGEPAGE). Streaming decode
 * spends its time in products over such memory, and on a virtual machine
 * every 4 KiB page costs a TLB walk through two page tables: the engine
 * cache's arena in huge pages prefilled 2x faster and decoded 5-15% faster
 * (docs/perf.md, "Huge pages"). NULL on failure, with errno. A kernel
 * without transparent huge pages, or with them set to never, still gives
 * the memory, in small pages. Release with munmap(p, bytes). */
void *ms_map_huge(size_t bytes);

/* Maps the pages of anonymous memory [p, p + bytes) in now
 * (MADV_POPULATE_WRITE), the range cut in 2 MiB-aligned shares run on the
 * compute pool. The kernel zeroes each page as it maps it, and a virtual
 * machine's host backs again memory it had taken back (free page
 * reporting) at 0.6-0.8 GB/s a thread here: the engine cache's 2.86 GB
 * under `memlimit 6G` took 4-5 s on one thread, about half on two
 * (docs/perf.md, "Starting under a memory limit"). Returns 0, or -1 with
 * errno when the kernel cannot (before Linux 5.14): the pages then map on
 * first use. */
int ms_populate(void *p, size_t bytes);

/* A whole file of `bytes` mapped read-only (shared) at a 2 MiB boundary,
 * asked for in huge pages: a page-cache folio of 2 MiB read through this
 * mapping can then be mapped whole. Where the kernel's page cache holds
 * large folios for the file system (ext4 from Linux 6.16, xfs), faults and
 * MADV_POPULATE_READ through such a mapping read PMD-sized folios; older
 * kernels give small pages, as a plain mapping does. NULL on failure, with
 * errno. Release with munmap(p, bytes). */
const void *ms_map_file_huge(int fd, size_t bytes);

/* Bytes of [p, p + bytes) mapped in huge pages now: the AnonHugePages and
 * FilePmdMapped of the mappings in /proc/self/smaps that lie inside it
 * (0 when none does), or -1 when smaps cannot be read. */
int64_t ms_huge_bytes(const void *p, size_t bytes);
/* The same over n ranges [p[i], p[i] + bytes[i]), in one read of smaps
 * (which walks the page tables of every mapping of the process): returns
 * the sum, and each range's own count in each[i] unless each is NULL. */
int64_t ms_huge_bytes_n(int n, const void *const *p, const size_t *bytes, int64_t *each);

/* The 2 MiB pieces of [p, p + bytes) (p on a 2 MiB boundary) that are not
 * mapped as whole huge pages now: fn(ctx, off, len) for each run of them,
 * in order, off and len relative to p (the last piece may be shorter, where
 * bytes is not a multiple of 2 MiB). Pieces not mapped at all count as not
 * huge. Asks the kernel's PAGEMAP_SCAN (Linux 6.7), which says it page by
 * page, where smaps only totals a whole mapping. Returns 0, or -1 with
 * errno (ENOTTY or EINVAL where the kernel has no PAGEMAP_SCAN). */
int ms_small_runs(const void *p, size_t bytes,
                  void (*fn)(void *ctx, uint64_t off, uint64_t len), void *ctx);
/* Set by tests to act as a kernel without PAGEMAP_SCAN: ms_small_runs then
 * fails with ENOTTY. */
extern int ms_small_runs_unsupported;

/* Reads [off, off + len) of the file fd, mapped whole at map (ms_map_file_huge),
 * into the page cache again: the range is unmapped from map, its cached
 * pages that no process maps are dropped (POSIX_FADV_DONTNEED) and it is
 * mapped in again (MADV_POPULATE_READ), which reads them from disk in the
 * folios the kernel now chooses. A file cached in 4 KiB pages (read
 * earlier without readahead, or while memory was fragmented) stays so, and
 * on this project's VM decode over such weights ran 1.4-1.5x and prefill 3-4x slower
 * (docs/perf.md, "Weights cached in small pages"). Returns 0, or -1 with
 * errno. */
int ms_file_reread(int fd, const void *map, uint64_t off, uint64_t len);

/* ms_parse_size (a size as users write it) is declared in moestream.h. */

#endif
