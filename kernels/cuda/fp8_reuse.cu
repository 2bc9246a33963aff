// fp8_reuse.cu — quantization work the fp8 linear layers reuse across calls (fp8_state.cuh): a weight's amax once per
// parameter version and its amax history (ops.h fp8_weight, fp8.amax_history_len), the previous call's fp8 x for a
// call on the same input (fp8_same_x), and the forward's q(x)^T kept for the wgrad (fp8_saved_x, fp8.save_inputs).
#include "fp8_state.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- weights: one amax per parameter version ----------------------------------------------------------------------
static void wslots_forget(qf_fp8_state *st) {
    if (st->w) memset(st->w, 0, (size_t)st->wcap * sizeof *st->w);
    if (st->wam) cu_zero(st->wam, (size_t)st->wcap * (st->hist + 1) * sizeof(unsigned));
}
static void wslots_grow(qf_fp8_state *st, int id) {
    if (id < st->wcap && st->wam) return;
    int cap = st->wcap * 2 > id + 1 ? st->wcap * 2 : id + 1;
    if (cap < 64) cap = 64;
    const size_t stride = (size_t)st->hist + 1;
    unsigned *wam = (unsigned *)cu_alloc((size_t)cap * stride * sizeof(unsigned)); // zero-filled
    if (!wam && qf_oom_rescue("the fp8 weights' scales", (size_t)cap * stride * sizeof(unsigned)))
        wam = (unsigned *)cu_alloc_rescue((size_t)cap * stride * sizeof(unsigned), 0);
    if (!wam) QF_FATAL("out of GPU memory for the fp8 weights' scales (%d parameters)", cap);
    if (st->wam) {
        cu_copy_d2d(wam, st->wam, (size_t)st->wcap * stride * sizeof(unsigned));
        cu_free(st->wam);
    }
    st->wam = wam;
    st->w = (qf_fp8_wslot *)qf_realloc(st->w, (size_t)cap * sizeof *st->w);
    memset(st->w + st->wcap, 0, (size_t)(cap - st->wcap) * sizeof *st->w);
    st->wcap = cap;
}
// the tag of this call's W (and none for the next call): *id < 0 or *ver == 0 when untagged
void fp8_tag_take(qf_fp8_state *st, int *id, uint64_t *ver) {
    *id = st->tag_set ? st->tag_id : -1;
    *ver = st->tag_set ? st->tag_ver : 0;
    st->tag_set = 0;
}
// The amax word (device) of W's scale in this call, numel = OUT * IN. Untagged: an amax pass into scratch. Tagged
// with the version saved for it: the saved word (no pass: the same scale and fp8 values as before). A new version:
// an amax pass into its slot, or with a history (and one entry at least) the history's max, *record then naming the
// entry the cast records this version's amax into (else NULL).
unsigned *fp8_weight_amax(qf_fp8_state *st, int id, uint64_t ver, const bf16 *w, size_t numel, unsigned *scratch,
                             unsigned **record) {
    *record = NULL;
    if (id < 0 || !ver) {
        CHECK_CUDA(cudaMemsetAsync(scratch, 0, sizeof(unsigned), qfc_stream()));
        fp8_amax(w, numel, scratch);
        st->n_amax++, st->n_amax_w++;
        return scratch;
    }
    wslots_grow(st, id);
    qf_fp8_wslot *s = &st->w[id];
    unsigned *slot = st->wam + (size_t)id * (st->hist + 1);
    if (s->numel && s->numel != numel)
        QF_FATAL("fp8 weight tag: parameter %d has %zu elements in this matmul, %zu before (a mistagged matmul)", id,
                 numel, s->numel);
    if (s->version == ver) {
        st->n_w_reused++;
        return slot;
    }
    s->version = ver, s->numel = numel;
    if (st->hist > 0 && s->count > 0) {
        fp8_hist_step(slot, st->hist, s->pos, 0);
        *record = slot + 1 + s->pos;
        st->n_w_delayed++;
    } else {
        CHECK_CUDA(cudaMemsetAsync(slot, 0, sizeof(unsigned), qfc_stream()));
        fp8_amax(w, numel, slot);
        st->n_amax++, st->n_amax_w++;
        if (st->hist > 0) fp8_hist_step(slot, st->hist, s->pos, 1);
    }
    if (st->hist > 0) {
        s->pos = (s->pos + 1) % st->hist;
        if (s->count < st->hist) s->count++;
    }
    return slot;
}

// ---- an input shared by consecutive calls (ops.h fp8_same_x) ----------------------------------------------------
// At a call's start: the promise and the copy the previous call left (then none: a call that casts x records it).
qf_fp8_xcopy fp8_xcopy_take(qf_fp8_state *st, int *promised) {
    *promised = st->same_x;
    st->same_x = 0;
    qf_fp8_xcopy prev = st->xc;
    st->xc.kind = 0;
    return prev;
}
// after the buffers are sized: the previous copy is this call's x of this kind, its buffers not reallocated since
int fp8_xcopy_fits(qf_fp8_state *st, const qf_fp8_xcopy *prev, int promised, int kind, const void *x, int N,
                      int IN) {
    const int ok = promised && prev->kind == kind && prev->x == x && prev->N == N && prev->IN == IN &&
                   prev->buf == st->buf[0] && prev->sc == st->sc;
    if (ok) st->n_x_reused++;
    return ok;
}
// buf[0] and sc[0] hold x's fp8 copy of this kind, unless this call's output [out, out + out_bytes) overlaps x (x
// is not what it was once the call returns)
void fp8_xcopy_keep(qf_fp8_state *st, int kind, const void *x, int N, int IN, const void *out, size_t out_bytes) {
    const char *a = (const char *)x, *o = (const char *)out;
    const size_t xb = (size_t)N * IN * sizeof(bf16);
    if (o && o < a + xb && a < o + out_bytes) return;
    st->xc = {kind, N, IN, x, st->buf[0], st->sc};
}
void cu_fp8_same_x(void) { fp8_state()->same_x = 1; }

