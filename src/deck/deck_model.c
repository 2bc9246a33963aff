/* deck_model.c — the architecture a deck describes without a model file (qf_deck_model_config): model.preset
 * overlaid with the explicit model.* dimensions, or the dimensions alone with the defaults of docs/deck.md. This is
 * where the model.* keys act: run.c builds the model from the result, and the deck checks it while loading. */
#include <stdio.h>
#include <string.h>
#include "deck.h"
#include "model_config.h"

static void model_defaults(const qf_deck *d, qf_model_config *m) {
    memset(m, 0, sizeof *m);
    snprintf(m->arch, sizeof m->arch, "%s", d->model_arch[0] ? d->model_arch : "qwen2");
    snprintf(m->family, sizeof m->family, "preset");
    snprintf(m->dtype, sizeof m->dtype, "bf16");
    m->rope_theta = 10000.0;
    m->rms_norm_eps = 1e-6;
    m->max_position_embeddings = 32768;
    m->initializer_range = 0.02;
    m->attention_bias = strcmp(m->arch, "qwen3") != 0;
    m->qk_norm = strcmp(m->arch, "qwen3") == 0;
    m->bos_token_id = m->eos_token_id = 151643;
    m->pad_token_id = -1;
}

/* Explicit model.* values over m (a preset or the defaults). */
static void model_overlay(const qf_deck *d, qf_model_config *m, int from_preset) {
    int heads_changed = d->model_num_attention_heads > 0 || d->model_hidden_size > 0;
    if (d->model_arch[0]) snprintf(m->arch, sizeof m->arch, "%s", d->model_arch);
    if (d->model_vocab_size > 0) m->vocab_size = d->model_vocab_size;
    if (d->model_hidden_size > 0) m->hidden_size = d->model_hidden_size;
    if (d->model_intermediate_size > 0) m->intermediate_size = d->model_intermediate_size;
    if (d->model_num_hidden_layers > 0) m->num_layers = d->model_num_hidden_layers;
    if (d->model_num_attention_heads > 0) m->num_heads = d->model_num_attention_heads;
    if (d->model_num_key_value_heads > 0) m->num_kv_heads = d->model_num_key_value_heads;
    else if (!from_preset) m->num_kv_heads = m->num_heads;
    if (d->model_head_dim > 0) m->head_dim = d->model_head_dim;
    else if (!from_preset || (heads_changed && strcmp(m->arch, "qwen3") != 0))
        m->head_dim = m->num_heads > 0 ? m->hidden_size / m->num_heads : 0;
    if (!from_preset && strcmp(m->arch, "qwen3") == 0 && d->model_head_dim <= 0) m->head_dim = 128;
    if (d->model_tie_word_embeddings >= 0) m->tie_word_embeddings = d->model_tie_word_embeddings;
    if (d->model_attention_bias >= 0) m->attention_bias = d->model_attention_bias;
    if (d->model_qk_norm >= 0) m->qk_norm = d->model_qk_norm;
    if (d->model_rope_theta > 0) m->rope_theta = d->model_rope_theta;
    if (d->model_rms_norm_eps > 0) m->rms_norm_eps = d->model_rms_norm_eps;
    if (d->model_max_position_embeddings > 0) m->max_position_embeddings = d->model_max_position_embeddings;
    if (d->model_initializer_range > 0) m->initializer_range = d->model_initializer_range;
}

int qf_deck_model_config(const qf_deck *d, qf_model_config *out, char *msg, int n) {
    int preset = d->model_preset[0] != 0;
    if (preset && qf_preset_lookup(d->model_preset, out) != 0) {
        snprintf(msg, (size_t)n, "unknown preset \"%s\"", d->model_preset);
        return -1;
    }
    if (!preset) {
        if (d->model_vocab_size <= 0 || d->model_hidden_size <= 0 || d->model_intermediate_size <= 0 ||
            d->model_num_hidden_layers <= 0 || d->model_num_attention_heads <= 0) {
            snprintf(msg, (size_t)n, "no model.preset and no complete model dimensions");
            return -1;
        }
        model_defaults(d, out);
    }
    model_overlay(d, out, preset);
    return qf_model_config_check(out, msg, n);
}

int qf_deck_preset_matches(const qf_deck *d, const qf_model_config *f, char *msg, int n) {
    qf_model_config p;
    if (!d->model_preset[0]) return 0;
    if (qf_preset_lookup(d->model_preset, &p) != 0) {
        snprintf(msg, (size_t)n, "unknown preset \"%s\"", d->model_preset);
        return -1;
    }
    struct { const char *what; long long want, got; } dims[] = {
        {"vocab_size", (long long)p.vocab_size, (long long)f->vocab_size},
        {"hidden_size", p.hidden_size, f->hidden_size},
        {"intermediate_size", p.intermediate_size, f->intermediate_size},
        {"num_hidden_layers", p.num_layers, f->num_layers},
        {"num_attention_heads", p.num_heads, f->num_heads},
        {"num_key_value_heads", p.num_kv_heads, f->num_kv_heads},
        {"head_dim", p.head_dim, f->head_dim},
        {"tie_word_embeddings", p.tie_word_embeddings, f->tie_word_embeddings}};
    if (strcmp(p.arch, f->arch) != 0) {
        snprintf(msg, (size_t)n, "preset \"%s\" is arch \"%s\", the file \"%s\"", d->model_preset, p.arch, f->arch);
        return -1;
    }
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].want != dims[i].got) {
            snprintf(msg, (size_t)n, "preset \"%s\" has %s %lld, the file %lld", d->model_preset, dims[i].what,
                     dims[i].want, dims[i].got);
            return -1;
        }
    return 0;
}
