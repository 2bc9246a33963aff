/* decode_fused_cpu.c — the decoding fast path's entries (ops.h decode_qkv, decode_mlp) on the CPU table: the unfused
 * sequence of this table's own ops, in the caller's scratch, so the CPU backend's serve runs the model's fast-path
 * branch (src/model/model.c) with the values of the unfused path, bit for bit. The fused kernels are the GPU's
 * (kernels/cuda/decode_fused_cuda.cu). */
#include "cpu_impl.h"
#include "ops.h"

int cpu_decode_qkv(const qf_decode_qkv *a) {
    const int HD = a->H * a->D, KD = a->KV * a->D;
    cpu_rmsnorm_fwd(a->ln, a->rstd, a->x, a->ln_w, a->N, a->C, a->eps);
    cpu_matmul_fwd(a->q, a->ln, a->wq, a->bq, a->N, a->C, HD, 0);
    cpu_matmul_fwd(a->k, a->ln, a->wk, a->bk, a->N, a->C, KD, 0);
    cpu_matmul_fwd(a->v, a->ln, a->wv, a->bv, a->N, a->C, KD, 0);
    cpu_rope_fwd(a->q, a->pos, a->N, a->H, a->D, a->theta);
    cpu_rope_fwd(a->k, a->pos, a->N, a->KV, a->D, a->theta);
    cpu_kv_append_paged(a->kpool, a->vpool, a->k, a->v, a->seq, a->pos, a->btab, a->N, a->maxb, a->bs, a->KV, a->D);
    return 1;
}

int cpu_decode_mlp(const qf_decode_mlp *a) {
    cpu_rmsnorm_fwd(a->ln, a->rstd, a->x, a->ln_w, a->N, a->C, a->eps);
    cpu_matmul_fwd(a->gate, a->ln, a->wg, NULL, a->N, a->C, a->F, 0);
    cpu_matmul_fwd(a->up, a->ln, a->wu, NULL, a->N, a->C, a->F, 0);
    cpu_swiglu_fwd(a->out, a->gate, a->up, a->N, a->F);
    return 1;
}
