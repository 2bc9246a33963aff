/* test_host_threads.c — the host AdamW's team (qf_zero_host_threads, src/zero/zero_offload.c): OMP_NUM_THREADS
 * when set; else the rank's share of the node's cores (unbound ranks) or its own cores (bound ranks), one kept for
 * the trainer's thread on a GPU rank with a share of 8 or more (docs/zero.md), never on CPU ranks. */
#include <stdlib.h>
#include "qf_test.h"
#include "zero/zero.h"

int main(void) {
    int kept = -1;
    /* one GPU rank on a 16-core node, unbound: 15 and a kept core; a CPU rank: all 16 */
    CHECK(qf_zero_team_size(16, 16, 1, 1, &kept) == 15 && kept == 1);
    CHECK(qf_zero_team_size(16, 16, 1, 0, &kept) == 16 && kept == 0);
    /* 8 GPU ranks on 128 cores: 16 each, 15 in the team; on 16 cores: 2 each, none kept */
    CHECK(qf_zero_team_size(128, 128, 8, 1, &kept) == 15 && kept == 1);
    CHECK(qf_zero_team_size(16, 16, 8, 1, &kept) == 2 && kept == 0);
    /* a share of 7: all of it; of 8: 7 */
    CHECK(qf_zero_team_size(56, 56, 8, 1, &kept) == 7 && kept == 0);
    CHECK(qf_zero_team_size(64, 64, 8, 1, &kept) == 7 && kept == 1);
    /* bound by the launcher to 12 of 96 cores: its own 12, one kept */
    CHECK(qf_zero_team_size(12, 96, 8, 1, &kept) == 11 && kept == 1);
    /* the CI-class machine (2 cores), and more ranks than cores: at least one thread */
    CHECK(qf_zero_team_size(2, 2, 1, 1, &kept) == 2 && kept == 0);
    CHECK(qf_zero_team_size(2, 2, 4, 1, &kept) == 1 && kept == 0);
    CHECK(qf_zero_team_size(2, 2, 1, 1, NULL) == 2);
    /* OMP_NUM_THREADS wins, nothing kept */
    setenv("OMP_NUM_THREADS", "5", 1);
    CHECK(qf_zero_host_threads(1, 1, &kept) == 5 && kept == 0);
    unsetenv("OMP_NUM_THREADS");
    CHECK(qf_zero_host_threads(1, 0, &kept) >= 1 && kept == 0);
    return qf_test_end("test_host_threads", NULL);
}
