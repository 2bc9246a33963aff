/* model.c — Qwen decoder forward/backward through the op table (see model.h). */
#include "model.h"
#include "backend.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameter layout ------------------------------------------------------------------------------------ */

static int spec_find(const qf_model *m, const char *name) {
    for (int i = 0; i < m->nspecs; i++)
        if (strcmp(m->specs[i].name, name) == 0) return i;
    return -1;
}

static int layer_find(const qf_model *m, int l, const char *suffix) {
    char name[128];
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);
    return spec_find(m, name);
}

/* q_proj, k_proj or v_proj's bias (QF_MODEL_JOINED lays them out after the v weight) */
static int is_qkv_bias(const char *name) {
    static const char *const sfx[] = {".self_attn.q_proj.bias", ".self_attn.k_proj.bias", ".self_attn.v_proj.bias"};
    const size_t n = strlen(name);
    for (int j = 0; j < 3; j++) {
        const size_t k = strlen(sfx[j]);
        if (n > k && strcmp(name + n - k, sfx[j]) == 0) return 1;
    }
    return 0;
}

/* QF_MODEL_JOINED: which joined matmuls every layer's layout allows (the weights adjacent in order, the biases too
 * or absent; the scratch for q | k | v is the [N, 2F] gate | up buffer; no q/k norms between projection and RoPE) */
static void joined_check(qf_model *m) {
    const qf_model_config *c = &m->cfg;
    const int64_t C = c->hidden_size, F = c->intermediate_size, HD = (int64_t)c->num_heads * c->head_dim,
                  KD = (int64_t)c->num_kv_heads * c->head_dim;
    int qkv = !c->qk_norm && HD + 2 * KD <= 2 * F, gu = 1;
    for (int l = 0; l < c->num_layers; l++) {
        const qf_layer_ix *x = &m->lix[l];
        const int64_t *o = m->offset;
        qkv = qkv && o[x->kw] == o[x->qw] + HD * C && o[x->vw] == o[x->kw] + KD * C &&
              ((x->qb < 0 && x->kb < 0 && x->vb < 0) ||
               (x->qb >= 0 && x->kb >= 0 && x->vb >= 0 && o[x->kb] == o[x->qb] + HD && o[x->vb] == o[x->kb] + KD));
        gu = gu && o[x->up] == o[x->gate] + F * C;
    }
    m->joined_qkv = qkv, m->joined_gu = gu;
}

static void *default_unit_params(void *ctx, int u) {
    qf_model *m = ctx;
    return (char *)m->params + (size_t)m->unit_off[u] * m->ops->act_bytes;
}
static void *default_unit_grads(void *ctx, int u) {
    qf_model *m = ctx;
    return (char *)m->grads + (size_t)m->unit_off[u] * m->ops->act_bytes;
}

int qf_model_create(qf_model *m, const qf_model_config *cfg, const qf_ops *ops, int flags, qf_err *e) {
    memset(m, 0, sizeof *m);
    char msg[256];
    if (qf_model_config_check(cfg, msg, sizeof msg) != 0) return qf_err_set(e, QF_EXIT_INPUT, "model: %s", msg);
    m->cfg = *cfg;
    m->ops = ops;
    m->nspecs = qf_param_specs(cfg, &m->specs);
    int L = cfg->num_layers;
    m->nunits = L + 2;
    m->offset = qf_calloc((size_t)m->nspecs, sizeof *m->offset);
    m->spec_unit = qf_calloc((size_t)m->nspecs, sizeof *m->spec_unit);
    m->unit_off = qf_calloc((size_t)m->nunits + 1, sizeof *m->unit_off);
    int64_t off = 0;
    int deferred[3], nd = 0; /* QF_MODEL_JOINED: a layer's q, k, v biases, laid out after its v weight */
    for (int i = 0; i < m->nspecs; i++) {
        int u = m->specs[i].layer >= 0 ? m->specs[i].layer + 1 : (i == 0 ? 0 : L + 1);
        m->spec_unit[i] = u;
        if ((flags & QF_MODEL_JOINED) && is_qkv_bias(m->specs[i].name)) {
            QF_CHECK(nd < 3);
            deferred[nd++] = i;
            continue;
        }
        for (int j = 0; nd == 3 && j < 3; j++) m->offset[deferred[j]] = off, off += m->specs[deferred[j]].numel;
        if (nd == 3) nd = 0;
        m->offset[i] = off;
        off += m->specs[i].numel;
    }
    QF_CHECK(nd == 0);
    m->n_params = off;
    /* unit boundaries: first parameter of each unit (units are contiguous and in order) */
    for (int u = 0; u <= m->nunits; u++) m->unit_off[u] = off;
    for (int i = m->nspecs - 1; i >= 0; i--) m->unit_off[m->spec_unit[i]] = m->offset[i];
    m->ix_embed = spec_find(m, "model.embed_tokens.weight");
    m->ix_norm = spec_find(m, "model.norm.weight");
    m->ix_head = cfg->tie_word_embeddings ? m->ix_embed : spec_find(m, "lm_head.weight");
    QF_CHECK(m->ix_embed == 0 && m->ix_norm > 0 && m->ix_head >= 0);
    m->lix = qf_calloc((size_t)L, sizeof *m->lix);
    for (int l = 0; l < L; l++) {
        qf_layer_ix *x = &m->lix[l];
        x->ln1 = layer_find(m, l, "input_layernorm.weight");
        x->qw = layer_find(m, l, "self_attn.q_proj.weight");
        x->qb = layer_find(m, l, "self_attn.q_proj.bias");
        x->kw = layer_find(m, l, "self_attn.k_proj.weight");
        x->kb = layer_find(m, l, "self_attn.k_proj.bias");
        x->vw = layer_find(m, l, "self_attn.v_proj.weight");
        x->vb = layer_find(m, l, "self_attn.v_proj.bias");
        x->qn = layer_find(m, l, "self_attn.q_norm.weight");
        x->kn = layer_find(m, l, "self_attn.k_norm.weight");
        x->ow = layer_find(m, l, "self_attn.o_proj.weight");
        x->ln2 = layer_find(m, l, "post_attention_layernorm.weight");
        x->gate = layer_find(m, l, "mlp.gate_proj.weight");
        x->up = layer_find(m, l, "mlp.up_proj.weight");
        x->down = layer_find(m, l, "mlp.down_proj.weight");
        QF_CHECK(x->ln1 >= 0 && x->qw >= 0 && x->kw >= 0 && x->vw >= 0 && x->ow >= 0 && x->ln2 >= 0 &&
                 x->gate >= 0 && x->up >= 0 && x->down >= 0);
    }
    if (flags & QF_MODEL_JOINED) joined_check(m);
    size_t bytes = (size_t)m->n_params * ops->act_bytes;
    if (flags & QF_MODEL_PARAMS) {
        m->params = ops->alloc(bytes);
        if (!m->params) return qf_err_set(e, QF_EXIT_RUNTIME, "out of memory for %lld parameters", (long long)m->n_params);
    }
    if (flags & QF_MODEL_GRADS) {
        m->grads = ops->alloc(bytes);
        if (!m->grads) return qf_err_set(e, QF_EXIT_RUNTIME, "out of memory for gradients");
    }
    m->hooks.ctx = m;
    m->hooks.unit_params = default_unit_params;
    m->hooks.unit_grads = default_unit_grads;
    return 0;
}

