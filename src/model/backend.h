/* backend.h — which op table a rank computes with: the CUDA backend on the GPU of its local rank when the build
 * has it and a GPU is visible (the bf16, fp16 or fp32 table, as the deck's precision), the CPU backend otherwise.
 * QWENFT_BACKEND=cpu|cuda forces a choice (cuda without a GPU is an error). */
#ifndef QF_BACKEND_H
#define QF_BACKEND_H
#include <stddef.h>
#include <stdint.h>
#include "ops.h"
#include "deck/deck.h"

/* Picks and initialises the backend for this rank; describes it in info. 0 or an exit code. */
int qf_backend_select(const qf_deck *d, int local_rank, const qf_ops **ops, char *info, size_t n, qf_err *e);
/* Peak bytes the backend's allocator has handed out (GPU), or 0 on the CPU backend. */
size_t qf_backend_peak_bytes(const qf_ops *ops);
/* pin_memory: page-locks host memory [p, p+bytes) for fast asynchronous copies when the backend is a GPU (no-op
 * on CPU ranks). Returns 1 if pinned; a failure is not fatal (copies stay correct, only slower) and says so
 * through *why. qf_backend_unpin undoes it. */
int qf_backend_pin(const qf_ops *ops, void *p, size_t bytes, const char **why);
void qf_backend_unpin(const qf_ops *ops, void *p);

/* Bytes the backend's allocator holds now (GPU), or 0 on the CPU backend. */
size_t qf_backend_current_bytes(const qf_ops *ops);
/* The allocator's mark (the GPU tables number their alloc() calls; 0 on the CPU backend), and what a run left by
 * longjmp gives back: every buffer of an alloc() after the mark still held, freed (their bytes; 0 on the CPU
 * backend, whose buffers a step left behind stay: src/train/train.c). */
uint64_t qf_backend_alloc_mark(const qf_ops *ops);
/* Memory for an allocation of the first step that failed, when the run's out-of-memory hook allows it
 * (kernels/base/util.h qf_oom_rescue): managed memory on a GPU table (it may live in host memory: slow, but the
 * step completes), calloc on the CPU table; freed by the table's free(). NULL when even that fails. */
void *qf_backend_alloc_rescue(const qf_ops *ops, size_t bytes);
size_t qf_backend_free_since(const qf_ops *ops, uint64_t mark);
/* The device memory a run may plan with: gpu_memory_limit_gb when set, else the GPU's free memory plus what the
 * backend holds; 0 on the CPU backend (no device budget). */
size_t qf_backend_device_budget(const qf_ops *ops, const qf_deck *d);

#endif
