/* fuzz_safetensors.c — the safetensors header reader: qf_st_open_file on arbitrary bytes, then every tensor it
 * accepts is read whole (the offsets it accepted must lie inside the mapping): never a crash. */
#include "fuzz_common.h"
#include "safetensors.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const char *p = fuzz_file(data, n, ".safetensors");
    qf_st st;
    qf_err e = {0};
    if (fuzz_refused(qf_st_open_file(p, &st, &e), &e)) return 0;
    for (int i = 0; i < st.ntensors; i++) {
        qf_err ce = {0};
        const qf_st_tensor *t = &st.t[i];
        if (qf_st_check(&st, t, &ce) != 0 || t->numel > (1 << 20)) continue;
        float *buf = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *buf);
        qf_st_read_f32(t, 0, t->numel, buf);
        free(buf);
    }
    qf_st_close(&st);
    return 0;
}
