/* calibrate.c — the planner's rates measured on this rank's backend (plan.h qf_plan_calibrate), cached as JSON.
 * One decoder layer of the model's own dimensions (a 1-layer model with a 512-token vocabulary: the head's time
 * follows from the layer's matmul rate) runs forward + backward through the op table at micro-batch 1 and 2 of the
 * deck's seq_len in each recomputation mode (a warm-up, then the faster of two); the device AdamW (the op table's)
 * and the host AdamW (qf_cpu_adamw_act, the offload's kernel) on a buffer each, the host gradient add and sum of
 * squares (the shard on the host); the pinned copies
 * (qf_cuda_copy_peak). The network rates are table values (a collective needs every rank: not timed here). */
#include "plan.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "model/model.h"
#include "util/json_out.h"

#define CAL_FILE "qwenft-plan-rates.json"
#define CAL_VERSION 4 /* 2: host_add, host_sumsq; 3: the host threads in the key; 4: host_add on 256 M elements */

/* the model's dimensions as the key names them: "|C3584 F18944 H28 KV4 D128 qkn0 bias1 V152064 tie0|" */
static void cal_dims(const qf_model_config *c, char *buf, size_t n) {
    snprintf(buf, n, "|C%d F%d H%d KV%d D%d qkn%d bias%d V%lld tie%d|", c->hidden_size, c->intermediate_size,
             c->num_heads, c->num_kv_heads, c->head_dim, c->qk_norm, c->attention_bias, (long long)c->vocab_size,
             c->tie_word_embeddings);
}

static void cal_key(const char *dev, const qf_model_config *c, int T, const qf_ops *ops, int threads, char *key,
                    size_t n) {
    char host[128] = "?", dims[160];
    gethostname(host, sizeof host - 1);
    cal_dims(c, dims, sizeof dims);
    snprintf(key, n, "v%d|%s|%s%s%s|T%d|t%d", CAL_VERSION, dev, host, dims, ops->name, T, threads);
}

static const char *const RATE_NAMES[] = {"fwd_share", "matmul_flops", "dev_adam", "host_adam", "host_add",
                                         "host_sumsq", "h2d", "d2h", "net", "net_inter"};
enum { NRATES = sizeof RATE_NAMES / sizeof *RATE_NAMES };
static double *rate_field(qf_plan_rates *r, int i) {
    double *f[NRATES] = {&r->fwd_share, &r->matmul_flops, &r->dev_adam, &r->host_adam, &r->host_add,
                         &r->host_sumsq, &r->h2d,         &r->d2h,      &r->net,       &r->net_inter};
    return f[i];
}

/* the "rates" object t into r: 0, or -1 (with e: QF_EXIT_INPUT and a message naming path and the field) */
static int rates_parse(const json_t *t, qf_plan_rates *r, const char *path, qf_err *e) {
    for (int i = 0; i < NRATES; i++) {
        json_t *v = json_object_get(t, RATE_NAMES[i]);
        if (!json_is_number(v) || json_number_value(v) < 0) {
            if (e) qf_err_set(e, QF_EXIT_INPUT, "plan: --rates %s: rates.%s missing or not a number >= 0", path,
                              RATE_NAMES[i]);
            return -1;
        }
        *rate_field(r, i) = json_number_value(v);
    }
    const char *arr[2] = {"layer_fixed", "layer_per_row"};
    double *dst[2] = {r->layer_fixed, r->layer_per_row};
    for (int a = 0; a < 2; a++) {
        json_t *v = json_object_get(t, arr[a]);
        for (int m = 0; m < 4; m++) {
            json_t *x = json_is_array(v) && json_array_size(v) == 4 ? json_array_get(v, (size_t)m) : NULL;
            if (!json_is_number(x) || json_number_value(x) < 0) {
                if (e) qf_err_set(e, QF_EXIT_INPUT, "plan: --rates %s: rates.%s missing or not 4 numbers >= 0", path,
                                  arr[a]);
                return -1;
            }
            dst[a][m] = json_number_value(x);
        }
    }
    if (r->matmul_flops <= 0 || r->host_adam <= 0 || r->dev_adam <= 0) {
        if (e) qf_err_set(e, QF_EXIT_INPUT, "plan: --rates %s: rates.matmul_flops, dev_adam and host_adam must be > 0",
                          path);
        return -1;
    }
    return 0;
}

