/* test_hpc.c — the cluster-citizen pieces that need no cluster: CRC-32C and TFRecord framing of the TensorBoard
 * writer (src/util/tensorboard.c; tests/cli/system_tensorboard.sh reads the files back with TensorBoard itself), the
 * signal flag and the step-boundary agreement (src/train/signals.c; mpi_signals.sh covers real ranks), and the topology
 * helpers and NCCL environment policy (src/parallel/topology.c) on hand-made topologies. */
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "train/signals.h"
#include "util/tensorboard.h"
#include "parallel/topology.h"
#include "qf_test.h"


static uint64_t get_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t varint(const unsigned char **p) {
    uint64_t v = 0;
    int s = 0;
    while (**p & 0x80) v |= (uint64_t)(*(*p)++ & 0x7f) << s, s += 7;
    v |= (uint64_t)(*(*p)++) << s;
    return v;
}

static void test_crc(void) {
    /* the CRC-32C check value (RFC 3720 / iSCSI) and an all-zero vector */
    CHECK(qf_crc32c("123456789", 9) == 0xE3069283u, "crc32c = %08x", qf_crc32c("123456789", 9));
    unsigned char z[32] = {0};
    CHECK(qf_crc32c(z, 32) == 0x8A9136AAu, "crc32c(32 zeros) = %08x", qf_crc32c(z, 32));
    uint32_t c = qf_crc32c("abc", 3);
    CHECK(qf_tb_masked_crc("abc", 3) == ((c >> 15) | (c << 17)) + 0xA282EAD8u, "masked crc");
}

/* writes an event file, then walks its records: framing, CRCs, the file_version record and one scalar */
static void test_tb_file(void) {
    char dir[] = "/tmp/qf_test_tb_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    qf_err e = {0};
    qf_tb *tb = qf_tb_open(dir, &e);
    CHECK(tb != NULL, "open: %s", e.msg);
    if (!tb) return;
    char path[4096];
    snprintf(path, sizeof path, "%s", tb->path);
    CHECK(strstr(path, "/events.out.tfevents.") != NULL, "file name %s", path);
    qf_tb_scalar(tb, "train/loss", 7, 2.5);
    qf_tb_close(tb);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "reopen %s", path);
    if (!f) return;
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t off = 0;
    int rec = 0, saw_version = 0, saw_scalar = 0;
    while (off + 12 <= n) {
        uint64_t len = get_le(buf + off, 8);
        CHECK((uint32_t)get_le(buf + off + 8, 4) == qf_tb_masked_crc(buf + off, 8), "record %d length crc", rec);
        CHECK(off + 12 + len + 4 <= n, "record %d truncated", rec);
        if (off + 12 + len + 4 > n) break;
        const unsigned char *d = buf + off + 12, *p = d, *end = d + len;
        CHECK((uint32_t)get_le(d + len, 4) == qf_tb_masked_crc(d, len), "record %d data crc", rec);
        int64_t step = -1;
        while (p < end) {
            uint64_t tag = varint(&p);
            unsigned field = (unsigned)(tag >> 3), wire = (unsigned)(tag & 7);
            if (field == 1 && wire == 1) { /* wall_time */
                double w;
                memcpy(&w, p, 8);
                CHECK(w > 1.5e9, "wall_time %f", w);
                p += 8;
            } else if (field == 2 && wire == 0) {
                step = (int64_t)varint(&p);
            } else if (field == 3 && wire == 2) {
                uint64_t l = varint(&p);
                CHECK(l == 13 && !memcmp(p, "brain.Event:2", 13), "file_version");
                saw_version = rec == 0;
                p += l;
            } else if (field == 5 && wire == 2) { /* Summary { value { tag, simple_value } } */
                uint64_t l = varint(&p);
                const unsigned char *s = p;
                CHECK(varint(&s) == ((1 << 3) | 2), "Summary.value tag");
                uint64_t vl = varint(&s);
                const unsigned char *v = s, *vend = s + vl;
                CHECK(varint(&v) == ((1 << 3) | 2), "Value.tag");
                uint64_t tl = varint(&v);
                CHECK(tl == 10 && !memcmp(v, "train/loss", 10), "tag text");
                v += tl;
                CHECK(varint(&v) == ((2 << 3) | 5), "Value.simple_value");
                float fv;
                memcpy(&fv, v, 4);
                v += 4;
                CHECK(fv == 2.5f && v == vend, "simple_value %g", fv);
                CHECK(step == 7, "step %lld", (long long)step);
                saw_scalar = 1;
                p += l;
            } else {
                CHECK(0, "unexpected field %u wire %u", field, wire);
                break;
            }
        }
        off += 12 + len + 4;
        rec++;
    }
    CHECK(off == n && rec == 2 && saw_version && saw_scalar, "records %d, version %d, scalar %d, %zu of %zu bytes",
          rec, saw_version, saw_scalar, off, n);
    unlink(path);
    rmdir(dir);
    CHECK(qf_tb_open("/proc/qf-no-such-dir/x", &e) == NULL && e.code == QF_EXIT_INPUT, "unwritable dir: %d", e.code);
}