/* ---- activations --------------------------------------------------------------------------------------- */

/* The recomputation mode of layer l: the first rec_layers layers (all when < 0) take ackpt, the rest none. */
static int layer_mode(int ackpt, int rec_layers, int L, int l) {
    int k = rec_layers < 0 || rec_layers > L ? L : rec_layers;
    return l < k ? ackpt : QF_ACKPT_NONE;
}

/* Bytes qf_model_alloc_acts allocates (kept next to it; test_estimate checks they agree). */
int64_t qf_model_act_bytes(const qf_model_config *c, int B, int T, int ackpt, int rec_layers, int64_t ab) {
    int64_t N = (int64_t)B * T, C = c->hidden_size, F = c->intermediate_size, L = c->num_layers;
    int64_t HD = (int64_t)c->num_heads * c->head_dim, KD = (int64_t)c->num_kv_heads * c->head_dim;
    int64_t layer = ab * (N * C + HD * N + 2 * KD * N + HD * N + 2 * N * C + 3 * N * F) + 4 * (2 * N + N * c->num_heads);
    if (c->qk_norm) layer += ab * N * (HD + KD) + 4 * N * (c->num_heads + c->num_kv_heads);
    int64_t gu = ab * 2 * N * F, swi = ab * N * F, norms = ab * 2 * N * C; /* what the modes share across layers */
    int64_t total = ab * (L + 1) * N * C + ab * N * C + 4 * N;
    int any[4] = {0, 0, 0, 0};
    for (int l = 0; l < L; l++) {
        int md = layer_mode(ackpt, rec_layers, (int)L, l);
        any[md] = 1;
        total += md == QF_ACKPT_FULL ? 0 : md == QF_ACKPT_SELECTIVE ? layer - gu - swi
               : md == QF_ACKPT_POINTWISE ? layer - norms - swi : layer;
    }
    if (any[QF_ACKPT_FULL]) total += layer; /* the shared set covers every other mode's shared parts */
    else total += (any[QF_ACKPT_SELECTIVE] ? gu : 0) + (any[QF_ACKPT_POINTWISE] ? norms : 0) +
                  (any[QF_ACKPT_SELECTIVE] || any[QF_ACKPT_POINTWISE] ? swi : 0);
    total += ab * (2 * N * C + 2 * N * HD + 2 * N * KD + 3 * N * F); /* backward scratch */
    total += 4 * 4 * N;                                               /* the batch on the backend */
    return total;
}

/* every activation buffer is on one list (m->acts), freed together */
static void *act_track(qf_model *m, void *p) {
    if (m->nacts == m->cap_acts) {
        m->cap_acts = m->cap_acts ? 2 * m->cap_acts : 64;
        m->acts = qf_realloc(m->acts, (size_t)m->cap_acts * sizeof *m->acts);
    }
    m->acts[m->nacts++] = p;
    return p;
}
/* under a layout plan's trial (m->trial on, mem_trial.h) a failure is recorded and the buffer stays NULL */
static int in_trial(const qf_model *m) { return m->trial && m->trial->on; }
static void *act_alloc(qf_model *m, size_t elems) {
    size_t b = elems * m->ops->act_bytes;
    m->act_bytes += b;
    void *p = qf_mem_trial_alloc(m->trial, m->ops, b, "activations");
    if (!p && !in_trial(m) && qf_oom_rescue("activations", b)) p = qf_backend_alloc_rescue(m->ops, b);
    if (!p && !in_trial(m)) QF_FATAL("out of memory allocating %zu bytes of activations", b);
    return p ? act_track(m, p) : NULL;
}
static float *f32_alloc(qf_model *m, size_t elems) {
    m->act_bytes += elems * 4;
    float *p = qf_mem_trial_alloc(m->trial, m->ops, elems * 4, "activation statistics");
    if (!p && !in_trial(m) && qf_oom_rescue("activation statistics", elems * 4))
        p = qf_backend_alloc_rescue(m->ops, elems * 4);
    if (!p && !in_trial(m)) QF_FATAL("out of memory allocating %zu bytes of activation statistics", elems * 4);
    return p ? act_track(m, p) : NULL;
}

/* Parts of a layer's activations (layer_acts_alloc's `parts`) */
enum { ACT_CORE = 1, ACT_NORMS = 2, ACT_GU = 4, ACT_SWI = 8, ACT_ALL = 15 };

/* One layer's activations for N tokens, the parts asked for: CORE = q/k/v (and the raw q/k of qk_norm), attention
 * output and lse (the attention's log-sum-exp, for the backward, when `lse`), the residual midpoint, the norms'
 * rstd; NORMS = the two RMSNorm outputs; GU = the MLP's gate and up projections; SWI = silu(gate) * up. */
static void layer_acts_alloc(qf_model *m, qf_layer_acts *a, size_t N, int lse, int parts) {
    const qf_model_config *c = &m->cfg;
    size_t C = c->hidden_size, F = c->intermediate_size;
    size_t HD = (size_t)c->num_heads * c->head_dim, KD = (size_t)c->num_kv_heads * c->head_dim;
    if (parts & ACT_NORMS) a->ln1 = act_alloc(m, N * C);
    if (parts & ACT_CORE) {
        a->rstd1 = f32_alloc(m, N);
        a->q = act_alloc(m, N * HD);
        a->k = act_alloc(m, N * KD);
        a->v = act_alloc(m, N * KD);
        if (c->qk_norm) {
            a->qraw = act_alloc(m, N * HD);
            a->kraw = act_alloc(m, N * KD);
            a->rstdq = f32_alloc(m, N * c->num_heads);
            a->rstdk = f32_alloc(m, N * c->num_kv_heads);
        }
        a->att = act_alloc(m, N * HD);
        if (lse) a->lse = f32_alloc(m, N * c->num_heads);
        a->mid = act_alloc(m, N * C);
        a->rstd2 = f32_alloc(m, N);
    }
    if (parts & ACT_NORMS) a->ln2 = act_alloc(m, N * C);
    if (parts & ACT_GU) {
        a->gate = act_alloc(m, N * 2 * F); /* gate | up: [N,F] each, adjacent (the paged model's joined matmul writes
                                            * [N,2F] rows there, or [N,(H+2KV)D] rows of q | k | v) */
        a->up = a->gate ? (char *)a->gate + N * F * m->ops->act_bytes : NULL;
    }
    if (parts & ACT_SWI) a->swi = act_alloc(m, N * F);
}

