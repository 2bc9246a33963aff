/* test_paged_prompt_cuda.c — the paged model's prompt path on the CUDA tables (tests/paged_prompt_common.h): each
 * table (bf16, fp16, fp32) against a copy of it without kv_append_paged (every token through the split attention),
 * two layers at head_dim 64 and 128 (attention_prompt: the mma.sync kernels on the 16-bit tables, the generic ones
 * on fp32), logits and pools within 3e-2 of the largest on the 16-bit tables (two attention kernels round
 * differently), 1e-4 on fp32. Exit: 0 passed, 1 a check failed, 77 "no GPU: skipped". */
#include "paged_prompt_common.h"

int main(void) {
    if (qf_cuda_device_count() <= 0 || !qf_ops_cuda()) {
        printf("test_paged_prompt_cuda: no GPU: skipped\n");
        return 77;
    }
    const qf_ops *ts[3] = {qf_ops_cuda(), qf_ops_cuda_f16(), qf_ops_cuda_f32()};
    const double tol[3] = {3e-2, 3e-2, 1e-4};
    qf_model_config c64, c128;
    pr_config(&c64, 512, 1024, 2, 8, 2, 64, 1000);
    pr_config(&c128, 1024, 2048, 2, 8, 2, 128, 1000);
    for (int i = 0; i < 3; i++) {
        qf_ops plain = *ts[i];
        plain.kv_append_paged = NULL;
        const int before = qf_test_failures;
        fr_run(&c64, &plain, ts[i], tol[i]);
        fr_run(&c128, &plain, ts[i], tol[i]);
        printf("%-4s %s: head_dim 64 and 128\n", qf_test_failures == before ? "ok" : "FAIL", ts[i]->name);
    }
    printf("test_paged_prompt_cuda: %d checks, %d failed\n", qf_test_checks, qf_test_failures);
    return qf_test_failures != 0;
}