static void test_signals(qf_comm *c) {
    qf_signals s;
    qf_signals_install(&s);
    CHECK(qf_signals_stop_requested(&s, c, 0.0, 0.0, 0.1, 0.1) == QF_STOP_NONE, "no signal, no limit");
    /* max_hours: 1 h elapsed + 2 x 0.2 h + 0.1 h > 1.4 h; < 1.6 h */
    CHECK(qf_signals_stop_requested(&s, c, 1.0, 1.4, 0.2, 0.1) == QF_STOP_MAX_HOURS, "max_hours due");
    CHECK(qf_signals_stop_requested(&s, c, 1.0, 1.6, 0.2, 0.1) == QF_STOP_NONE, "max_hours not yet");
    raise(SIGUSR1);
    CHECK(s.flag == SIGUSR1, "flag %d", (int)s.flag);
    CHECK(qf_signals_stop_requested(&s, c, 1.0, 1.4, 0.2, 0.1) == QF_STOP_SIGNAL && s.signo == SIGUSR1,
          "signal wins over max_hours: signo %d", s.signo);
    char msg[256];
    qf_signals_describe(&s, QF_STOP_SIGNAL, 0, msg, sizeof msg);
    CHECK(!strcmp(msg, "SIGUSR1 received"), "%s", msg);
    raise(SIGTERM); /* would end the process without the handler */
    CHECK(s.flag == SIGTERM, "flag %d", (int)s.flag);
    qf_signals_restore(&s);
    struct sigaction now;
    sigaction(SIGUSR1, NULL, &now);
    CHECK(now.sa_handler == SIG_DFL, "SIGUSR1 disposition restored");
    /* held before the handlers exist (main() while MPI starts): the signal waits, then reaches the handler */
    qf_signals_hold();
    raise(SIGUSR1); /* blocked: pending, not fatal */
    qf_signals t;
    qf_signals_install(&t);
    CHECK(t.flag == SIGUSR1, "held SIGUSR1 delivered at install: flag %d", (int)t.flag);
    qf_signals_restore(&t);
}

static void test_topology_helpers(qf_comm *c) {
    CHECK(qf_topology_pcie_gen("16.0 GT/s PCIe") == 4, "gen4");
    CHECK(qf_topology_pcie_gen("32.0 GT/s PCIe") == 5, "gen5");
    CHECK(qf_topology_pcie_gen("8.0 GT/s") == 3, "gen3");
    CHECK(qf_topology_pcie_gen("2.5 GT/s") == 1, "gen1");
    CHECK(qf_topology_pcie_gen("Unknown") == 0, "unknown");
    CHECK(qf_topology_count_visible(NULL) == -1, "unset");
    CHECK(qf_topology_count_visible("") == 0, "empty");
    CHECK(qf_topology_count_visible("0,1,2,3,4,5,6,7") == 8, "eight");
    CHECK(qf_topology_count_visible("3") == 1, "one");
    CHECK(qf_topology_count_visible("GPU-8e5a,GPU-11fe") == 2, "uuids");
    CHECK(qf_topology_count_visible("NoDevFiles") == 0, "NoDevFiles");
    CHECK(qf_topology_count_visible("0,1,-1,2") == 2, "stops at -1");
    /* the real machine: whatever it has, detection is consistent and never fails */
    qf_topology t;
    qf_topology_detect(&t, c);
    CHECK(t.node.ranks == 1 && t.n_nodes == 1 && t.world_size == 1, "one rank, one node");
    CHECK(t.node.gpus >= 0 && t.node_gpus_max == t.node.gpus, "gpus %d", t.node.gpus);
    char line[512];
    qf_topology_nccl_env(&t, 0, line, sizeof line);
    CHECK(!strncmp(line, "NCCL: ", 6), "%s", line);
    printf("this machine: %d GPU(s) (%s); %s\n", t.node.gpus, t.node.gpu_source, line);
    qf_topology_free(&t);
}

