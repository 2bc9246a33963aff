/* backend.c — see backend.h. */
#include "backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef QWENFT_HAVE_CUDA
#include <cuda_runtime_api.h> /* the qf_cuda_* and qf_ops_cuda* functions are declared in ops.h */
#endif

/* fp8.enabled on a rank that has no fp8-capable GPU: a deck error (exit 2) that says why */
static int fp8_refuse(const qf_deck *d, const char *why, qf_err *e) {
    return qf_err_set(e, QF_EXIT_INPUT, "key 'fp8.enabled' (fp8.recipe \"%s\"): %s; remove fp8 or run on a GPU with "
                      "fp8 tensor cores (compute capability 8.9 or newer: RTX 40xx/L4/L40, H100/H200, B200)",
                      d->fp8_recipe == QF_FP8R_ROWWISE ? "rowwise" : "tensorwise", why);
}

int qf_backend_select(const qf_deck *d, int local_rank, const qf_ops **ops, char *info, size_t n, qf_err *e) {
    const char *want = getenv("QWENFT_BACKEND");
    if (want && strcmp(want, "cpu") && strcmp(want, "cuda"))
        return qf_err_set(e, QF_EXIT_INPUT, "QWENFT_BACKEND=%s: expected cpu or cuda", want);
    *ops = qf_ops_cpu();
    snprintf(info, n, "cpu (fp32, OpenMP)");
#ifdef QWENFT_HAVE_CUDA
    if (!want || !strcmp(want, "cuda")) {
        int ndev = qf_cuda_device_count();
        if (ndev > 0) {
            /* one GPU per local rank; every GPU of the node stays visible so NCCL sees the whole topology */
            int dev = local_rank % ndev;
            if (cudaSetDevice(dev) != cudaSuccess)
                return qf_err_set(e, QF_EXIT_RUNTIME, "cannot select GPU %d for local rank %d", dev, local_rank);
            /* bf16 and fp16 keep fp32 master weights and Adam moments (src/zero/zero.c); fp16 adds DeepSpeed's dynamic loss
             * scaling (src/train/loss_scale.c: an overflowing step is skipped and the scale lowered); fp8 is the bf16
             * table with the decoder's linear layers on fp8 tensor cores (the deck requires bf16 with it) */
            const qf_ops *o = d->fp16 ? qf_ops_cuda_f16() : d->bf16 ? qf_ops_cuda() : qf_ops_cuda_f32();
            char why[256] = "";
            if (o && d->fp8) {
                o = qf_ops_cuda_fp8(d->fp8_recipe == QF_FP8R_ROWWISE ? QF_FP8_ROWWISE : QF_FP8_TENSORWISE, why,
                                    (int)sizeof why);
                if (!o) return fp8_refuse(d, why, e);
                qf_cuda_fp8_set_amax_history(d->fp8_recipe == QF_FP8R_ROWWISE ? 0 : d->fp8_amax_history_len);
                qf_cuda_fp8_set_save_inputs(d->fp8_recipe != QF_FP8R_ROWWISE && d->fp8_save_inputs);
            }
            if (o) {
                *ops = o;
                if (d->gpu_memory_limit_gb > 0) qf_cuda_set_memory_limit((size_t)(d->gpu_memory_limit_gb * 1073741824.0));
                const char *prec = d->fp16   ? "fp16 with fp32 master, dynamic loss scaling"
                                   : d->fp8  ? (d->fp8_recipe == QF_FP8R_ROWWISE
                                                    ? "bf16 with fp32 master, fp8 rowwise linear layers"
                                                    : "bf16 with fp32 master, fp8 tensorwise linear layers")
                                   : d->bf16 ? "bf16 with fp32 master"
                                             : "fp32";
                char attn[160];
                qf_cuda_attention_describe(attn, (int)sizeof attn);
                /* why: how the fp8 table runs where it is not the plain way (rowwise without outer-vector kernels) */
                snprintf(info, n, "cuda (GPU %d of %d, %s%s%s%s%s; attention: %s)", dev, ndev, prec, why[0] ? " (" : "",
                         why, why[0] ? ")" : "", d->gpu_memory_limit_gb > 0 ? ", gpu_memory_limit_gb set" : "", attn);
                return 0;
            }
        }
    }
#endif
    if (want && !strcmp(want, "cuda")) return qf_err_set(e, QF_EXIT_RUNTIME, "QWENFT_BACKEND=cuda but no usable GPU");
#ifdef QWENFT_HAVE_CUDA
    if (d->fp8) return fp8_refuse(d, want ? "this rank runs on the CPU backend (QWENFT_BACKEND=cpu)"
                                          : "this rank runs on the CPU backend (no usable GPU)", e);
#else
    if (d->fp8) return fp8_refuse(d, "this rank runs on the CPU backend (qwen-ft was built without CUDA)", e);
#endif
    return 0;
}