int qf_model_alloc_acts(qf_model *m, int B, int T, int ackpt, int rec_layers, qf_err *e) {
    const qf_model_config *c = &m->cfg;
    size_t N = (size_t)B * T, C = c->hidden_size, F = c->intermediate_size;
    size_t HD = (size_t)c->num_heads * c->head_dim, KD = (size_t)c->num_kv_heads * c->head_dim;
    int L = c->num_layers;
    m->B = B;
    m->T = T;
    m->ackpt = ackpt;
    m->res = qf_calloc((size_t)L + 1, sizeof *m->res);
    for (int l = 0; l <= L; l++) m->res[l] = act_alloc(m, N * C);
    /* per layer: its mode, its own parts, the shared set's parts (one set, used by one layer at a time: a FULL
     * layer's recomputed activations, a SELECTIVE layer's MLP intermediates, a POINTWISE layer's norms and SwiGLU
     * output, each live only between its recomputation and the end of that layer's backward) */
    static const int own_parts[4] = {[QF_ACKPT_NONE] = ACT_ALL, [QF_ACKPT_FULL] = 0,
                                     [QF_ACKPT_SELECTIVE] = ACT_CORE | ACT_NORMS, [QF_ACKPT_POINTWISE] = ACT_CORE | ACT_GU};
    m->lmode = qf_calloc((size_t)L, sizeof *m->lmode);
    m->la = qf_calloc((size_t)L, sizeof *m->la);
    int shared = 0;
    for (int l = 0; l < L; l++) {
        m->lmode[l] = layer_mode(ackpt, rec_layers, L, l);
        shared |= ACT_ALL & ~own_parts[m->lmode[l]];
    }
    if (shared & ACT_CORE) shared = ACT_ALL;
    qf_layer_acts sh = {0};
    layer_acts_alloc(m, &sh, N, 1, shared);
    for (int l = 0; l < L; l++) {
        qf_layer_acts *a = &m->la[l];
        int own = own_parts[m->lmode[l]];
        if (!own) {
            *a = sh;
            continue;
        }
        layer_acts_alloc(m, a, N, 1, own);
        if (!(own & ACT_NORMS)) a->ln1 = sh.ln1, a->ln2 = sh.ln2;
        if (!(own & ACT_GU)) a->gate = sh.gate, a->up = sh.up;
        if (!(own & ACT_SWI)) a->swi = sh.swi;
    }
    m->lnf = act_alloc(m, N * C);
    m->rstdf = f32_alloc(m, N);
    {
        m->dres = act_alloc(m, N * C);
        m->dln = act_alloc(m, N * C);
        m->dq = act_alloc(m, N * HD);
        m->dk = act_alloc(m, N * KD);
        m->dv = act_alloc(m, N * KD);
        m->datt = act_alloc(m, N * HD);
        m->dgate = act_alloc(m, N * F);
        m->dup = act_alloc(m, N * F);
        m->dswi = act_alloc(m, N * F);
    }
    size_t ib = N * sizeof(int32_t);
    m->d_tokens = qf_mem_trial_alloc(m->trial, m->ops, ib, "the batch on the backend");
    m->d_targets = qf_mem_trial_alloc(m->trial, m->ops, ib, "the batch on the backend");
    m->d_seg = qf_mem_trial_alloc(m->trial, m->ops, ib, "the batch on the backend");
    m->d_pos = qf_mem_trial_alloc(m->trial, m->ops, ib, "the batch on the backend");
    m->act_bytes += 4 * ib;
    if ((!m->d_tokens || !m->d_targets || !m->d_seg || !m->d_pos) && !in_trial(m))
        return qf_err_set(e, QF_EXIT_RUNTIME, "out of memory for the batch");
    return 0;
}

void qf_model_free_acts(qf_model *m) {
    QF_CHECK(m->S == 0); /* training mode only: the paged mode frees with the model */
    for (int i = 0; i < m->nacts; i++) m->ops->free(m->acts[i]);
    free(m->acts);
    void *ps[] = {m->d_tokens, m->d_targets, m->d_seg, m->d_pos};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) m->ops->free(ps[i]);
    free(m->res);
    free(m->la);
    free(m->lmode);
    m->acts = NULL;
    m->nacts = m->cap_acts = 0;
    m->d_tokens = m->d_targets = m->d_seg = m->d_pos = NULL;
    m->res = NULL;
    m->la = NULL;
    m->lmode = NULL;
    m->lnf = m->dres = m->dq = m->dk = m->dv = m->datt = m->dgate = m->dup = m->dswi = m->dln = NULL;
    m->rstdf = NULL;
    m->act_bytes = 0;
    m->B = m->T = 0;
}

void qf_model_free(qf_model *m) {
    const qf_ops *o = m->ops;
    if (!o) return;
    if (m->paged && o->graph_run) o->graph_run(0, 0, NULL, NULL); /* graphs of paged calls point into these buffers */
    int L = m->cfg.num_layers;
    if (m->S) { /* paged mode: res[] aliases resbuf[] */
        for (int l = 0; l < L; l++) {
            if (m->kc[l]) o->free(m->kc[l]);
            if (m->vc[l]) o->free(m->vc[l]);
        }
        void *ps[] = {m->dec_logits, m->dec_logits_f32, m->d_seq, m->d_btab};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
            if (ps[i]) o->free(ps[i]);
        free(m->kc);
        free(m->vc);
        qf_paged_prompt_free(&m->prompt, o);
    }
    for (int i = 0; i < m->nacts; i++) o->free(m->acts[i]); /* every act_alloc / f32_alloc buffer */
    free(m->acts);
    {
        void *ps[] = {m->d_tokens, m->d_targets, m->d_seg, m->d_pos};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
            if (ps[i]) o->free(ps[i]);
    }
    free(m->res);
    free(m->la);
    free(m->lmode);
    if (m->params) o->free(m->params);
    if (m->grads) o->free(m->grads);
    free(m->specs);
    free(m->offset);
    free(m->spec_unit);
    free(m->unit_off);
    free(m->lix);
    memset(m, 0, sizeof *m);
}

/* ---- parameter access through the unit hooks ---------------------------------------------------------- */

static const void *P(const qf_model *m, int i) {
    if (i < 0) return NULL;
    int u = m->spec_unit[i];
    char *base = m->hooks.unit_params(m->hooks.ctx, u);
    return base + (size_t)(m->offset[i] - m->unit_off[u]) * m->ops->act_bytes;
}
static void *G(const qf_model *m, int i) {
    if (i < 0) return NULL;
    int u = m->spec_unit[i];
    char *base = m->hooks.unit_grads(m->hooks.ctx, u);
    return base + (size_t)(m->offset[i] - m->unit_off[u]) * m->ops->act_bytes;
}
/* names parameter i (a linear layer's weight) and the parameters' version to the op table before its matmul (ops.h
 * fp8_weight; only the fp8 tables have it) */
