// side_cuda.cu — the side stream (ops.h side_begin / side_mark / side_end / side_wait): work that overlaps what the
// compute stream runs after it, ordered by events and never by the host (the ZeRO engine's AdamW of unit u running
// while the next forward computes units before u; the forward's use of unit u waits for u's mark).
//
// side_begin records an event on the compute stream and makes the side stream wait for it, then points the
// context's `stream` (every op's stream: qfc_stream()) at the side stream until side_end; side_mark records the next
// event of a ring of QF_SIDE_MARKS on it; side_wait makes the compute stream wait for a mark's event (the wait takes
// the event's state at the call: a later re-record of the ring slot does not move it). Both streams are non-blocking
// streams of the context's device; the side stream is created at the first side_begin.
#include "cuda_common.cuh"

void cu_side_begin(void) {
    qf_cuda_ctx &c = qfc();
    if (c.side_on || c.side_skip) QF_FATAL("CUDA backend: side_begin inside a side region");
    if (qfc_capture_spoiled("side_begin")) { // the graph is thrown away and the body reruns eagerly: stay on the stream
        c.side_skip = 1;
        return;
    }
    if (!c.side_stream) {
        CHECK_CUDA(cudaStreamCreateWithFlags(&c.side_stream, cudaStreamNonBlocking));
        CHECK_CUDA(cudaEventCreateWithFlags(&c.side_fork, cudaEventDisableTiming));
        c.side_ev = (cudaEvent_t *)qf_calloc(QF_SIDE_MARKS, sizeof(cudaEvent_t));
        for (int i = 0; i < QF_SIDE_MARKS; i++) CHECK_CUDA(cudaEventCreateWithFlags(&c.side_ev[i], cudaEventDisableTiming));
    }
    CHECK_CUDA(cudaEventRecord(c.side_fork, c.stream));
    CHECK_CUDA(cudaStreamWaitEvent(c.side_stream, c.side_fork, 0));
    c.main_stream = c.stream;
    c.stream = c.side_stream;
    c.side_on = 1;
}

int cu_side_mark(void) {
    qf_cuda_ctx &c = qfc();
    if (c.side_skip) return -1;
    if (!c.side_on) QF_FATAL("CUDA backend: side_mark outside a side region");
    const int m = c.side_next++;
    CHECK_CUDA(cudaEventRecord(c.side_ev[m % QF_SIDE_MARKS], c.side_stream));
    return m;
}

void cu_side_end(void) {
    qf_cuda_ctx &c = qfc();
    if (c.side_skip) {
        c.side_skip = 0;
        return;
    }
    if (!c.side_on) QF_FATAL("CUDA backend: side_end without side_begin");
    c.stream = c.main_stream;
    c.side_on = 0;
}

void cu_side_wait(int mark) {
    qf_cuda_ctx &c = qfc();
    if (mark < 0) return;
    if (c.side_on || c.side_skip) QF_FATAL("CUDA backend: side_wait inside a side region");
    if (mark >= c.side_next || c.side_next - mark > QF_SIDE_MARKS)
        QF_FATAL("CUDA backend: side mark %d is not live (%d marks issued, %d kept)", mark, c.side_next, (int)QF_SIDE_MARKS);
    CHECK_CUDA(cudaStreamWaitEvent(c.stream, c.side_ev[mark % QF_SIDE_MARKS], 0));
}
