// copy_cuda.cu — asynchronous host <-> device copies for offload (ops.h copy_start / copy_finish).
//
// Copies run on the context's copy streams, one per direction (their own DMA queues, so they overlap the kernels
// of the compute stream, the host work of the caller and each other: a gradient going down during the backward
// does not hold up the next unit's parameters coming up). copy_start orders a copy after everything queued on the compute stream so far
// (an event recorded there, waited on by the copy stream), then records the ticket's completion event. Tickets
// are sequence numbers; ticket t uses event t % QF_COPY_TICKETS of a ring created with the context. With
// QF_COPY_AFTER_PREV in dir the copy stream's own order is enough (the source was ordered by an earlier copy).
#include "cuda_common.cuh"
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

int cu_copy_start(void *dst, const void *src, size_t bytes, int flags) {
    qf_cuda_ctx &c = qfc();
    const int dir = flags & 1, after_prev = flags & QF_COPY_AFTER_PREV;
    (void)qfc_capture_spoiled("copy_start"); // not in a graph (graph_cuda.cu): the capture is thrown away
    const int t = c.copy_next++;
    cudaEvent_t done = c.copy_ev[t % QF_COPY_TICKETS];
    if (c.copy_busy[t % QF_COPY_TICKETS])
        QF_FATAL("CUDA backend: more than %d asynchronous copies outstanding", (int)QF_COPY_TICKETS);
    c.copy_busy[t % QF_COPY_TICKETS] = 1;
    c.moved[dir == QF_COPY_H2D ? QF_COPY_H2D : QF_COPY_D2H] += bytes;
    cudaStream_t s = dir == QF_COPY_H2D ? c.copy_stream : c.copy_stream_d2h;
    if (!after_prev) {
        CHECK_CUDA(cudaEventRecord(c.copy_order, c.stream));
        CHECK_CUDA(cudaStreamWaitEvent(s, c.copy_order, 0));
    }
    if (bytes)
        CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, dir == QF_COPY_H2D ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaEventRecord(done, s));
    return t;
}

void cu_copy_finish(int ticket, int host_wait) {
    qf_cuda_ctx &c = qfc();
    const int i = ticket % QF_COPY_TICKETS;
    if (!c.copy_busy[i]) QF_FATAL("CUDA backend: copy ticket %d finished twice or never started", ticket);
    if (host_wait) CHECK_CUDA(cudaEventSynchronize(c.copy_ev[i]));
    else CHECK_CUDA(cudaStreamWaitEvent(c.stream, c.copy_ev[i], 0));
    c.copy_busy[i] = 0;
}

void cu_copy_wait(int ticket) {
    qf_cuda_ctx &c = qfc();
    const int i = ticket % QF_COPY_TICKETS;
    if (!c.copy_busy[i]) QF_FATAL("CUDA backend: copy ticket %d waited on after it was finished", ticket);
    CHECK_CUDA(cudaSetDevice(c.device)); // the calling thread may be another host thread (its current device is its own)
    CHECK_CUDA(cudaEventSynchronize(c.copy_ev[i]));
}

// NVTX ranges (header-only NVTX 3: nothing happens unless a tool such as nsys is attached)
void cu_range_push(const char *name) { nvtxRangePushA(name); }
void cu_range_pop() { nvtxRangePop(); }

// The link's pinned-copy rate (ops.h qf_cuda_copy_peak): pinned host and device buffers of 256 MiB (else 64, else
// 16), a 1 MiB warm-up each way, then one timed copy each way on a stream of its own. Not in moved[].
extern "C" int qf_cuda_copy_peak(double *h2d_gbs, double *d2h_gbs) {
    *h2d_gbs = *d2h_gbs = -1;
    CHECK_CUDA(cudaSetDevice(qfc().device));
    for (size_t mib = 256; mib >= 16; mib /= 4) {
        const size_t bytes = mib << 20;
        void *host = NULL, *dev = NULL;
        if (cudaMallocHost(&host, bytes) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        if (cudaMalloc(&dev, bytes) != cudaSuccess) {
            (void)cudaGetLastError();
            CHECK_CUDA(cudaFreeHost(host));
            continue;
        }
        cudaStream_t s;
        cudaEvent_t ev[3];
        CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        for (int i = 0; i < 3; i++) CHECK_CUDA(cudaEventCreate(&ev[i]));
        CHECK_CUDA(cudaMemcpyAsync(dev, host, 1u << 20, cudaMemcpyHostToDevice, s));
        CHECK_CUDA(cudaMemcpyAsync(host, dev, 1u << 20, cudaMemcpyDeviceToHost, s));
        CHECK_CUDA(cudaEventRecord(ev[0], s));
        CHECK_CUDA(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s));
        CHECK_CUDA(cudaEventRecord(ev[1], s));
        CHECK_CUDA(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s));
        CHECK_CUDA(cudaEventRecord(ev[2], s));
        CHECK_CUDA(cudaEventSynchronize(ev[2]));
        float ms_h2d = 0, ms_d2h = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms_h2d, ev[0], ev[1]));
        CHECK_CUDA(cudaEventElapsedTime(&ms_d2h, ev[1], ev[2]));
        if (ms_h2d > 0) *h2d_gbs = (double)bytes / (ms_h2d * 1e-3) / 1e9;
        if (ms_d2h > 0) *d2h_gbs = (double)bytes / (ms_d2h * 1e-3) / 1e9;
        for (int i = 0; i < 3; i++) CHECK_CUDA(cudaEventDestroy(ev[i]));
        CHECK_CUDA(cudaStreamDestroy(s));
        CHECK_CUDA(cudaFree(dev));
        CHECK_CUDA(cudaFreeHost(host));
        return 0;
    }
    return -1;
}

void qfc_copy_init() {
    qf_cuda_ctx &c = qfc();
    CHECK_CUDA(cudaStreamCreateWithFlags(&c.copy_stream, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&c.copy_stream_d2h, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&c.copy_order, cudaEventDisableTiming));
    for (int i = 0; i < QF_COPY_TICKETS; i++) CHECK_CUDA(cudaEventCreateWithFlags(&c.copy_ev[i], cudaEventDisableTiming));
}
