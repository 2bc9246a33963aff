/* tensorboard.c — see tensorboard.h. */
#include "tensorboard.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* ---- CRC-32C (reflected polynomial 0x82F63B78), bitwise with a nibble table: no mutable table to fill ---- */

uint32_t qf_crc32c(const void *data, size_t n) {
    static const uint32_t nib[16] = {0x00000000, 0x105EC76F, 0x20BD8EDE, 0x30E349B1, 0x417B1DBC, 0x5125DAD3,
                                     0x61C69362, 0x7198540D, 0x82F63B78, 0x92A8FC17, 0xA24BB5A6, 0xB21572C9,
                                     0xC38D26C4, 0xD3D3E1AB, 0xE330A81A, 0xF36E6F75};
    const unsigned char *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        crc = (crc >> 4) ^ nib[crc & 15];
        crc = (crc >> 4) ^ nib[crc & 15];
    }
    return crc ^ 0xFFFFFFFFu;
}

uint32_t qf_tb_masked_crc(const void *data, size_t n) {
    uint32_t c = qf_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

/* ---- protobuf, by hand ---------------------------------------------------------------------------------- */

typedef struct {
    unsigned char b[1024];
    size_t n;
} pbuf;

static void put_byte(pbuf *p, unsigned char c) {
    QF_CHECK(p->n < sizeof p->b);
    p->b[p->n++] = c;
}
static void put_varint(pbuf *p, uint64_t v) {
    while (v >= 0x80) {
        put_byte(p, (unsigned char)(v | 0x80));
        v >>= 7;
    }
    put_byte(p, (unsigned char)v);
}
static void put_tag(pbuf *p, unsigned field, unsigned wire) { put_varint(p, ((uint64_t)field << 3) | wire); }
static void put_le(pbuf *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) put_byte(p, (unsigned char)(v >> (8 * i)));
}
static void put_bytes(pbuf *p, unsigned field, const void *data, size_t n) {
    put_tag(p, field, 2);
    put_varint(p, n);
    QF_CHECK(p->n + n <= sizeof p->b);
    memcpy(p->b + p->n, data, n);
    p->n += n;
}
static void put_double(pbuf *p, unsigned field, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    put_tag(p, field, 1);
    put_le(p, u, 8);
}
static void put_float(pbuf *p, unsigned field, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    put_tag(p, field, 5);
    put_le(p, u, 4);
}

static double wall_time(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

/* Event { wall_time = 1; step = 2; } + the caller's payload */
static void event_head(pbuf *ev, int64_t step) {
    ev->n = 0;
    put_double(ev, 1, wall_time());
    put_tag(ev, 2, 0);
    put_varint(ev, (uint64_t)step);
}

static void write_record(qf_tb *tb, const pbuf *ev) {
    unsigned char head[12];
    uint64_t len = ev->n;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(len >> (8 * i));
    uint32_t hc = qf_tb_masked_crc(head, 8);
    for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(hc >> (8 * i));
    uint32_t dc = qf_tb_masked_crc(ev->b, ev->n);
    unsigned char tail[4];
    for (int i = 0; i < 4; i++) tail[i] = (unsigned char)(dc >> (8 * i));
    fwrite(head, 1, 12, tb->f);
    fwrite(ev->b, 1, ev->n, tb->f);
    fwrite(tail, 1, 4, tb->f);
}

/* ---- API ------------------------------------------------------------------------------------------------ */

qf_tb *qf_tb_open(const char *dir, qf_err *e) {
    if (qf_mkdirs(dir) != 0) {
        qf_err_set(e, QF_EXIT_INPUT, "TensorBoard: cannot create directory %s: %s", dir, strerror(errno));
        return NULL;
    }
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    qf_tb *tb = qf_calloc(1, sizeof *tb);
    snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s.%ld", dir, (long long)time(NULL), host,
             (long)getpid());
    tb->f = fopen(tb->path, "wb");
    if (!tb->f) {
        qf_err_set(e, QF_EXIT_INPUT, "TensorBoard: cannot create %s: %s", tb->path, strerror(errno));
        free(tb);
        return NULL;
    }
    pbuf ev;
    event_head(&ev, 0);
    put_bytes(&ev, 3, "brain.Event:2", 13); /* file_version */
    write_record(tb, &ev);
    fflush(tb->f);
    return tb;
}

void qf_tb_scalar(qf_tb *tb, const char *tag, int64_t step, double value) {
    if (!tb) return;
    size_t tl = strlen(tag);
    if (tl > 200) tl = 200;
    pbuf val = {.n = 0}, sum = {.n = 0}, ev;
    put_bytes(&val, 1, tag, tl);       /* Summary.Value.tag */
    put_float(&val, 2, (float)value);  /* Summary.Value.simple_value */
    put_bytes(&sum, 1, val.b, val.n);  /* Summary.value */
    event_head(&ev, step);
    put_bytes(&ev, 5, sum.b, sum.n);   /* Event.summary */
    write_record(tb, &ev);
}

void qf_tb_flush(qf_tb *tb) {
    if (tb) fflush(tb->f);
}

void qf_tb_close(qf_tb *tb) {
    if (!tb) return;
    fclose(tb->f);
    free(tb);
}

void qf_tb_train_step(qf_tb *tb, int64_t step, double loss, double lr, double grad_norm, double loss_scale,
                      double tokens_per_s, double mfu, double mem_gib) {
    if (!tb) return;
    qf_tb_scalar(tb, "train/loss", step, loss);
    qf_tb_scalar(tb, "train/lr", step, lr);
    qf_tb_scalar(tb, "train/grad_norm", step, grad_norm);
    qf_tb_scalar(tb, "train/loss_scale", step, loss_scale);
    qf_tb_scalar(tb, "perf/tokens_per_s", step, tokens_per_s);
    qf_tb_scalar(tb, "perf/mfu", step, mfu);
    qf_tb_scalar(tb, "perf/peak_host_mem_gib", step, mem_gib);
    qf_tb_flush(tb);
}

void qf_tb_eval(qf_tb *tb, int64_t step, double valid_loss, double valid_ppl) {
    if (!tb) return;
    qf_tb_scalar(tb, "eval/valid_loss", step, valid_loss);
    qf_tb_scalar(tb, "eval/valid_ppl", step, valid_ppl);
    qf_tb_flush(tb);
}