// ---- fp8.save_inputs (ops.h fp8_saved_x) -----------------------------------------------------------------------------
void cu_fp8_saved_x(int key, int mode) {
    qf_fp8_state *st = fp8_state();
    QF_CHECK(key >= 0 && (mode == 1 || mode == 2));
    st->save_key = key, st->save_mode = mode;
}
// the pending request, for this call only (mode 0: none, or saving is off); a forward's request invalidates what
// was saved under the key before (this call saves it again, or nothing stands there)
int fp8_saved_take(qf_fp8_state *st, int *key) {
    const int mode = st->save_on ? st->save_mode : 0;
    *key = st->save_key;
    st->save_mode = 0;
    if (mode == 1 && *key < st->svcap) st->sv[*key].valid = 0;
    return mode;
}
static void saved_grow(qf_fp8_state *st, int key) {
    if (key < st->svcap) return;
    int cap = st->svcap * 2 > key + 1 ? st->svcap * 2 : key + 1;
    if (cap < 64) cap = 64;
    float *sc = (float *)cu_alloc((size_t)cap * 16 * sizeof(float));
    if (!sc && qf_oom_rescue("the fp8 saved inputs' scales", (size_t)cap * 16 * sizeof(float)))
        sc = (float *)cu_alloc_rescue((size_t)cap * 16 * sizeof(float), 0);
    if (!sc) QF_FATAL("out of GPU memory for the fp8 saved inputs' scales (%d keys)", cap);
    if (st->svsc) {
        cu_copy_d2d(sc, st->svsc, (size_t)st->svcap * 16 * sizeof(float));
        cu_free(st->svsc);
    }
    st->svsc = sc;
    st->sv = (qf_fp8_saved *)qf_realloc(st->sv, (size_t)cap * sizeof *st->sv);
    memset(st->sv + st->svcap, 0, (size_t)(cap - st->svcap) * sizeof *st->sv);
    st->svcap = cap;
}
// key's buffer for this forward's q(x)^T [IN, N] (the entry invalid until saved_done), or NULL without memory
uint8_t *fp8_saved_buf(qf_fp8_state *st, int key, size_t bytes) {
    saved_grow(st, key);
    qf_fp8_saved *e = &st->sv[key];
    e->valid = 0;
    if (e->refused) return NULL;
    if (e->cap < bytes) {
        if (e->buf) cu_free(e->buf);
        e->cap = 0;
        e->buf = (uint8_t *)cu_alloc(bytes);
        if (!e->buf) {
            e->refused = 1;
            if (!st->warned_save++)
                fprintf(stderr,
                        "qwen-ft: warning: fp8.save_inputs: no GPU memory for a saved fp8 input (%zu bytes, key %d); "
                        "such inputs are quantized again in the backward\n",
                        bytes, key);
            return NULL;
        }
        e->cap = bytes;
    }
    return e->buf;
}
// the forward saved x's q(x)^T under key, with the scale in sc (a device float)
void fp8_saved_done(qf_fp8_state *st, int key, const void *x, int N, int IN, const float *sc) {
    qf_fp8_saved *e = &st->sv[key];
    CHECK_CUDA(cudaMemcpyAsync(st->svsc + 16 * (size_t)key, sc, sizeof(float), cudaMemcpyDeviceToDevice, qfc_stream()));
    e->x = x, e->N = N, e->IN = IN, e->valid = 1;
    st->n_x_saved++;
}
// the saved q(x)^T of key when it is this x's, else NULL; *sc its scale
const uint8_t *fp8_saved_get(qf_fp8_state *st, int key, const void *x, int N, int IN, const float **sc) {
    if (key >= st->svcap) return NULL;
    const qf_fp8_saved *e = &st->sv[key];
    if (!e->valid || e->x != x || e->N != N || e->IN != IN) return NULL;
    *sc = st->svsc + 16 * (size_t)key;
    st->n_x_saved_used++;
    return e->buf;
}

// ops.h fp8_weight: the next matmul's W is parameter id at version ver; id < 0: forget every saved scale
void cu_fp8_weight(int id, uint64_t ver) {
    qf_fp8_state *st = fp8_state();
    if (id < 0) {
        st->tag_set = 0;
        wslots_forget(st);
        return;
    }
    st->tag_set = 1, st->tag_id = id, st->tag_ver = ver;
}

extern "C" void qf_cuda_fp8_set_amax_history(int n) {
    qf_fp8_state *st = fp8_state();
    QF_CHECK(n >= 0 && n <= QF_FP8_HISTORY_MAX);
    if (n == st->hist) return;
    if (st->wam) cu_free(st->wam); // another stride: every saved scale and history is dropped
    free(st->w);
    st->wam = NULL, st->w = NULL, st->wcap = 0;
    st->hist = n;
}
extern "C" int qf_cuda_fp8_amax_history(void) { return fp8_state()->hist; }
extern "C" void qf_cuda_fp8_set_save_inputs(int on) {
    qf_fp8_state *st = fp8_state();
    st->save_on = on != 0;
    if (on) return;
    for (int k = 0; k < st->svcap; k++) // off: the saved copies go
        if (st->sv[k].buf) cu_free(st->sv[k].buf);
    if (st->sv) memset(st->sv, 0, (size_t)st->svcap * sizeof *st->sv);
}
extern "C" int qf_cuda_fp8_save_inputs(void) { return fp8_state()->save_on; }