static int cal_read(const char *path, const char *key, qf_plan_rates *r) {
    json_error_t je;
    json_t *js = json_load_file(path, 0, &je);
    if (!js) return -1;
    json_t *k = json_object_get(js, "key"), *t = json_object_get(js, "rates");
    int ok = json_is_string(k) && !strcmp(json_string_value(k), key) && json_is_object(t) &&
             rates_parse(t, r, path, NULL) == 0;
    json_decref(js);
    return ok ? 0 : -1;
}

int qf_plan_rates_load(const char *path, const qf_model_config *c, qf_plan_rates *r, qf_err *e) {
    json_error_t je;
    json_t *js = json_load_file(path, 0, &je);
    if (!js && je.line > 0)
        return qf_err_set(e, QF_EXIT_INPUT, "plan: --rates %s: line %d: %s (a qwenft-plan-rates.json of a run or "
                          "plan is expected)", path, je.line, je.text);
    if (!js)
        return qf_err_set(e, QF_EXIT_INPUT, "plan: --rates %s: %s", path, je.text);
    int rc = 0;
    json_t *k = json_object_get(js, "key"), *t = json_object_get(js, "rates"), *T = json_object_get(js, "seq_len");
    char dims[160];
    cal_dims(c, dims, sizeof dims);
    if (!json_is_string(k) || !json_is_object(t) || !json_is_integer(T) || json_integer_value(T) <= 0) {
        rc = qf_err_set(e, QF_EXIT_INPUT, "plan: --rates %s: %s missing or not %s (a qwenft-plan-rates.json of a run "
                        "or plan is expected)", path, !json_is_string(k) ? "\"key\"" : !json_is_object(t) ? "\"rates\""
                        : "\"seq_len\"", !json_is_string(k) ? "a string" : !json_is_object(t) ? "an object"
                        : "a positive integer");
    } else if (!strstr(json_string_value(k), dims)) {
        rc = qf_err_set(e, QF_EXIT_INPUT, "plan: --rates %s: the rates are for another model shape (key \"%s\"), not "
                        "this deck's %s", path, json_string_value(k), dims);
    } else if (rates_parse(t, r, path, e)) {
        rc = e->code;
    } else {
        r->seq_len = (int)json_integer_value(T);
        r->calib_s = 0;
        snprintf(r->source, sizeof r->source, "read from %.120s (%.120s)", path, json_string_value(k));
    }
    json_decref(js);
    return rc;
}

