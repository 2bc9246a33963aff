/* prep_formats.c — record layouts of `qwen-ft prepare` that become conversations without a conversion script
 * (docs/formats.md, "Making one"):
 *   Alpaca  {"instruction": I, "input": X, "output": O, "system": S?, "history": [[q, a], ...]?}
 *           -> system S (else --system); each history pair a user and an assistant turn; then a user turn of the
 *              non-empty ones of I and X joined by "\n", and an assistant turn O (as LLaMA-Factory's Alpaca
 *              converter builds its prompt)
 *   --map   field=role,...  the named fields, in the order of the map, become turns of those roles (system,
 *           user/human, assistant/gpt); a field mapped to `text` is taken as a plain-text record instead.
 *           Fields mapped to system may be absent (then --system); the others must be strings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "prep.h"

/* the string value of rec[key]; absent/null -> *s = NULL (returns 0); another type -> -1 with why */
static int prep_opt_string(json_t *rec, const char *key, const char **s, size_t *n, char *why, size_t cap) {
    json_t *v = prep_get(rec, key);
    *s = NULL;
    *n = 0;
    if (!v) return 0;
    if (!json_is_string(v)) return snprintf(why, cap, "%s is %s, expected a string", key, prep_json_type(v)), -1;
    *s = json_string_value(v);
    *n = json_string_length(v);
    return 0;
}

int prep_alpaca(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap) {
    const char *ins, *inp, *out, *sys;
    size_t nins, ninp, nout, nsys;
    if (prep_opt_string(rec, "instruction", &ins, &nins, why, cap) ||
        prep_opt_string(rec, "input", &inp, &ninp, why, cap) || prep_opt_string(rec, "output", &out, &nout, why, cap) ||
        prep_opt_string(rec, "system", &sys, &nsys, why, cap))
        return PREP_BAD;
    if (!ins) return snprintf(why, cap, "instruction is null, expected a string (Alpaca record)"), PREP_BAD;
    if (!out) return snprintf(why, cap, "output is missing, expected a string (Alpaca record)"), PREP_BAD;
    json_t *hist = prep_get(rec, "history");
    if (hist && !json_is_array(hist))
        return snprintf(why, cap, "history is %s, expected an array of [question, answer] pairs", prep_json_type(hist)),
               PREP_BAD;
    size_t nh = hist ? json_array_size(hist) : 0;
    prep_conv c = {0};
    if (sys) prep_conv_push(&c, (qf_chat_msg){QF_MSG_SYSTEM, sys, nsys, NULL, 0, NULL});
    for (size_t i = 0; i < nh; i++) {
        json_t *pair = json_array_get(hist, i);
        json_t *q = json_array_get(pair, 0), *a = json_array_get(pair, 1);
        if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_string(q) || !json_is_string(a)) {
            prep_conv_free(&c);
            return snprintf(why, cap, "history[%zu] is not a [question, answer] pair of strings", i), PREP_BAD;
        }
        prep_conv_push(&c, (qf_chat_msg){QF_MSG_USER, json_string_value(q), json_string_length(q), NULL, 0, NULL});
        prep_conv_push(&c, (qf_chat_msg){QF_MSG_ASSISTANT, json_string_value(a), json_string_length(a), NULL, 0, NULL});
    }
    /* the prompt: instruction and input, the non-empty ones, joined by a newline */
    char *prompt = NULL;
    size_t np = 0;
    if (nins && inp && ninp) {
        prompt = qf_malloc(nins + ninp + 2);
        memcpy(prompt, ins, nins);
        prompt[nins] = '\n';
        memcpy(prompt + nins + 1, inp, ninp);
        np = nins + 1 + ninp;
        prompt[np] = 0;
        prep_conv_push(&c, (qf_chat_msg){QF_MSG_USER, prompt, np, NULL, 0, NULL});
    } else if (nins || !inp) {
        prep_conv_push(&c, (qf_chat_msg){QF_MSG_USER, ins, nins, NULL, 0, NULL});
    } else {
        prep_conv_push(&c, (qf_chat_msg){QF_MSG_USER, inp, ninp, NULL, 0, NULL});
    }
    prep_conv_push(&c, (qf_chat_msg){QF_MSG_ASSISTANT, out, nout, NULL, 0, NULL});
    int rc = prep_chat_render(o, "instruction", &c, doc, why, cap);
    free(prompt);
    prep_conv_free(&c);
    return rc;
}

