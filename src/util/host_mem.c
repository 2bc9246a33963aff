/* host_mem.c — this process's host memory as Linux reports it (/proc/self), and the node's (/proc/meminfo). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
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

/* the line "Key:   1234 kB" of a meminfo text -> bytes; -1 when absent */
static int64_t meminfo_field(const char *text, const char *key) {
    size_t k = strlen(key);
    for (const char *l = text; l && *l;) {
        long long kb;
        if (!strncmp(l, key, k) && l[k] == ':' && sscanf(l + k + 1, "%lld", &kb) == 1 && kb >= 0)
            return (int64_t)kb * 1024;
        l = strchr(l, '\n');
        if (l) l++;
    }
    return -1;
}

int64_t qf_mem_meminfo_used(const char *text, int64_t *total) {
    int64_t t = meminfo_field(text, "MemTotal"), a = meminfo_field(text, "MemAvailable");
    if (total) *total = t;
    return t < 0 || a < 0 || a > t ? -1 : t - a;
}

int64_t qf_mem_node_used(int64_t *total) {
    char buf[8192];
    size_t n = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        n = fread(buf, 1, sizeof buf - 1, f); /* MemTotal and MemAvailable are its first lines */
        fclose(f);
    }
    buf[n] = 0;
    return qf_mem_meminfo_used(buf, total);
}
