/* test_monitor.c — the pure parts of the training monitor: the 100-step ring of the node's host memory
 * (util/step_watch.c), the growth test and the two warnings with their once-then-again-after-recovery rule, the
 * /proc/meminfo reading (util/host_mem.c) and the averaging of NVML's utilisation samples (parallel/gpu_util.c). */
#include <math.h>
#include "parallel/gpu_util.h"
#include "util/host_mem.h"
#include "util/step_watch.h"
#include "qf_test.h"

#define MIB (1024.0 * 1024.0)

static void fill(qf_watch_ring *r, int n, double v0, double per_step) {
    for (int i = 0; i < n; i++) qf_watch_ring_push(r, v0 + per_step * i);
}

static void test_ring(void) {
    qf_watch_ring r = {0};
    CHECK(qf_watch_ring_change(&r) == 0, "empty ring");
    qf_watch_ring_push(&r, 7);
    CHECK(r.n == 1 && qf_watch_ring_change(&r) == 0, "one value: no change");
    qf_watch_ring z = {0};
    fill(&z, 150, 1, 1); /* 1 .. 150: the ring keeps 51 .. 150 */
    CHECK(z.n == QF_WATCH_WINDOW, "n %d", z.n);
    CHECK(qf_watch_ring_at(&z, 0) == 51 && qf_watch_ring_at(&z, 99) == 150, "oldest %g newest %g",
          qf_watch_ring_at(&z, 0), qf_watch_ring_at(&z, 99));
    CHECK(qf_watch_ring_change(&z) == 99, "change %g", qf_watch_ring_change(&z));
    int ordered = 1;
    for (int i = 1; i < z.n; i++) ordered &= qf_watch_ring_at(&z, i) == qf_watch_ring_at(&z, i - 1) + 1;
    CHECK(ordered, "values out of order after wrapping");
}

static void test_growing(void) {
    const double g = 256 * MIB, tol = 16 * MIB;
    qf_watch_ring r = {0};
    fill(&r, 99, 10e9, 4 * MIB);
    CHECK(!qf_watch_ring_growing(&r, g, tol), "99 values are not a full window");
    qf_watch_ring_push(&r, 10e9 + 99 * 4 * MIB);
    CHECK(qf_watch_ring_growing(&r, g, tol), "+4 MiB a step through 100 steps (396 MiB) is growth");
    qf_watch_ring slow = {0};
    fill(&slow, 100, 10e9, 2 * MIB);
    CHECK(!qf_watch_ring_growing(&slow, g, tol), "+198 MiB over the window is under the threshold");
    qf_watch_ring dip = {0}, jitter = {0};
    for (int i = 0; i < 100; i++) {
        qf_watch_ring_push(&dip, 10e9 + 4 * MIB * i - (i == 60 ? 30 * MIB : 0));
        qf_watch_ring_push(&jitter, 10e9 + 4 * MIB * i - (i % 2 ? 10 * MIB : 0));
    }
    CHECK(!qf_watch_ring_growing(&dip, g, tol), "a fall of 26 MiB (beyond the tolerance) is not step-over-step growth");
    CHECK(qf_watch_ring_growing(&jitter, g, tol), "falls of 6 MiB net (within the tolerance) still grow");
    qf_watch_ring jump = {0};
    for (int i = 0; i < 100; i++) qf_watch_ring_push(&jump, i < 10 ? 10e9 : 11e9);
    CHECK(!qf_watch_ring_growing(&jump, g, tol), "one jump early in the window, then flat, is not growth");
}

static void test_util_warning(void) {
    qf_watch_params p = qf_watch_defaults();
    CHECK(p.skip_steps == 5 && p.low_steps == 20 && p.util_min == 0.90, "defaults");
    qf_watch w = {0};
    qf_watch_ring flat = {0};
    unsigned ev = 0;
    int step = 0, first_warn = 0;
    for (; step < 40; step++) { /* low from the first step: judged from step 6, warned at step 25 */
        qf_watch_ring_push(&flat, 5e9);
        ev = qf_watch_step(&w, &p, 0.5, &flat);
        if (ev & QF_WATCH_UTIL_LOW) {
            CHECK(!first_warn, "warned twice (steps %d and %d)", first_warn, step + 1);
            if (!first_warn) first_warn = step + 1;
        }
        CHECK(!(ev & ~QF_WATCH_UTIL_LOW), "step %d: events %u", step + 1, ev);
    }
    CHECK(first_warn == 25, "utilisation warning at step %d, want 25 (5 skipped + 20 low)", first_warn);
    ev = qf_watch_step(&w, &p, 0.95, &flat);
    CHECK(ev == QF_WATCH_UTIL_OK, "recovery: events %u", ev);
    ev = qf_watch_step(&w, &p, 0.97, &flat);
    CHECK(ev == 0, "still fine: events %u", ev);
    int again = 0;
    for (int i = 1; i <= 25; i++) {
        ev = qf_watch_step(&w, &p, 0.89, &flat);
        if ((ev & QF_WATCH_UTIL_LOW) && !again) again = i;
    }
    CHECK(again == 20, "after recovering, warned again after %d low steps, want 20", again);
    /* interrupted runs of low steps never warn */
    qf_watch w2 = {0};
    int any = 0;
    for (int i = 0; i < 200; i++) any |= qf_watch_step(&w2, &p, i % 19 ? 0.4 : 0.93, &flat) != 0;
    CHECK(!any, "19 low steps then a good one, repeated: no warning");
    /* unknown utilisation (CPU ranks) is never judged */
    qf_watch w3 = {0};
    any = 0;
    for (int i = 0; i < 200; i++) any |= qf_watch_step(&w3, &p, -1, &flat) != 0;
    CHECK(!any && w3.low_run == 0, "unknown utilisation: no warning");
}

