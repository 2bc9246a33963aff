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

enum { QF_GRAPH_SLOTS = 64 };

struct qf_graph_slot {
    uint64_t key;
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

int cu_graph_eager(uint64_t key, void (*body)(void *arg), void *arg) {
    (void)key;
    if (body) body(arg);
    return 0;
}

int cu_graph_run(uint64_t key, void (*body)(void *arg), void *arg) {
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
    int found = 0;
    qf_graph_slot *s = slot_for(g, key, &found);
    s->used = ++g.tick;
    if (!found) { // warm-up
        s->key = key, s->state = 1, s->gen = c.gen;
        g.st.warmups++;
        body(arg);
        return 0;
    }
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
    // capture
    const uint64_t gen0 = c.gen;
    c.capture_err[0] = 0;
    c.capture_spoil = NULL;
    cudaError_t e = cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        slot_clear(g, s);
        graphs_off(g, "cudaStreamBeginCapture failed", cudaGetErrorString(e));
        body(arg);
        return 0;
    }
    c.capturing = 1;
    body(arg);
    c.capturing = 0;
    cudaGraph_t graph = NULL;
    e = cudaStreamEndCapture(c.stream, &graph);
    cudaGraphExec_t exec = NULL;
    const char *why = NULL;
    char detail[192] = "";
    if (c.capture_spoil) {
        why = "the captured work called an op that cannot be captured";
        snprintf(detail, sizeof detail, "%s", c.capture_spoil);
    } else if (c.capture_err[0]) {
        why = "an error during the capture";
        snprintf(detail, sizeof detail, "%s", c.capture_err);
    } else if (e != cudaSuccess || !graph) {
        why = "cudaStreamEndCapture failed";
        snprintf(detail, sizeof detail, "%s", cudaGetErrorString(e));
    } else {
        e = cudaGraphInstantiate(&exec, graph, 0);
        if (e != cudaSuccess) why = "cudaGraphInstantiate failed", snprintf(detail, sizeof detail, "%s", cudaGetErrorString(e));
    }
    if (graph) CHECK_CUDA(cudaGraphDestroy(graph));
    if (why) {
        (void)cudaGetLastError();
        if (exec) CHECK_CUDA(cudaGraphExecDestroy(exec));
        qfc_retired_free(); // nothing captured ran: the old buffers are free now
        slot_clear(g, s);
        graphs_off(g, why, detail);
        body(arg); // the captured work never ran
        return 0;
    }
    CHECK_CUDA(cudaGraphLaunch(exec, c.stream));
    g.st.captures++;
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