int prep_map_applies(const prep_opts *o, json_t *rec) {
    for (int i = 0; i < o->n_map; i++)
        if (json_object_get(rec, o->map[i].field)) return 1;
    return 0;
}

int prep_mapped(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap) {
    if (o->map_text) {
        const char *f = o->map[0].field, *s;
        size_t n;
        if (prep_opt_string(rec, f, &s, &n, why, cap)) return PREP_BAD;
        if (!s) return snprintf(why, cap, "%s is null, expected a string (--map %s=text)", f, f), PREP_BAD;
        return prep_text_value(o, f, s, n, doc, why, cap);
    }
    prep_conv c = {0};
    const char *sys = NULL;
    size_t nsys = 0;
    int rc = PREP_OK;
    for (int i = 0; i < o->n_map && rc == PREP_OK; i++) {
        const char *f = o->map[i].field, *s;
        size_t n;
        if (prep_opt_string(rec, f, &s, &n, why, cap)) {
            rc = PREP_BAD;
        } else if (o->map[i].role == PREP_ROLE_SYSTEM) {
            if (s) sys = s, nsys = n;
        } else if (!s) {
            snprintf(why, cap, "%s is missing, expected a string (--map %s=%s)", f, f,
                     o->map[i].role == QF_CHAT_USER ? "user" : "assistant");
            rc = PREP_BAD;
        } else {
            prep_conv_push(&c, (qf_chat_msg){o->map[i].role == QF_CHAT_USER ? QF_MSG_USER : QF_MSG_ASSISTANT, s, n,
                                             NULL, 0, NULL});
        }
    }
    if (rc == PREP_OK && sys) { /* the system turn comes first whatever the map's order */
        prep_conv_push(&c, (qf_chat_msg){0});
        memmove(c.msg + 1, c.msg, (c.n - 1) * sizeof *c.msg);
        c.msg[0] = (qf_chat_msg){QF_MSG_SYSTEM, sys, nsys, NULL, 0, NULL};
    }
    if (rc == PREP_OK) rc = prep_chat_render(o, o->map[0].field, &c, doc, why, cap);
    prep_conv_free(&c);
    return rc;
}

int prep_map_parse(prep_opts *o, const char *spec, char *why, size_t cap) {
    char *copy = qf_strdup(spec), *save = NULL;
    int rc = 0;
    for (char *item = strtok_r(copy, ",", &save); item && rc == 0; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq || eq == item || !eq[1]) {
            snprintf(why, cap, "--map wants field=role pairs separated by commas, not '%s'", item);
            rc = -1;
            break;
        }
        *eq = 0;
        const char *role = eq + 1;
        int r = !strcmp(role, "text") ? PREP_ROLE_TEXT : prep_role_of(role);
        if (r == -2) {
            snprintf(why, cap, "--map %s=%s: unknown role (system, user, human, assistant, gpt or text)", item, role);
            rc = -1;
            break;
        }
        for (int i = 0; i < o->n_map; i++)
            if (!strcmp(o->map[i].field, item)) {
                snprintf(why, cap, "--map names the field %s twice", item);
                rc = -1;
            }
        if (rc) break;
        o->map = qf_realloc(o->map, (size_t)(o->n_map + 1) * sizeof *o->map);
        /* the field name lives as long as the options: keep the copy's storage */
        o->map[o->n_map++] = (prep_map_entry){qf_strdup(item), r};
        if (r == PREP_ROLE_TEXT) o->map_text = 1;
    }
    free(copy);
    if (rc == 0 && o->map_text && o->n_map > 1) {
        snprintf(why, cap, "--map FIELD=text takes one field and no chat roles");
        rc = -1;
    }
    if (rc == 0) {
        int speaking = 0;
        for (int i = 0; i < o->n_map; i++) speaking += o->map[i].role == QF_CHAT_USER || o->map[i].role == QF_CHAT_ASSISTANT;
        if (!o->map_text && speaking == 0) {
            snprintf(why, cap, "--map names no user, assistant or text field");
            rc = -1;
        }
    }
    return rc;
}