static void test_mem_warning(void) {
    qf_watch_params p = qf_watch_defaults();
    qf_watch w = {0};
    qf_watch_ring r = {0};
    int warned_at = 0, warnings = 0, flat_at = 0;
    double v = 20e9;
    for (int step = 1; step <= 400; step++) {
        if (step <= 150) v += 5 * MIB;        /* a leak of 5 MiB a step */
        else if (step > 300) v += 6 * MIB;    /* it comes back after a flat stretch */
        qf_watch_ring_push(&r, v);
        unsigned ev = qf_watch_step(&w, &p, -1, &r);
        if (ev & QF_WATCH_MEM_GROWS) {
            warnings++;
            if (!warned_at) warned_at = step;
        }
        if ((ev & QF_WATCH_MEM_FLAT) && !flat_at) flat_at = step;
    }
    CHECK(warned_at == 100, "host memory warning first at step %d, want 100 (the first full window)", warned_at);
    /* flat from step 151: the window's change falls under 128 MiB once fewer than 26 growing steps are in it */
    CHECK(flat_at > 150 && flat_at <= 250, "cleared at step %d", flat_at);
    CHECK(warnings == 2, "%d host memory warnings, want 2 (the leak, and again after it cleared)", warnings);
}

static void test_meminfo(void) {
    int64_t total = 0;
    const char *t = "MemTotal:        1000 kB\nMemFree:          10 kB\nMemAvailable:     400 kB\nBuffers: 1 kB\n";
    CHECK(qf_mem_meminfo_used(t, &total) == 600 * 1024 && total == 1000 * 1024, "used %lld total %lld",
          (long long)qf_mem_meminfo_used(t, NULL), (long long)total);
    CHECK(qf_mem_meminfo_used("MemTotal: 1000 kB\nMemFree: 10 kB\n", NULL) == -1, "no MemAvailable: unknown");
    CHECK(qf_mem_meminfo_used("MemTotal: 100 kB\nMemAvailable: 400 kB\n", NULL) == -1, "available > total: unknown");
    CHECK(qf_mem_meminfo_used("XMemTotal: 100 kB\nMemAvailable: 40 kB\n", NULL) == -1, "a key must start its line");
    int64_t used = qf_mem_node_used(&total);
    CHECK(used > 0 && total > used, "this node: used %lld of %lld", (long long)used, (long long)total);
}

static void test_nvml_mean(void) {
    qf_nvml_sample s[4] = {{.ts_us = 10}, {.ts_us = 20}, {.ts_us = 30}, {.ts_us = 40}};
    s[0].v.u = 10, s[1].v.u = 50, s[2].v.u = 100, s[3].v.u = 90;
    CHECK(fabs(qf_gpu_util_mean(s, 4, 1, 15) - 0.80) < 1e-12, "unsigned samples after 15 us: %g",
          qf_gpu_util_mean(s, 4, 1, 15));
    CHECK(fabs(qf_gpu_util_mean(s, 4, 1, 0) - 0.625) < 1e-12, "all four: %g", qf_gpu_util_mean(s, 4, 1, 0));
    CHECK(qf_gpu_util_mean(s, 4, 1, 40) == -1, "none after the window's start: unknown");
    qf_nvml_sample d[2] = {{.ts_us = 5}, {.ts_us = 6}};
    d[0].v.d = 97.5, d[1].v.d = 250; /* out-of-range values are clamped */
    CHECK(fabs(qf_gpu_util_mean(d, 1, 0, 0) - 0.975) < 1e-12, "double samples");
    CHECK(qf_gpu_util_mean(d, 2, 0, 0) == 1, "clamped to 1");
    qf_nvml_sample l[1] = {{.ts_us = 5}};
    l[0].v.ull = 42;
    CHECK(fabs(qf_gpu_util_mean(l, 1, 3, 0) - 0.42) < 1e-12, "unsigned long long samples");
    CHECK(qf_gpu_util_mean(l, 1, 9, 0) == -1, "an unknown value type: unknown");
    qf_gpu_util u = {0};
    CHECK(qf_gpu_util_read(&u, 0) == -1, "a closed sampler knows nothing");
    CHECK(qf_gpu_util_open(&u, "") == -1 && u.lib == NULL, "no bus id: closed");
    qf_gpu_util_close(&u);
}

int main(void) {
    test_ring();
    test_growing();
    test_util_warning();
    test_mem_warning();
    test_meminfo();
    test_nvml_mean();
    printf("test_monitor: %d checks, %d failed\n", qf_test_checks, qf_test_failures);
    return qf_test_failures != 0;
}
