// graph_cuda.cu — CUDA graphs for repeated work (ops.h graph_run; qwen-ft serve's decode step: 141 launches of a
// Qwen2.5-7B step at batch 1, 0.42 ms of gaps between them in a 4.66 ms step, become one graph launch).
//
// A cache of QF_GRAPH_SLOTS keys, least recently used evicted. Per key:
//   1st call: body runs eagerly (the warm-up: the scratch buffer, the split counters and the cuBLASLt plans reach
//             the sizes this work needs, so the capture allocates nothing);
//   2nd call: body runs under stream capture on the compute stream (cudaStreamCaptureModeRelaxed: host-side calls
//             such as cuBLASLt's plan queries stay allowed; what must not be captured is trapped by the context:
//             copies to or from the host, syncs, alloc and free mark the capture spoiled), the graph is instantiated
//             and launched: the work runs once, as the eager call would have run it;
//   later:    cudaGraphLaunch, while the context's generation (bumped by every growth of the scratch or the split
//             counters: a captured kernel holds their pointers) is the capture's; otherwise the graph is dropped
//             and the call captures again.
// A key's family (ops.h graph_run; a decoding step's key without its attention bound): a new key whose family has a
// graph cached and current skips the warm-up (the work differs only in kernel arguments: nothing new to size) and is
// captured at once; the family's exec is then updated in place (cudaGraphExecUpdate, cheaper than an instantiation)
// and rekeyed to the new key. Where the update is refused (another launch sequence) or a buffer grew during the
// capture, the new graph is instantiated as any other. QWENFT_GRAPH_UPDATE=0 (a bench hook) turns this off.
// A growth during the capture itself (another key's work in between cannot cause one: growths happen at warm-ups)
// replaces the buffer after earlier nodes took its pointer: the graph is launched once (the old buffer is kept
// until then), then dropped. A failed capture or instantiation (an error recorded while capturing, a spoiled
// capture) throws the capture away, turns graphs off for the run with one line on stderr, and runs body eagerly:
// the captured work never ran, so running it now gives the eager result. Replays are bit for bit the eager
// sequence: the same kernels with the same arguments in the same order (the caller's key names every host value
// the work depends on; tests/gpu/test_graph_cuda.c).
#include "cuda_common.cuh"
#include <stdio.h>
#include <string.h>
#include <time.h>

enum { QF_GRAPH_SLOTS = 64 };

struct qf_graph_slot {
    uint64_t key, family;
    int state; // 0 free, 1 seen (warm-up done), 2 graph instantiated
    uint64_t gen, used;
    cudaGraphExec_t exec;
};
struct qf_graph_cache {
    qf_graph_slot s[QF_GRAPH_SLOTS];
    uint64_t tick;
    qf_cuda_graph_stat st;
};

static qf_graph_cache &cache() {
    qf_cuda_ctx &c = qfc();
    if (!c.graphs) c.graphs = (qf_graph_cache *)qf_calloc(1, sizeof(qf_graph_cache));
    return *c.graphs;
}

static void slot_clear(qf_graph_cache &g, qf_graph_slot *s) {
    if (s->state == 2) {
        CHECK_CUDA(cudaGraphExecDestroy(s->exec));
        g.st.cached--;
    }
    memset(s, 0, sizeof *s);
}

// key's slot, or a free / the least recently used one made free (NULL in *found when the key is new)
static qf_graph_slot *slot_for(qf_graph_cache &g, uint64_t key, int *found) {
    qf_graph_slot *lru = &g.s[0];
    for (int i = 0; i < QF_GRAPH_SLOTS; i++) {
        qf_graph_slot *s = &g.s[i];
        if (s->state && s->key == key) {
            *found = 1;
            return s;
        }
        if (!s->state) lru = s, lru->used = 0; // a free slot wins (used 0)
        else if (lru->state && s->used < lru->used) lru = s;
    }
    *found = 0;
    if (lru->state) {
        if (lru->state == 2) g.st.evicted++;
        slot_clear(g, lru);
    }
    return lru;
}

// graphs off for the rest of the run: one line, every cached graph destroyed
static void graphs_off(qf_graph_cache &g, const char *why, const char *detail) {
    fprintf(stderr, "qwen-ft: cuda graphs: off for the rest of the run (%s%s%s); the work runs op by op\n", why,
            detail && detail[0] ? ": " : "", detail ? detail : "");
    for (int i = 0; i < QF_GRAPH_SLOTS; i++) slot_clear(g, &g.s[i]);
    g.st.off = 1;
}

static double host_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int cu_graph_eager(uint64_t key, uint64_t family, void (*body)(void *arg), void *arg) {
    (void)key, (void)family;
    if (body) body(arg);
    return 0;
}

// body under stream capture: its graph (NULL and *why set where the capture failed: an op that cannot be captured,
// an error while capturing, the capture refused)
static cudaGraph_t capture(qf_cuda_ctx &c, void (*body)(void *arg), void *arg, const char **why, char *detail,
                           size_t cap) {
    *why = NULL, detail[0] = 0;
    c.capture_err[0] = 0;
    c.capture_spoil = NULL;
    cudaError_t e = cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        *why = "cudaStreamBeginCapture failed", snprintf(detail, cap, "%s", cudaGetErrorString(e));
        return NULL;
    }
    c.capturing = 1;
    body(arg);
    c.capturing = 0;
    cudaGraph_t graph = NULL;
    e = cudaStreamEndCapture(c.stream, &graph);
    if (c.capture_spoil) {
        *why = "the captured work called an op that cannot be captured";
        snprintf(detail, cap, "%s", c.capture_spoil);
    } else if (c.capture_err[0]) {
        *why = "an error during the capture";
        snprintf(detail, cap, "%s", c.capture_err);
    } else if (e != cudaSuccess || !graph) {
        *why = "cudaStreamEndCapture failed";
        snprintf(detail, cap, "%s", cudaGetErrorString(e));
    }
    if (*why && graph) {
        CHECK_CUDA(cudaGraphDestroy(graph));
        graph = NULL;
    }
    return graph;
}

