/* test_paged_prompt.c — the paged model's prompt path on the CPU table (tests/paged_prompt_common.h): the plain CPU
 * table (no kv_append_paged: every token through attention_paged) against a copy with it (qf_ops_cpu_with_prompt),
 * fp32, logits and pools within 1e-5 of the largest. The CUDA tables: tests/gpu/test_paged_prompt_cuda.c. */
#include "paged_prompt_common.h"

int main(void) {
    qf_ops with;
    qf_ops_cpu_with_prompt(&with);
    qf_model_config c;
    pr_config(&c, 64, 128, 2, 4, 2, 16, 97);
    fr_run(&c, qf_ops_cpu(), &with, 1e-5);
    printf("test_paged_prompt: %d checks, %d failed\n", qf_test_checks, qf_test_failures);
    return qf_test_failures != 0;
}
