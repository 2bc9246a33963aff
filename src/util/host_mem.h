/* host_mem.h — this process's host memory (host_mem.c). */
#ifndef QF_HOST_MEM_H
#define QF_HOST_MEM_H
#include <stdint.h>

/* Resident memory of this process in bytes, and its high-water mark (VmHWM); 0 when /proc cannot tell. */
int64_t qf_mem_rss(void);
int64_t qf_mem_peak(void);
#endif