static void cal_write(const char *path, const char *key, const qf_plan_rates *r) {
    json_t *t = json_object();
    for (int i = 0; i < NRATES; i++) qf_json_set_num(t, RATE_NAMES[i], *rate_field((qf_plan_rates *)r, i));
    json_t *fx = json_array(), *pr = json_array();
    for (int m = 0; m < 4; m++) {
        json_array_append_new(fx, json_real(r->layer_fixed[m]));
        json_array_append_new(pr, json_real(r->layer_per_row[m]));
    }
    json_object_set_new(t, "layer_fixed", fx);
    json_object_set_new(t, "layer_per_row", pr);
    json_t *js = json_pack("{s:s, s:i, s:f, s:o}", "key", key, "seq_len", r->seq_len, "calibration_s", r->calib_s,
                           "rates", t);
    char tmp[QF_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    if (json_dump_file(js, tmp, JSON_INDENT(1)) == 0 && rename(tmp, path) == 0) {
        /* written */
    } else {
        fprintf(stderr, "qwen-ft: plan: cannot write the calibration cache %s (%s); the rates stay unsaved\n", path,
                strerror(errno));
        unlink(tmp);
    }
    json_decref(js);
}

/* seconds of one forward (+ backward) of a 1-layer model in mode md at B rows of T; < 0 when it cannot allocate */
static double cal_layer(const qf_ops *ops, const qf_model_config *c1, int B, int T, int md, int backward) {
    qf_model m;
    qf_err e = {0};
    memset(&m, 0, sizeof m);
    if (qf_model_create(&m, c1, ops, QF_MODEL_PARAMS | QF_MODEL_GRADS, &e)) return -1;
    if (qf_model_alloc_acts(&m, B, T, md, -1, &e)) {
        qf_model_free(&m);
        return -1;
    }
    qf_model_init_random(&m, 7);
    qf_rows r;
    qf_rows_alloc(&r, B, T);
    for (int i = 0; i < B * T; i++) {
        r.tokens[i] = (int32_t)((i * 7919) % c1->vocab_size);
        r.targets[i] = (int32_t)(((i + 1) * 7919) % c1->vocab_size);
        r.seg_start[i] = 0;
        r.pos[i] = i % T;
        r.doc[i] = 0;
    }
    r.n_targets = (int64_t)B * T;
    double best = -1;
    for (int it = 0; it < 3; it++) {
        ops->sync();
        double t0 = qf_now();
        qf_model_step(&m, &r, 1.0f, backward);
        ops->sync();
        double t = qf_now() - t0;
        if (it > 0 && (best < 0 || t < best)) best = t;
    }
    qf_rows_free(&r);
    qf_model_free(&m);
    return best;
}

/* elements/s of the device AdamW on n elements */
static double cal_dev_adam(const qf_ops *ops, size_t n) {
    float *p = ops->alloc(n * 4), *m = ops->alloc(n * 4), *v = ops->alloc(n * 4);
    void *g = ops->alloc(n * ops->act_bytes), *pa = ops->alloc(n * ops->act_bytes);
    double best = -1;
    if (p && m && v && g && pa)
        for (int it = 0; it < 3; it++) {
            ops->sync();
            double t0 = qf_now();
            ops->adamw(p, pa, g, m, v, n, 1.0f, 1e-5f, 0.9f, 0.999f, 1e-8f, 0.0f, it + 1);
            ops->sync();
            double t = qf_now() - t0;
            if (it > 0 && (best < 0 || t < best)) best = t;
        }
    void *bufs[] = {p, m, v, g, pa};
    for (int i = 0; i < 5; i++)
        if (bufs[i]) ops->free(bufs[i]);
    return best > 0 ? (double)n / best : 0;
}

static double cal_host_adam(const qf_ops *ops, size_t n, int threads) {
    float *p = calloc(n, 4), *m = calloc(n, 4), *v = calloc(n, 4);
    void *g = malloc(n * ops->act_bytes);
    double best = -1;
    if (g) memset(g, 0x3c, n * ops->act_bytes); /* real pages (calloc's untouched ones all read one zero page) */
    if (p && m && v && g)
        for (int it = 0; it < 3; it++) {
            double t0 = qf_now();
            qf_cpu_adamw_act(p, g, g, (int)ops->act_dtype, m, v, n, 1.0f, 1e-5f, 0.9f, 0.999f, 1e-8f, 0.0f, it + 1,
                             threads);
            double t = qf_now() - t0;
            if (it > 0 && (best < 0 || t < best)) best = t;
        }
    free(p), free(m), free(v), free(g);
    return best > 0 ? (double)n / best : 0;
}

/* elements/s of the host gradient accumulation and of the norm's sum of squares (the offload engine's host shard:
 * qf_cpu_act_add, qf_cpu_act_sumsq in the act type) on n elements */
static void cal_host_grads(const qf_ops *ops, size_t n, int threads, double *add, double *sumsq) {
    void *y = calloc(n, ops->act_bytes), *x = malloc(n * ops->act_bytes);
    double ba = -1, bs = -1;
    if (x) memset(x, 0x3c, n * ops->act_bytes); /* real pages, finite values (y: written by the first add) */
    if (x && y)
        for (int it = 0; it < 3; it++) {
            double t0 = qf_now();
            qf_cpu_act_add(y, x, (int)ops->act_dtype, n, threads);
            double t1 = qf_now();
            volatile double s = qf_cpu_act_sumsq(y, (int)ops->act_dtype, n, threads);
            double t2 = qf_now();
            (void)s;
            if (it > 0 && (ba < 0 || t1 - t0 < ba)) ba = t1 - t0;
            if (it > 0 && (bs < 0 || t2 - t1 < bs)) bs = t2 - t1;
        }
    free(x), free(y);
    *add = ba > 0 ? (double)n / ba : 0;
    *sumsq = bs > 0 ? (double)n / bs : 0;
}

int qf_plan_calibrate(const qf_ops *ops, const char *dev, const qf_model_config *c, int T, int threads,
                      const char *cache_dir, qf_plan_rates *r, qf_err *e) {
    (void)e; /* a measurement that cannot run leaves the table's rates, said in r->source */
    const int cpu = !strcmp(ops->name, "cpu");
    qf_plan_rates_default(c, T, cpu, r); /* the network rates, and what a failed measurement leaves */
    char key[512], path[QF_PATH_MAX + 64] = "";
    cal_key(dev, c, T, ops, threads, key, sizeof key);
    if (cache_dir && cache_dir[0]) {
        snprintf(path, sizeof path, "%s/%s", cache_dir, CAL_FILE);
        if (cal_read(path, key, r) == 0) {
            r->seq_len = T;
            r->cpu = cpu;
            r->calib_s = 0;
            snprintf(r->source, sizeof r->source, "cached in %s", path);
            return 0;
        }
    }
    double t0 = qf_now();
    qf_model_config c1 = *c;
    c1.num_layers = 1;
    c1.vocab_size = 512;
    c1.tie_word_embeddings = 0;
    double t1[4], t2[4];
    for (int md = 0; md < 4; md++) {
        t1[md] = cal_layer(ops, &c1, 1, T, md, 1);
        t2[md] = cal_layer(ops, &c1, 2, T, md, 1);
        if (t1[md] < 0 || t2[md] < 0) { /* the table's layer rates stand; nothing is cached */
            snprintf(r->source, sizeof r->source, "table rates (one layer of the model at 2 x %d tokens did not fit the "
                     "device for the calibration)", T);
            return 0;
        }
    }
    double tf = cal_layer(ops, &c1, 2, T, QF_ACKPT_NONE, 0);
    /* the head and embedding of the 1-layer model, at the matmul rate of its layer (one pass to separate them) */
    const double C = c->hidden_size, F = c->intermediate_size, H = c->num_heads, KV = c->num_kv_heads,
                 D = c->head_dim;
    const double pl = C * H * D * 2 + C * KV * D * 2 + 3 * C * F;
    const double flops2 = 2.0 * T * (6 * pl + 12 * H * D * T), head_flops = 6.0 * c1.vocab_size * C;
    double rate = flops2 / t2[0];
    for (int it = 0; it < 2; it++) rate = flops2 / (t2[0] - 2.0 * T * head_flops / rate);
    if (!(rate > 0)) rate = flops2 / t2[0];
    r->matmul_flops = rate;
    for (int md = 0; md < 4; md++) {
        double h1 = (double)T * head_flops / rate;
        double a = t1[md] - h1, b = t2[md] - 2 * h1;
        double per = b - a, fix = a - per;
        if (!(a > 0) || !(b > 0)) { /* the head's share estimated above a noisy layer time (a loaded CPU machine):
                                     * the whole pass a row, so that no rate is negative (the cache refuses those) */
            per = t2[md] / 2;
            fix = 0;
        } else if (per <= 0.25 * b / 2 || fix < 0) {
            per = b / 2;
            fix = 0;
        }
        r->layer_fixed[md] = fix;
        r->layer_per_row[md] = per;
    }
    r->fwd_share = tf > 0 && t2[0] > 0 ? tf / t2[0] : 1.0 / 3.0;
    if (r->fwd_share > 0.9 || r->fwd_share < 0.1) r->fwd_share = 1.0 / 3.0;
    size_t na = cpu ? (size_t)4 << 20 : (size_t)64 << 20;
    double da = cal_dev_adam(ops, na);
    if (da > 0) r->dev_adam = da;
    double ha = cal_host_adam(ops, cpu ? (size_t)4 << 20 : (size_t)32 << 20, threads);
    if (ha > 0) r->host_adam = ha;
    double hadd = 0, hss = 0;
    /* GPU ranks: 256 M elements, 512 MB a buffer in bf16, past any last-level cache (session 22: at 32 M, 64 MB a
     * buffer, two H100 hosts measured 24.1 and 15.3 G elements/s; the model's floor (speed.c) binds only at the
     * lower rate, the one the runs' steps agree with) */
    cal_host_grads(ops, cpu ? (size_t)4 << 20 : (size_t)256 << 20, threads, &hadd, &hss);
    if (hadd > 0) r->host_add = hadd;
    if (hss > 0) r->host_sumsq = hss;
    r->h2d = r->d2h = 0;
#ifdef QWENFT_HAVE_CUDA
    if (!cpu) {
        double h2d = 0, d2h = 0;
        if (qf_cuda_copy_peak(&h2d, &d2h) == 0 && h2d > 0 && d2h > 0) {
            r->h2d = h2d * 1e9;
            r->d2h = d2h * 1e9;
        } else {
            r->h2d = r->d2h = 25e9;
        }
    }
#endif
    r->seq_len = T;
    r->cpu = cpu;
    r->calib_s = qf_now() - t0;
    snprintf(r->source, sizeof r->source, "measured in %.2f s on %s", r->calib_s, dev);
    if (path[0]) cal_write(path, key, r);
    return 0;
}
