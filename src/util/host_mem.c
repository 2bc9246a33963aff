/* host_mem.c — this process's host memory as Linux reports it (/proc/self). */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include "host_mem.h"

int64_t qf_mem_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%lld %lld", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return (int64_t)res * sysconf(_SC_PAGESIZE);
}

int64_t qf_mem_peak(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    return (int64_t)kb * 1024;
}