static void test_nccl_policy(void) {
    char msg[512];
    qf_topology t;
    memset(&t, 0, sizeof t);
    unsetenv("NCCL_P2P_DISABLE");
    unsetenv("NCCL_IB_DISABLE");
    /* no GPU */
    CHECK(qf_topology_nccl_env(&t, 1, msg, sizeof msg) == 0 && strstr(msg, "not used"), "%s", msg);
    /* an RTX 4090 box: no P2P, no InfiniBand -> both set */
    t.n_nodes = 1;
    t.node_gpus_min = t.node_gpus_max = 8;
    t.nodes_without_p2p = 1;
    t.nodes_without_ib = 1;
    CHECK(qf_topology_nccl_env(&t, 0, msg, sizeof msg) == 2 && strstr(msg, "will set") && !getenv("NCCL_P2P_DISABLE"),
          "dry run: %s", msg);
    CHECK(qf_topology_nccl_env(&t, 1, msg, sizeof msg) == 2, "%s", msg);
    CHECK(getenv("NCCL_P2P_DISABLE") && !strcmp(getenv("NCCL_P2P_DISABLE"), "1"), "P2P disabled");
    CHECK(getenv("NCCL_IB_DISABLE") && !strcmp(getenv("NCCL_IB_DISABLE"), "1"), "IB disabled");
    CHECK(strstr(msg, "set NCCL_P2P_DISABLE=1 and NCCL_IB_DISABLE=1") != NULL, "%s", msg);
    /* the user's own value wins */
    setenv("NCCL_P2P_DISABLE", "0", 1);
    unsetenv("NCCL_IB_DISABLE");
    CHECK(qf_topology_nccl_env(&t, 1, msg, sizeof msg) == 1, "%s", msg);
    CHECK(!strcmp(getenv("NCCL_P2P_DISABLE"), "0"), "user's value kept");
    CHECK(strstr(msg, "kept the user's NCCL_P2P_DISABLE=0") && strstr(msg, "set NCCL_IB_DISABLE=1"), "%s", msg);
    /* no P2P but InfiniBand present: only P2P */
    unsetenv("NCCL_P2P_DISABLE");
    unsetenv("NCCL_IB_DISABLE");
    t.nodes_without_ib = 0;
    CHECK(qf_topology_nccl_env(&t, 1, msg, sizeof msg) == 1 && getenv("NCCL_P2P_DISABLE") && !getenv("NCCL_IB_DISABLE"),
          "%s", msg);
    /* NVLink nodes: nothing touched */
    unsetenv("NCCL_P2P_DISABLE");
    t.nodes_without_p2p = 0;
    CHECK(qf_topology_nccl_env(&t, 1, msg, sizeof msg) == 0 && !getenv("NCCL_P2P_DISABLE") && strstr(msg, "defaults"),
          "%s", msg);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    qf_comm c;
    qf_comm_init(&c, qf_ops_cpu(), 0);
    test_crc();
    test_tb_file();
    test_signals(&c);
    test_topology_helpers(&c);
    test_nccl_policy();
    qf_comm_free(&c);
    MPI_Finalize();
    if (qf_test_failures) {
        fprintf(stderr, "%d failure(s)\n", qf_test_failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