/* the CUDA allocator's peak (peak 1) or current bytes on a CUDA table; 0 on the CPU table */
static size_t backend_cuda_bytes(const qf_ops *ops, int peak) {
#ifdef QWENFT_HAVE_CUDA
    if (!strncmp(ops->name, "cuda", 4)) return peak ? qf_cuda_peak_bytes() : qf_cuda_current_bytes();
#endif
    (void)ops;
    (void)peak;
    return 0;
}

size_t qf_backend_peak_bytes(const qf_ops *ops) { return backend_cuda_bytes(ops, 1); }

size_t qf_backend_current_bytes(const qf_ops *ops) { return backend_cuda_bytes(ops, 0); }

void *qf_backend_alloc_rescue(const qf_ops *ops, size_t bytes) {
#ifdef QWENFT_HAVE_CUDA
    if (!strncmp(ops->name, "cuda", 4)) return qf_cuda_alloc_rescue(bytes);
#endif
    (void)ops;
    return calloc(1, bytes ? bytes : 1); /* the CPU table's free() is free() */
}

uint64_t qf_backend_alloc_mark(const qf_ops *ops) {
#ifdef QWENFT_HAVE_CUDA
    if (!strncmp(ops->name, "cuda", 4)) return qf_cuda_alloc_mark();
#endif
    (void)ops;
    return 0;
}

size_t qf_backend_free_since(const qf_ops *ops, uint64_t mark) {
#ifdef QWENFT_HAVE_CUDA
    if (!strncmp(ops->name, "cuda", 4)) return qf_cuda_free_since(mark);
#endif
    (void)ops;
    (void)mark;
    return 0;
}

size_t qf_backend_device_budget(const qf_ops *ops, const qf_deck *d) {
#ifdef QWENFT_HAVE_CUDA
    if (!strncmp(ops->name, "cuda", 4)) {
        if (d->gpu_memory_limit_gb > 0) return (size_t)(d->gpu_memory_limit_gb * 1073741824.0);
        size_t fr = 0, total = 0;
        if (cudaMemGetInfo(&fr, &total) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        return fr + qf_cuda_current_bytes(); /* what this process may still take, plus what it holds */
    }
#endif
    (void)ops;
    (void)d;
    return 0;
}

int qf_backend_pin(const qf_ops *ops, void *p, size_t bytes, const char **why) {
    *why = "CPU ranks need no pinning";
#ifdef QWENFT_HAVE_CUDA
    if (!strncmp(ops->name, "cuda", 4) && p && bytes) {
        cudaError_t r = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
        if (r == cudaSuccess) return 1;
        (void)cudaGetLastError();
        *why = cudaGetErrorString(r);
    }
#endif
    (void)ops;
    (void)p;
    (void)bytes;
    return 0;
}

void qf_backend_unpin(const qf_ops *ops, void *p) {
#ifdef QWENFT_HAVE_CUDA
    if (!strncmp(ops->name, "cuda", 4) && p) {
        if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
    }
#endif
    (void)ops;
    (void)p;
}