static void wtag(const qf_model *m, int i) {
    if (!m->ops->fp8_weight) return;
    m->ops->fp8_weight(i, m->hooks.param_version ? m->hooks.param_version(m->hooks.ctx) : 0);
}
/* the next matmul reads the previous matmul's x, unchanged (ops.h fp8_same_x: an fp8 table casts it once) */
static void same_x(const qf_model *m) {
    if (m->ops->fp8_same_x) m->ops->fp8_same_x();
}
/* fp8.save_inputs (ops.h fp8_saved_x): layer l's input j (0 ln1, 1 att, 2 ln2, 3 swi) as key 4 l + j; mode 1 the
 * forward saves it, 2 the backward reads what was saved. Only layers that keep their activations (no recomputation:
 * a recomputed layer's inputs live in buffers shared between layers) and forwards with a backward. */
static void saved_x(const qf_model *m, int l, int j, int mode) {
    if (!m->ops->fp8_saved_x || !m->lmode || m->lmode[l] != QF_ACKPT_NONE || (mode == 1 && !m->save_x)) return;
    m->ops->fp8_saved_x(4 * l + j, mode);
}
static void will_use(qf_model *m, int u, int backward) {
    if (m->hooks.unit_will_use) m->hooks.unit_will_use(m->hooks.ctx, u, backward);
}
static void grads_done(qf_model *m, int u) {
    if (m->hooks.unit_grads_done) m->hooks.unit_grads_done(m->hooks.ctx, u);
}

/* ---- init ------------------------------------------------------------------------------------------------ */