// a failed capture or instantiation: nothing captured ran, graphs off, body run eagerly
static int capture_failed(qf_graph_cache &g, qf_graph_slot *s, void (*body)(void *arg), void *arg, const char *why,
                          const char *detail) {
    (void)cudaGetLastError();
    qfc_retired_free(); // nothing captured ran: the old buffers are free now
    if (s) slot_clear(g, s);
    graphs_off(g, why, detail);
    body(arg); // the captured work never ran
    return 0;
}

// the cached graph of `family` (0: none) that a new key of it can update: instantiated since the last growth
static qf_graph_slot *family_slot(qf_graph_cache &g, uint64_t family, uint64_t gen) {
    if (!family) return NULL;
    for (int i = 0; i < QF_GRAPH_SLOTS; i++)
        if (g.s[i].state == 2 && g.s[i].family == family && g.s[i].gen == gen) return &g.s[i];
    return NULL;
}

int cu_graph_run(uint64_t key, uint64_t family, void (*body)(void *arg), void *arg) {
    qf_cuda_ctx &c = qfc();
    qf_graph_cache &g = cache();
    if (!body) { // the buffers the graphs point into are going away
        for (int i = 0; i < QF_GRAPH_SLOTS; i++) slot_clear(g, &g.s[i]);
        return 0;
    }
    if (g.st.off || c.capturing) { // nested: the outer capture takes this work in
        body(arg);
        return 0;
    }
    const char *why = NULL;
    char detail[192] = "";
    int found = 0;
    for (int i = 0; i < QF_GRAPH_SLOTS && !found; i++) found = g.s[i].state && g.s[i].key == key;
    qf_graph_slot *f = !found && c.graph_update ? family_slot(g, family, c.gen) : NULL;
    cudaGraph_t graph = NULL;
    const double t0 = host_now();
    const uint64_t gen0 = c.gen;
    if (f) { // a new bound of a cached family: capture now, update that graph's exec in place
        f->used = ++g.tick;
        graph = capture(c, body, arg, &why, detail, sizeof detail);
        if (!graph) return capture_failed(g, NULL, body, arg, why, detail);
        cudaGraphExecUpdateResultInfo info;
        if (c.gen == gen0 && !c.nretired && cudaGraphExecUpdate(f->exec, graph, &info) == cudaSuccess) {
            CHECK_CUDA(cudaGraphDestroy(graph));
            CHECK_CUDA(cudaGraphLaunch(f->exec, c.stream));
            f->key = key;
            g.st.updated++;
            g.st.capture_s += host_now() - t0;
            return 1;
        }
        (void)cudaGetLastError(); // refused (another launch sequence) or a buffer grew: instantiate it as any other
    }
    qf_graph_slot *s = slot_for(g, key, &found);
    s->used = ++g.tick;
    if (!found && !graph) { // warm-up
        s->key = key, s->family = family, s->state = 1, s->gen = c.gen;
        g.st.warmups++;
        body(arg);
        g.st.warmup_s += host_now() - t0;
        return 0;
    }
    if (!found) s->key = key, s->family = family, s->state = 1, s->gen = gen0;
    if (s->state == 2 && s->gen == c.gen) {
        CHECK_CUDA(cudaGraphLaunch(s->exec, c.stream));
        g.st.replays++;
        return 1;
    }
    if (s->state == 2) { // the scratch or the counters moved since the capture
        CHECK_CUDA(cudaGraphExecDestroy(s->exec));
        s->state = 1;
        g.st.cached--;
        g.st.regrown++;
    }
    if (!graph) {
        graph = capture(c, body, arg, &why, detail, sizeof detail);
        if (!graph) return capture_failed(g, s, body, arg, why, detail);
    }
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    CHECK_CUDA(cudaGraphDestroy(graph));
    if (e != cudaSuccess) {
        snprintf(detail, sizeof detail, "%s", cudaGetErrorString(e));
        return capture_failed(g, s, body, arg, "cudaGraphInstantiate failed", detail);
    }
    CHECK_CUDA(cudaGraphLaunch(exec, c.stream));
    g.st.captures++;
    g.st.capture_s += host_now() - t0;
    if (c.gen != gen0 || c.nretired) { // a buffer grew during the capture: this graph serves this launch only
        qfc_retired_free();            // cudaFree waits for the launch
        CHECK_CUDA(cudaGraphExecDestroy(exec));
        s->state = 1, s->gen = c.gen;
        g.st.regrown++;
        return 1;
    }
    s->state = 2, s->gen = gen0, s->exec = exec;
    g.st.cached++;
    return 1;
}

extern "C" void qf_cuda_graph_stats(qf_cuda_graph_stat *st) {
    memset(st, 0, sizeof *st);
    qf_cuda_ctx &c = qfc();
    if (c.graphs) *st = c.graphs->st;
}

extern "C" void qf_cuda_graph_reset(void) {
    qf_cuda_ctx &c = qfc();
    if (!c.graphs) return;
    qf_graph_cache &g = *c.graphs;
    for (int i = 0; i < QF_GRAPH_SLOTS; i++) slot_clear(g, &g.s[i]);
    memset(&g, 0, sizeof g);
}
