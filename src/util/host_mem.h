/* host_mem.h — this process's host memory, and the node's (host_mem.c). */
#ifndef QF_HOST_MEM_H
#define QF_HOST_MEM_H
#include <stdint.h>

/* Resident memory of this process in bytes, and its high-water mark (VmHWM); 0 when /proc cannot tell. */
int64_t qf_mem_rss(void);
int64_t qf_mem_peak(void);
/* The node's used memory, MemTotal - MemAvailable of /proc/meminfo, in bytes (*total, when not NULL, gets
 * MemTotal); -1 when /proc cannot tell. */
int64_t qf_mem_node_used(int64_t *total);
/* The same from the text of a meminfo file (for the unit test); -1 when a field is missing. */
int64_t qf_mem_meminfo_used(const char *text, int64_t *total);
#endif