/* splitmix64 finaliser: a counter-based generator (value = f(seed, parameter, element)) */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static double unit_open(uint64_t x) { return ((double)(x >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

void qf_model_init_random_range(const qf_model *m, uint64_t seed, int64_t b, int64_t e, float *out) {
    double sd = m->cfg.initializer_range > 0 ? m->cfg.initializer_range : 0.02;
    for (int i = 0; i < m->nspecs; i++) {
        const qf_param_spec *s = &m->specs[i];
        int64_t pb = m->offset[i], pe = pb + s->numel;
        int64_t lo = pb > b ? pb : b, hi = pe < e ? pe : e;
        if (lo >= hi) continue;
        int is_norm = strstr(s->name, "norm") != NULL;
        uint64_t key = mix64(seed ^ mix64((uint64_t)i + 1));
#pragma omp parallel for schedule(static)
        for (int64_t j = lo - pb; j < hi - pb; j++) {
            float v;
            if (s->ndim == 2) { /* Box-Muller from two counter-based uniforms */
                uint64_t h = mix64(key + 2 * (uint64_t)j), h2 = mix64(key + 2 * (uint64_t)j + 1);
                v = (float)(sd * sqrt(-2.0 * log(unit_open(h))) * cos(2.0 * M_PI * unit_open(h2)));
            } else {
                v = is_norm ? 1.0f : 0.0f;
            }
            out[pb + j - b] = v;
        }
    }
}

void qf_model_init_random(qf_model *m, uint64_t seed) {
    float *h = qf_malloc((size_t)m->n_params * sizeof(float));
    qf_model_init_random_range(m, seed, 0, m->n_params, h);
    float *dev = m->ops->alloc((size_t)m->n_params * 4);
    QF_CHECK(dev);
    m->ops->copy_h2d(dev, h, (size_t)m->n_params * 4);
    m->ops->act_from_f32(m->params, dev, (size_t)m->n_params);
    m->ops->free(dev);
    free(h);
}

/* ---- forward ----------------------------------------------------------------------------------------------- */

/* training: each layer's set (shared parts aliased); paged mode: one scratch set for every layer */
static qf_layer_acts *acts_of(qf_model *m, int l) { return m->lmode ? &m->la[l] : &m->la[0]; }

/* A paged call's layer through the table's decoding fast path (ops.h decode_qkv, decode_mlp: the unfused ops'
 * values in fewer launches and passes over the weights): 1 when it ran, 0 (nothing done) where the table does not
 * take it. Inference only: the norms' inputs and statistics are not kept. */
static int layer_forward_decode(qf_model *m, int l) {
    const qf_ops *o = m->ops;
    const qf_model_config *c = &m->cfg;
    const qf_layer_ix *x = &m->lix[l];
    qf_layer_acts *a = acts_of(m, l);
    int N = m->B * m->T, C = c->hidden_size, F = c->intermediate_size, H = c->num_heads, KV = c->num_kv_heads,
        D = c->head_dim;
    float eps = (float)c->rms_norm_eps;
    if (!m->paged || c->qk_norm || !o->decode_qkv || m->prompt.from < N) return 0; /* prompts: layer_forward */
    qf_decode_qkv qa = {.q = a->q, .kpool = m->kc[l], .vpool = m->vc[l], .x = m->res[l], .ln_w = P(m, x->ln1),
                        .wq = P(m, x->qw), .bq = P(m, x->qb), .wk = P(m, x->kw), .bk = P(m, x->kb), .wv = P(m, x->vw),
                        .bv = P(m, x->vb), .seq = m->d_seq, .pos = m->d_pos, .btab = m->d_btab, .ln = a->ln1,
                        .k = a->k, .v = a->v, .rstd = a->rstd1, .N = N, .C = C, .H = H, .KV = KV, .D = D,
                        .maxb = m->maxb, .bs = m->block_size, .eps = eps, .theta = c->rope_theta};
    if (!o->decode_qkv(&qa)) return 0;
    o->attention_paged(a->att, a->q, NULL, NULL, m->kc[l], m->vc[l], m->d_seq, m->d_pos, m->d_btab, N, m->maxb,
                       m->block_size, H, KV, D, m->paged_len);
    o->matmul_fwd_add(a->mid, a->att, P(m, x->ow), m->res[l], N, H * D, C);
    qf_decode_mlp ma = {.out = a->swi, .x = a->mid, .ln_w = P(m, x->ln2), .wg = P(m, x->gate), .wu = P(m, x->up),
                        .ln = a->ln2, .gate = a->gate, .up = a->up, .rstd = a->rstd2, .N = N, .C = C, .F = F,
                        .eps = eps};
    if (!o->decode_mlp || !o->decode_mlp(&ma)) {
        o->rmsnorm_fwd(a->ln2, a->rstd2, a->mid, P(m, x->ln2), N, C, eps);
        o->matmul_fwd(a->gate, a->ln2, P(m, x->gate), NULL, N, C, F, 0);
        o->matmul_fwd(a->up, a->ln2, P(m, x->up), NULL, N, C, F, 0);
        o->swiglu_fwd(a->swi, a->gate, a->up, N, F);
    }
    o->matmul_fwd_add(m->res[l + 1], a->swi, P(m, x->down), a->mid, N, F, C); /* res[l+1] = mid + swi Wd^T */
    return 1;
}

/* res[l] -> res[l+1] (the caller has announced unit l+1 through will_use) */
static void layer_forward(qf_model *m, int l) {
    const qf_ops *o = m->ops;
    const qf_model_config *c = &m->cfg;
    const qf_layer_ix *x = &m->lix[l];
    qf_layer_acts *a = acts_of(m, l);
    int N = m->B * m->T, C = c->hidden_size, F = c->intermediate_size, H = c->num_heads, KV = c->num_kv_heads,
        D = c->head_dim;
    float eps = (float)c->rms_norm_eps;
    if (m->paged && layer_forward_decode(m, l)) return;
    o->rmsnorm_fwd(a->ln1, a->rstd1, m->res[l], P(m, x->ln1), N, C, eps);
    if (m->paged && m->joined_qkv && o->qkv_rope && !o->fp8_weight) { /* one matmul over [wq; wk; wv] */
        o->matmul_fwd(a->gate, a->ln1, P(m, x->qw), P(m, x->qb), N, C, (H + 2 * KV) * D, 0);
        o->qkv_rope(a->q, a->k, a->v, a->gate, m->d_pos, N, H, KV, D, c->rope_theta);
    } else {
        void *q = c->qk_norm ? a->qraw : a->q, *k = c->qk_norm ? a->kraw : a->k;
        saved_x(m, l, 0, 1), wtag(m, x->qw);
        o->matmul_fwd(q, a->ln1, P(m, x->qw), P(m, x->qb), N, C, H * D, 0);
        same_x(m), wtag(m, x->kw);
        o->matmul_fwd(k, a->ln1, P(m, x->kw), P(m, x->kb), N, C, KV * D, 0);
        same_x(m), wtag(m, x->vw);
        o->matmul_fwd(a->v, a->ln1, P(m, x->vw), P(m, x->vb), N, C, KV * D, 0);
        if (c->qk_norm) { /* per-head RMSNorm: [N*H, D] rows */
            o->rmsnorm_fwd(a->q, a->rstdq, a->qraw, P(m, x->qn), N * H, D, eps);
            o->rmsnorm_fwd(a->k, a->rstdk, a->kraw, P(m, x->kn), N * KV, D, eps);
        }
        o->rope_fwd(a->q, m->d_pos, N, H, D, c->rope_theta);
        o->rope_fwd(a->k, m->d_pos, N, KV, D, c->rope_theta);
    }
    if (m->paged) { /* paged mode: k/v into each sequence's blocks, attend them */
        const int f = m->prompt.from; /* tokens [f, N): prompt chunks on attention_prompt (paged_prompt.h) */
        if (f > 0)
            o->attention_paged(a->att, a->q, a->k, a->v, m->kc[l], m->vc[l], m->d_seq, m->d_pos, m->d_btab, f,
                               m->maxb, m->block_size, H, KV, D, m->paged_len);
        if (f < N)
            qf_paged_prompt_attend(&m->prompt, o, a->att, a->q, a->k, a->v, m->kc[l], m->vc[l], m->d_seq, m->d_pos,
                                   m->d_btab, N, H, KV, D);
    } else
        o->attention_fwd(a->att, a->lse, a->q, a->k, a->v, m->d_seg, m->B, m->T, H, KV, D);
    /* mid = res + att Wo^T */
    saved_x(m, l, 1, 1), wtag(m, x->ow);
    o->matmul_fwd_add(a->mid, a->att, P(m, x->ow), m->res[l], N, H * D, C);
    o->rmsnorm_fwd(a->ln2, a->rstd2, a->mid, P(m, x->ln2), N, C, eps);
    if (m->paged && m->joined_gu && o->swiglu_joined && !o->fp8_weight) { /* one matmul over [wg; wu] */
        o->matmul_fwd(a->gate, a->ln2, P(m, x->gate), NULL, N, C, 2 * F, 0);
        o->swiglu_joined(a->swi, a->gate, N, F);
    } else {
        saved_x(m, l, 2, 1), wtag(m, x->gate);
        o->matmul_fwd(a->gate, a->ln2, P(m, x->gate), NULL, N, C, F, 0);
        same_x(m), wtag(m, x->up);
        o->matmul_fwd(a->up, a->ln2, P(m, x->up), NULL, N, C, F, 0);
        o->swiglu_fwd(a->swi, a->gate, a->up, N, F);
    }
    saved_x(m, l, 3, 1), wtag(m, x->down);
    o->matmul_fwd_add(m->res[l + 1], a->swi, P(m, x->down), a->mid, N, F, C); /* res[l+1] = mid + swi Wd^T */
}

/* dres holds d loss / d res[l+1]; on return d loss / d res[l]. Gradients accumulate. */
static void layer_backward(qf_model *m, int l) {
    const qf_ops *o = m->ops;
    const qf_model_config *c = &m->cfg;
    const qf_layer_ix *x = &m->lix[l];
    int N = m->B * m->T, C = c->hidden_size, F = c->intermediate_size, H = c->num_heads, KV = c->num_kv_heads,
        D = c->head_dim;
    will_use(m, l + 1, 1);
    if (m->prof) m->prof->recomputing = 1;
    const int mode = m->lmode[l];
    if (mode == QF_ACKPT_FULL) layer_forward(m, l); /* recompute this layer's activations from res[l] */
    qf_layer_acts *a = acts_of(m, l);
    if (mode == QF_ACKPT_SELECTIVE) { /* recompute only the MLP intermediates (2 of the layer's 7 matmuls) */
        wtag(m, x->gate);
        o->matmul_fwd(a->gate, a->ln2, P(m, x->gate), NULL, N, C, F, 0);
        same_x(m), wtag(m, x->up);
        o->matmul_fwd(a->up, a->ln2, P(m, x->up), NULL, N, C, F, 0);
        o->swiglu_fwd(a->swi, a->gate, a->up, N, F);
    } else if (mode == QF_ACKPT_POINTWISE) { /* recompute only the norms and SwiGLU from the kept GEMM outputs */
        float eps = (float)c->rms_norm_eps;
        o->rmsnorm_fwd(a->ln1, a->rstd1, m->res[l], P(m, x->ln1), N, C, eps);
        o->rmsnorm_fwd(a->ln2, a->rstd2, a->mid, P(m, x->ln2), N, C, eps);
        o->swiglu_fwd(a->swi, a->gate, a->up, N, F);
    }
    if (m->prof) m->prof->recomputing = 0;
    /* MLP */
    saved_x(m, l, 3, 2), wtag(m, x->down);
    o->matmul_bwd(m->dswi, G(m, x->down), NULL, m->dres, a->swi, P(m, x->down), N, F, C, 0);
    o->swiglu_bwd(m->dgate, m->dup, m->dswi, a->gate, a->up, N, F);
    saved_x(m, l, 2, 2), wtag(m, x->gate);
    o->matmul_bwd(m->dln, G(m, x->gate), NULL, m->dgate, a->ln2, P(m, x->gate), N, C, F, 0);
    same_x(m), saved_x(m, l, 2, 2), wtag(m, x->up);
    o->matmul_bwd(m->dln, G(m, x->up), NULL, m->dup, a->ln2, P(m, x->up), N, C, F, 1);
    o->rmsnorm_bwd(m->dres, G(m, x->ln2), m->dln, a->mid, P(m, x->ln2), a->rstd2, N, C, 1);
    /* attention */
    saved_x(m, l, 1, 2), wtag(m, x->ow);
    o->matmul_bwd(m->datt, G(m, x->ow), NULL, m->dres, a->att, P(m, x->ow), N, H * D, C, 0);
    o->attention_bwd(m->dq, m->dk, m->dv, m->datt, a->att, a->lse, a->q, a->k, a->v, m->d_seg, m->B, m->T, H, KV,
                     D);
    o->rope_bwd(m->dq, m->d_pos, N, H, D, c->rope_theta);
    o->rope_bwd(m->dk, m->d_pos, N, KV, D, c->rope_theta);
    if (c->qk_norm) { /* dq/dk wrt the normed values -> wrt the raw projections (datt is free scratch now) */
        o->rmsnorm_bwd(m->datt, G(m, x->qn), m->dq, a->qraw, P(m, x->qn), a->rstdq, N * H, D, 0);
        o->copy_d2d(m->dq, m->datt, (size_t)N * H * D * o->act_bytes);
        o->rmsnorm_bwd(m->datt, G(m, x->kn), m->dk, a->kraw, P(m, x->kn), a->rstdk, N * KV, D, 0);
        o->copy_d2d(m->dk, m->datt, (size_t)N * KV * D * o->act_bytes);
    }
    saved_x(m, l, 0, 2), wtag(m, x->qw);
    o->matmul_bwd(m->dln, G(m, x->qw), G(m, x->qb), m->dq, a->ln1, P(m, x->qw), N, C, H * D, 0);
    same_x(m), saved_x(m, l, 0, 2), wtag(m, x->kw);
    o->matmul_bwd(m->dln, G(m, x->kw), G(m, x->kb), m->dk, a->ln1, P(m, x->kw), N, C, KV * D, 1);
    same_x(m), saved_x(m, l, 0, 2), wtag(m, x->vw);
    o->matmul_bwd(m->dln, G(m, x->vw), G(m, x->vb), m->dv, a->ln1, P(m, x->vw), N, C, KV * D, 1);
    o->rmsnorm_bwd(m->dres, G(m, x->ln1), m->dln, m->res[l], P(m, x->ln1), a->rstd1, N, C, 1);
    grads_done(m, l + 1);
}

static void upload_batch(qf_model *m, const qf_rows *r) {
    QF_CHECK(r->B == m->B && r->T == m->T);
    size_t ib = (size_t)r->B * r->T * sizeof(int32_t);
    m->ops->copy_h2d(m->d_tokens, r->tokens, ib);
    m->ops->copy_h2d(m->d_targets, r->targets, ib);
    m->ops->copy_h2d(m->d_seg, r->seg_start, ib);
    m->ops->copy_h2d(m->d_pos, r->pos, ib);
}

static void forward_trunk(qf_model *m) {
    const qf_ops *o = m->ops;
    int N = m->B * m->T, C = m->cfg.hidden_size, L = m->cfg.num_layers;
    will_use(m, 0, 0);
    o->embedding_fwd(m->res[0], m->d_tokens, P(m, m->ix_embed), N, C);
    for (int l = 0; l < L; l++) {
        o->range_push("unit.forward"); /* NVTX: one range per decoder layer (its gather wait included) */
        will_use(m, l + 1, 0);
        layer_forward(m, l);
        o->range_pop();
    }
    will_use(m, L + 1, 0);
    o->rmsnorm_fwd(m->lnf, m->rstdf, m->res[L], P(m, m->ix_norm), N, C, (float)m->cfg.rms_norm_eps);
}

double qf_model_step(qf_model *m, const qf_rows *r, float grad_scale, int backward) {
    const qf_ops *o = m->ops;
    int N = m->B * m->T, C = m->cfg.hidden_size, L = m->cfg.num_layers;
    int V = (int)m->cfg.vocab_size;
    QF_CHECK(!backward || m->grads || m->hooks.unit_grads != default_unit_grads);
    upload_batch(m, r);
    m->save_x = backward;
    forward_trunk(m);
    m->save_x = 0;
    if (backward) qf_profile_lap(m->prof, QF_PH_FORWARD);
    double loss = 0;
    if (!backward) {
        o->classifier(&loss, NULL, NULL, m->lnf, P(m, m->ix_head), m->d_targets, N, C, V, 1.0f);
        return loss;
    }
    o->classifier(&loss, m->dln, G(m, m->ix_head), m->lnf, P(m, m->ix_head), m->d_targets, N, C, V, grad_scale);
    o->rmsnorm_bwd(m->dres, G(m, m->ix_norm), m->dln, m->res[L], P(m, m->ix_norm), m->rstdf, N, C, 0);
    grads_done(m, L + 1);
    for (int l = L - 1; l >= 0; l--) {
        o->range_push("unit.backward");
        layer_backward(m, l);
        o->range_pop();
    }
    will_use(m, 0, 1);
    o->embedding_bwd(G(m, m->ix_embed), m->dres, m->d_tokens, N, C, V);
    grads_done(m, 0);
    return loss;
}

void qf_model_logits(qf_model *m, const qf_rows *r, float *out) {
    const qf_ops *o = m->ops;
    int N = m->B * m->T, C = m->cfg.hidden_size;
    int V = (int)m->cfg.vocab_size;
    upload_batch(m, r);
    forward_trunk(m);
    void *logits = o->alloc((size_t)N * V * o->act_bytes);
    QF_CHECK(logits);
    wtag(m, m->ix_head);
    o->matmul_fwd(logits, m->lnf, P(m, m->ix_head), NULL, N, C, V, 0);
    float *tmp = o->alloc((size_t)N * V * 4);
    QF_CHECK(tmp);
    o->act_to_f32(tmp, logits, (size_t)N * V);
    o->copy_d2h(out, tmp, (size_t)N * V * 4);
    o->free(tmp);
    o->free(logits);
}

/* ---- the cached layers' buffers (paged mode below) ------------------------------------------------------- */

/* what cache_alloc allocates: one scratch set of layer activations for Ntok tokens, the residual pair, the call's
 * tokens and positions, and the k/v caches of S positions of nlayers layers */
static int64_t cache_bytes(const qf_model_config *c, int Ntok, int64_t S, int nlayers, int64_t ab) {
    int64_t N = Ntok, C = c->hidden_size, F = c->intermediate_size;
    int64_t HD = (int64_t)c->num_heads * c->head_dim, KD = (int64_t)c->num_kv_heads * c->head_dim;
    int64_t layer = ab * (N * C + HD * N + 2 * KD * N + HD * N + 2 * N * C + 3 * N * F) + 4 * 2 * N; /* one set */
    if (c->qk_norm) layer += ab * N * (HD + KD) + 4 * N * (c->num_heads + c->num_kv_heads);
    int64_t total = layer + ab * 2 * N * C + 4 * 2 * N; /* resbuf[2], d_tokens, d_pos */
    return total + ab * 2 * (int64_t)nlayers * S * KD;  /* the caches */
}

/* one scratch set of layer activations for Ntok tokens a call, res[l] aliasing resbuf[l % 2], and the k/v caches
 * (S positions) of layers [l0, l1); no gradients, no backward */
static int cache_alloc(qf_model *m, int Ntok, int S, int l0, int l1, qf_err *e) {
    const qf_model_config *c = &m->cfg;
    size_t N = (size_t)Ntok, C = c->hidden_size;
    size_t KD = (size_t)c->num_kv_heads * c->head_dim;
    int L = c->num_layers;
    QF_CHECK(Ntok >= 1 && S >= Ntok && 0 <= l0 && l0 <= l1 && l1 <= L);
    m->B = 1;
    m->T = Ntok;
    m->Tcap = Ntok;
    m->S = S;
    m->ackpt = QF_ACKPT_FULL; /* one scratch set of layer activations */
    m->res = qf_calloc((size_t)L + 1, sizeof *m->res);
    m->resbuf[0] = act_alloc(m, N * C);
    m->resbuf[1] = act_alloc(m, N * C);
    for (int l = 0; l <= L; l++) m->res[l] = m->resbuf[l % 2];
    m->la = qf_calloc(1, sizeof *m->la);
    layer_acts_alloc(m, &m->la[0], N, 0, ACT_ALL); /* no lse: decoding runs no backward */
    m->kc = qf_calloc((size_t)L, sizeof *m->kc);
    m->vc = qf_calloc((size_t)L, sizeof *m->vc);
    size_t cache = (size_t)S * KD * m->ops->act_bytes;
    for (int l = l0; l < l1; l++) {
        m->kc[l] = m->ops->alloc(cache);
        m->vc[l] = m->ops->alloc(cache);
        if (!m->kc[l] || !m->vc[l])
            return qf_err_set(e, QF_EXIT_RUNTIME, "out of memory for the KV cache of layer %d (%zu bytes x 2: %d "
                                                  "positions)", l, cache, S);
        m->act_bytes += 2 * cache;
    }
    size_t ib = N * sizeof(int32_t);
    m->d_tokens = m->ops->alloc(ib);
    m->d_pos = m->ops->alloc(ib);
    if (!m->d_tokens || !m->d_pos) return qf_err_set(e, QF_EXIT_RUNTIME, "out of memory for the batch");
    m->act_bytes += 2 * ib;
    return 0;
}

void *qf_model_decode_residual(qf_model *m, int l) { return m->res[l]; }

void qf_model_decode_layers(qf_model *m, int l0, int l1) {
    for (int l = l0; l < l1; l++) {
        QF_CHECK(m->kc[l]);
        will_use(m, l + 1, 0);
        layer_forward(m, l);
    }
}

/* ---- paged KV-cache mode ------------------------------------------------------------------------------------ */

int64_t qf_model_paged_bytes(const qf_model_config *c, int Ntok, int max_seqs, int nblocks, int block_size, int maxb,
                             int nlayers, int head, int64_t ab) {
    int64_t t = cache_bytes(c, Ntok, (int64_t)nblocks * block_size, nlayers, ab);
    int64_t B = max_seqs, C = c->hidden_size, V = c->vocab_size;
    if (head) t += ab * 2 * B * C + 4 * B + ab * B * V + 4 * B * V;
    return t + 4 * ((int64_t)Ntok + B * maxb) + qf_paged_prompt_bytes(c, Ntok, ab);
}

int qf_model_alloc_paged(qf_model *m, int Ntok, int max_seqs, int nblocks, int block_size, int maxb, int l0, int l1,
                         int head, qf_err *e) {
    int64_t S = (int64_t)nblocks * block_size;
    QF_CHECK(Ntok >= 1 && max_seqs >= 1 && block_size >= 1 && maxb >= 1 && S >= Ntok && S <= INT32_MAX);
    if (cache_alloc(m, Ntok, (int)S, l0, l1, e)) return e->code;
    m->paged = 1;
    m->paged_step = QF_PAGED_LEN_STEP;
    const char *ls = getenv("QWENFT_PAGED_LEN_STEP"); /* a bench hook (docs/testing.md) */
    if (ls) {
        char *end;
        const long v = strtol(ls, &end, 10);
        if (end == ls || *end || v < 64 || v > 65536 || v % 64)
            return qf_err_set(e, QF_EXIT_INPUT, "QWENFT_PAGED_LEN_STEP=%s: a multiple of 64 from 64 to 65536 expected",
                              ls);
        m->paged_step = (int)v;
    }
    m->block_size = block_size;
    m->max_seqs = max_seqs;
    m->maxb = maxb;
    size_t C = m->cfg.hidden_size, V = (size_t)m->cfg.vocab_size, B = (size_t)max_seqs;
    if (head) {
        m->dec_x = act_alloc(m, B * C);
        m->lnf = act_alloc(m, B * C);
        m->rstdf = f32_alloc(m, B);
        m->dec_logits = m->ops->alloc(B * V * m->ops->act_bytes);
        m->dec_logits_f32 = m->ops->alloc(B * V * 4);
        if (!m->dec_logits || !m->dec_logits_f32)
            return qf_err_set(e, QF_EXIT_RUNTIME, "out of memory for the logits (%d rows x %zu)", max_seqs, V);
        m->act_bytes += B * V * (m->ops->act_bytes + 4);
    }
    m->d_seq = m->ops->alloc((size_t)Ntok * sizeof(int32_t));
    m->d_btab = m->ops->alloc(B * (size_t)maxb * sizeof(int32_t));
    if (!m->d_seq || !m->d_btab) return qf_err_set(e, QF_EXIT_RUNTIME, "out of memory for the block tables");
    m->act_bytes += ((size_t)Ntok + B * maxb) * sizeof(int32_t);
    if (qf_paged_prompt_alloc(&m->prompt, m->ops, &m->cfg, Ntok, max_seqs, maxb, block_size, e)) return e->code;
    if (!m->prompt.off) m->act_bytes += (size_t)qf_paged_prompt_bytes(&m->cfg, Ntok, (int64_t)m->ops->act_bytes);
    return 0;
}

/* the attention's bound for a call whose largest position is maxpos: maxpos + 1 rounded up to a multiple of
 * QF_PAGED_LEN_STEP, at most the block tables' reach (attention_paged bounds each token by its own position; the
 * split of the positions, and so the rounding of the sums, follows this bound: one bound for eager and graph) */
static int paged_len_of(const qf_model *m, int maxpos) {
    const int64_t reach = (int64_t)m->maxb * m->block_size, st = m->paged_step;
    int64_t b = ((int64_t)maxpos + st) / st * st;
    return (int)(b < reach ? b : reach);
}

void qf_model_paged_inputs(qf_model *m, const int32_t *tokens, const int32_t *seq, const int32_t *pos, int N,
                           const int32_t *btab) {
    QF_CHECK(m->paged && N >= 1 && N <= m->Tcap);
    int maxpos = 0;
    for (int n = 0; n < N; n++) {
        QF_CHECK(seq[n] >= 0 && seq[n] < m->max_seqs && pos[n] >= 0 && pos[n] / m->block_size < m->maxb);
        maxpos = pos[n] > maxpos ? pos[n] : maxpos;
    }
    m->paged_len = paged_len_of(m, maxpos);
    m->T = N;
    qf_paged_prompt_plan(&m->prompt, m->ops, seq, pos, N, btab);
    m->ops->copy_h2d(m->d_pos, pos, (size_t)N * sizeof *pos);
    m->ops->copy_h2d(m->d_seq, seq, (size_t)N * sizeof *seq);
    if (btab) m->ops->copy_h2d(m->d_btab, btab, (size_t)m->max_seqs * m->maxb * sizeof *btab);
    if (tokens) m->ops->copy_h2d(m->d_tokens, tokens, (size_t)N * sizeof *tokens);
}

static void paged_embed(qf_model *m) {
    will_use(m, 0, 0);
    m->ops->embedding_fwd(m->res[0], m->d_tokens, P(m, m->ix_embed), m->T, m->cfg.hidden_size);
}

void qf_model_paged_begin(qf_model *m, const int32_t *tokens, const int32_t *seq, const int32_t *pos, int N,
                          const int32_t *btab, int embed) {
    qf_model_paged_inputs(m, embed ? tokens : NULL, seq, pos, N, btab);
    if (embed) paged_embed(m);
}

/* dec_logits[n, V] (act) = the head over the final residual rows rows[n] of the last paged call */
static void paged_head(qf_model *m, const int32_t *rows, int n) {
    const qf_ops *o = m->ops;
    int C = m->cfg.hidden_size, L = m->cfg.num_layers, V = (int)m->cfg.vocab_size;
    QF_CHECK(m->paged && n >= 1 && n <= m->max_seqs);
    size_t rb = (size_t)C * o->act_bytes;
    int run = 1; /* rows[i] = rows[0] + i (a decoding-only call): the norm reads the residual in place */
    for (int i = 0; i < n; i++) {
        QF_CHECK(rows[i] >= 0 && rows[i] < m->T);
        run &= rows[i] == rows[0] + i;
    }
    const void *x = (const char *)m->res[L] + (size_t)rows[0] * rb;
    if (!run) {
        for (int i = 0; i < n; i++)
            o->copy_d2d((char *)m->dec_x + i * rb, (const char *)m->res[L] + (size_t)rows[i] * rb, rb);
        x = m->dec_x;
    }
    will_use(m, L + 1, 0);
    o->rmsnorm_fwd(m->lnf, m->rstdf, x, P(m, m->ix_norm), n, C, (float)m->cfg.rms_norm_eps);
    if (m->ix_head == m->ix_embed) will_use(m, 0, 0);
    o->matmul_fwd(m->dec_logits, m->lnf, P(m, m->ix_head), NULL, n, C, V, 0);
}

/* ---- a paged call's GPU work as one unit (qf_model_paged_run: eager or one graph replay) ---- */
typedef struct paged_work {
    qf_model *m;
    int embed, l0, l1, nrows;
    const int32_t *rows;
} paged_work;

static void paged_body(void *arg) {
    paged_work *w = arg;
    if (w->embed) paged_embed(w->m);
    qf_model_decode_layers(w->m, w->l0, w->l1);
    if (w->nrows) paged_head(w->m, w->rows, w->nrows);
}

static uint64_t key_mix(uint64_t h, uint64_t v) { return mix64(h ^ mix64(v + 0x632be59bd9b4e019ull)); }

int qf_model_paged_run(qf_model *m, int embed, int l0, int l1, const int32_t *rows, int nrows, int graph) {
    QF_CHECK(m->paged && m->T >= 1 && l0 >= 0 && l0 <= l1 && l1 <= m->cfg.num_layers && nrows >= 0 &&
             nrows <= m->max_seqs);
    paged_work w = {.m = m, .embed = embed, .l0 = l0, .l1 = l1, .nrows = nrows, .rows = rows};
    int run = 1; /* the head's rows follow each other: its input is a pointer into the residual (no gather) */
    for (int i = 0; i < nrows; i++) {
        QF_CHECK(rows[i] >= 0 && rows[i] < m->T);
        run &= rows[i] == rows[0] + i;
    }
    if (!graph || !m->ops->graph_run || m->prof || !run || m->prompt.from < m->T) { /* prompts: eager */
        paged_body(&w);
        return 0;
    }
    /* every host value the queued work depends on: the table and the model (its buffers), the call's shapes, the
     * head's first row (the family: calls that differ only in kernel arguments), then the attention's bound */
    uint64_t f = key_mix(0, (uint64_t)(uintptr_t)m->ops);
    f = key_mix(f, (uint64_t)(uintptr_t)m);
    const int64_t v[] = {m->T, embed, l0, l1, nrows, nrows ? rows[0] : -1};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) f = key_mix(f, (uint64_t)v[i]);
    return m->ops->graph_run(key_mix(f, (uint64_t)m->paged_len), f, paged_body, &w);
}

void qf_model_paged_pick(qf_model *m, int n, int32_t *ids, float *logprob) {
    QF_CHECK(m->dec_logits && n >= 1 && n <= m->max_seqs);
    m->ops->argmax_rows(ids, logprob, m->dec_logits, n, (int)m->cfg.vocab_size);
}

void qf_model_paged_read_logits(qf_model *m, int n, float *out) {
    const size_t V = (size_t)m->cfg.vocab_size;
    QF_CHECK(m->dec_logits && n >= 1 && n <= m->max_seqs);
    m->ops->act_to_f32(m->dec_logits_f32, m->dec_logits, (size_t)n * V);
    m->ops->copy_d2h(out, m->dec_logits_f32, (size_t)n * V * 4);
}

void qf_model_paged_logits(qf_model *m, const int32_t *rows, int n, float *out) {
    const size_t V = (size_t)m->cfg.vocab_size;
    paged_head(m, rows, n);
    m->ops->act_to_f32(m->dec_logits_f32, m->dec_logits, (size_t)n * V);
    m->ops->copy_d2h(out, m->dec_logits_f32, (size_t)n * V * 4);
}

void qf_model_paged_argmax(qf_model *m, const int32_t *rows, int n, int32_t *ids, float *logprob) {
    paged_head(m, rows, n);
    m->ops->argmax_rows(ids, logprob, m->dec_logits, n, (int)m->cfg.vocab_size);
}
