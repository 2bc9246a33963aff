/* ops_cpu.c — the CPU op table (fp32, OpenMP): host memory, act = float, kernels in the other files of kernels/cpu. */
#include "cpu_impl.h"
#include "ops.h"
#include "util.h"
#include <stdlib.h>
#include <string.h>

static void *cpu_alloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    qf_host_hugepages(p, bytes); /* the table's large tensors in 2 MiB pages where the kernel offers them */
    return p;
}
static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memmove(dst, src, bytes);
}
static void cpu_zero(void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}
static void cpu_sync(void) {}
static int cpu_copy_start(void *dst, const void *src, size_t bytes, int dir) {
    (void)dir;
    cpu_copy(dst, src, bytes);
    return 0;
}
static void cpu_copy_finish(int ticket, int host_wait) {
    (void)ticket;
    (void)host_wait;
}

static void cpu_copy_wait(int ticket) { (void)ticket; }
/* one thread of work: the side stream's ops run at once, in order */
static void cpu_side_begin(void) {}
static int cpu_side_mark(void) { return 0; }
static void cpu_side_end(void) {}
static void cpu_side_wait(int mark) { (void)mark; }
static void cpu_range_push(const char *name) { (void)name; }
static void cpu_range_pop(void) {}
static void cpu_copy_bytes(uint64_t bytes[2]) { bytes[QF_COPY_H2D] = bytes[QF_COPY_D2H] = 0; } /* no link to cross */
/* no graphs on the host: the work runs as it is queued */
static int cpu_graph_run(uint64_t key, uint64_t family, void (*body)(void *arg), void *arg) {
    (void)key, (void)family;
    if (body) body(arg);
    return 0;
}

static const qf_ops cpu_ops = {
    .name = "cpu",
    .act_bytes = sizeof(float),
    .act_dtype = QF_DT_F32,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .act_from_f32 = cpu_act_from_f32,
    .act_to_f32 = cpu_act_to_f32,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .matmul_fwd = cpu_matmul_fwd,
    .matmul_bwd = cpu_matmul_bwd,
    .matmul_fwd_add = cpu_matmul_fwd_add,
    .rope_fwd = cpu_rope_fwd,
    .rope_bwd = cpu_rope_bwd,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .attention_paged = cpu_attention_paged,
    .copy_start = cpu_copy_start,
    .copy_finish = cpu_copy_finish,
    .copy_wait = cpu_copy_wait,
    .side_begin = cpu_side_begin,
    .side_mark = cpu_side_mark,
    .side_end = cpu_side_end,
    .side_wait = cpu_side_wait,
    .range_push = cpu_range_push,
    .range_pop = cpu_range_pop,
    .copy_bytes = cpu_copy_bytes,
    .argmax_rows = cpu_argmax_rows,
    .decode_qkv = cpu_decode_qkv,
    .decode_mlp = cpu_decode_mlp,
    .graph_run = cpu_graph_run,
    .kv_append_paged = NULL, /* ops.h: one attention_paged for every token keeps serve's greedy == generate's */
    .attention_prompt = NULL,
    .argmax_rows_dev = cpu_argmax_rows, /* host memory is the CPU table's backend memory */
    .qkv_rope = cpu_qkv_rope,
    .swiglu_joined = cpu_swiglu_joined,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .add_inplace = cpu_add_inplace,
    .classifier = cpu_classifier,
    .sumsq = cpu_sumsq,
    .sumsq_to = cpu_sumsq_to,
    .scale = cpu_scale,
    .nonfinite = cpu_nonfinite,
    .adamw = cpu_adamw,
};

const qf_ops *qf_ops_cpu(void) { return &cpu_ops; }

static void cpu_kv_append_op(void *kp, void *vp, const void *k, const void *v, const int32_t *seq, const int32_t *pos,
                             const int32_t *btab, int N, int maxb, int bs, int KV, int D) {
    cpu_kv_append_paged(kp, vp, k, v, seq, pos, btab, N, maxb, bs, KV, D);
}
void qf_ops_cpu_with_prompt(qf_ops *out) {
    *out = cpu_ops;
    out->kv_append_paged = cpu_kv_append_op;
    out->attention_prompt = cpu_attention_fwd;
}
