/* prep_record.c — one JSONL record -> one document: the dispatch on the record's known key (prep_kinds[] below,
 * after --map; a key given twice, or two of these keys, is ambiguous and refused), pre-tokenized records, and the
 * length policy (--max-len / --seq-len, --truncate) on the finished document.
 *   input_ids                pre-tokenized, taken as it is (optional labels or loss_mask)
 *   text                     plain text            -> prep_text (prep_chat.c; needs --tokenizer)
 *   conversations / messages ShareGPT / OpenAI chat -> prep_chat (prep_chat.c; needs --tokenizer), chat template
 *   instruction              Alpaca                -> prep_alpaca (prep_formats.c), chat template
 * The record functions build on prep_doc.c; nothing there calls back. */
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "prep.h"
#include "util.h"

/* ---- record kinds -------------------------------------------------------------------------------------------- */

/* {"input_ids": [...], "labels": [...]} (HF-style, unshifted: labels[i] belongs to token i; -100 = not a target,
 * otherwise it must equal input_ids[i]) or {"input_ids": [...], "loss_mask": [0/1 ...]} (the mask of the token
 * itself as a target); with neither, every token is a target. */
static int prep_pretokenized(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap) {
    json_t *ids = prep_get(rec, "input_ids");
    json_t *labels = prep_get(rec, "labels");
    json_t *lmask = prep_get(rec, "loss_mask");
    if (!ids) return snprintf(why, cap, "input_ids is null"), PREP_BAD;
    if (!json_is_array(ids)) return snprintf(why, cap, "input_ids is %s, expected an array", prep_json_type(ids)), PREP_BAD;
    size_t n = json_array_size(ids);
    if (n == 0) return snprintf(why, cap, "input_ids is empty"), PREP_BAD;
    if (labels && lmask) return snprintf(why, cap, "has both labels and loss_mask; give one of them"), PREP_BAD;
    json_t *aux = labels ? labels : lmask;
    const char *auxname = labels ? "labels" : "loss_mask";
    if (aux && !json_is_array(aux))
        return snprintf(why, cap, "%s is %s, expected an array", auxname, prep_json_type(aux)), PREP_BAD;
    if (aux && json_array_size(aux) != n)
        return snprintf(why, cap, "%s has %zu elements but input_ids has %zu", auxname, json_array_size(aux), n),
               PREP_BAD;
    prep_doc_reserve(doc, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v))
            return snprintf(why, cap, "input_ids[%zu] is %s, expected a token id (integer)", i, prep_json_type(v)),
                   PREP_BAD;
        json_int_t x = json_integer_value(v);
        if (x < 0) return snprintf(why, cap, "input_ids[%zu] = %lld is negative", i, (long long)x), PREP_BAD;
        if (x > (json_int_t)UINT32_MAX)
            return snprintf(why, cap, "input_ids[%zu] = %lld does not fit 32 bits (>= 2^32)", i, (long long)x),
                   PREP_BAD;
        if (o->vocab_size > 0 && x >= o->vocab_size)
            return snprintf(why, cap, "input_ids[%zu] = %lld >= --vocab-size %lld", i, (long long)x,
                            (long long)o->vocab_size),
                   PREP_BAD;
        doc->tok[i] = (uint32_t)x;
        doc->mask[i] = 1;
        if (labels) {
            json_t *l = json_array_get(labels, i);
            if (!json_is_integer(l))
                return snprintf(why, cap, "labels[%zu] is %s, expected an integer", i, prep_json_type(l)), PREP_BAD;
            json_int_t y = json_integer_value(l);
            if (y == -100)
                doc->mask[i] = 0;
            else if (y != x)
                return snprintf(why, cap, "labels[%zu] = %lld is neither -100 nor input_ids[%zu] = %lld", i,
                                (long long)y, i, (long long)x),
                       PREP_BAD;
        } else if (lmask) {
            json_t *m = json_array_get(lmask, i);
            if (json_is_boolean(m))
                doc->mask[i] = json_is_true(m);
            else if (json_is_integer(m) && (json_integer_value(m) == 0 || json_integer_value(m) == 1))
                doc->mask[i] = (uint8_t)json_integer_value(m);
            else if (json_is_integer(m))
                return snprintf(why, cap, "loss_mask[%zu] = %lld, expected 0 or 1", i, (long long)json_integer_value(m)),
                       PREP_BAD;
            else
                return snprintf(why, cap, "loss_mask[%zu] is %s, expected 0 or 1", i, prep_json_type(m)), PREP_BAD;
        }
    }
    doc->n = (int64_t)n;
    prep_content_begin(doc);
    prep_content_ids(doc, doc->tok, doc->mask, doc->n);
    return PREP_OK;
}

static const struct {
    const char *key;
    prep_record_fn fn;
    prep_kind kind;
} prep_kinds[] = {
    {"input_ids", prep_pretokenized, PREP_KIND_PRETOKENIZED}, {"text", prep_text, PREP_KIND_TEXT},
    {"conversations", prep_chat, PREP_KIND_CONVERSATIONS},    {"messages", prep_chat, PREP_KIND_MESSAGES},
    {"instruction", prep_alpaca, PREP_KIND_ALPACA},
};

/* the record's content keys (prep_kinds[]) present, for the ambiguity check; *first = the first one's index */
static int prep_content_keys(json_t *rec, int *first, char *list, size_t cap) {
    int k = 0;
    *first = -1;
    list[0] = 0;
    for (int j = 0; j < (int)(sizeof prep_kinds / sizeof *prep_kinds); j++)
        if (prep_get(rec, prep_kinds[j].key)) {
            if (*first < 0) *first = j;
            size_t u = strlen(list);
            snprintf(list + u, cap - u, "%s%s", k ? " and " : "", prep_kinds[j].key);
            k++;
        }
    return k;
}

/* "a, b, c" of the record's keys (at most cap bytes) */
static void prep_key_list(json_t *rec, char *list, size_t cap) {
    const char *k;
    json_t *v;
    size_t u = 0;
    list[0] = 0;
    json_object_foreach(rec, k, v) {
        (void)v;
        if (u + strlen(k) + 8 >= cap) {
            snprintf(list + u, cap - u, ", ...");
            break;
        }
        u += (size_t)snprintf(list + u, cap - u, "%s%s", u ? ", " : "", k);
    }
}

int prep_length_policy(const prep_opts *o, prep_doc *doc) {
    int64_t L = o->max_len > 0 ? o->max_len : o->seq_len;
    doc->cut = 0;
    doc->cut_in_answer = 0;
    if (L <= 0 || doc->n <= L) return PREP_OK;
    int chat = doc->kind == PREP_KIND_CONVERSATIONS || doc->kind == PREP_KIND_MESSAGES ||
               doc->kind == PREP_KIND_ALPACA || (doc->kind == PREP_KIND_MAP && !o->map_text);
    int64_t keep = doc->n;
    switch (o->truncate) {
    case PREP_TRUNC_DEFAULT:
        if (!chat) return PREP_OK; /* plain text and pre-tokenized records: split across rows by the packing */
        keep = 0;
        for (int64_t i = 0; i < doc->n_turn_end; i++)
            if (doc->turn_end[i] <= L && doc->turn_end[i] > keep) keep = doc->turn_end[i];
        if (keep == 0) keep = L, doc->cut_in_answer = 1; /* not even the first answer fits: the first L tokens */
        break;
    case PREP_TRUNC_RIGHT: keep = L; break;
    case PREP_TRUNC_LEFT:
        memmove(doc->tok, doc->tok + (doc->n - L), (size_t)L * sizeof *doc->tok);
        memmove(doc->mask, doc->mask + (doc->n - L), (size_t)L);
        keep = L;
        break;
    case PREP_TRUNC_DROP: doc->cut = doc->n; return PREP_DROP;
    }
    doc->cut = doc->n - keep;
    doc->n = keep;
    return PREP_OK;
}

int prep_record(const prep_opts *o, const char *line, size_t len, prep_doc *doc, char *why, size_t cap) {
    json_error_t jerr;
    /* a key given twice is ambiguous (which value is meant?): refused, as jansson can */
    json_t *rec = json_loadb(line, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    int kind = PREP_OK;
    doc->n = 0;
    doc->turns = doc->empty_turns = 0;
    doc->unanswered = 0;
    doc->n_turn_end = 0;
    doc->cut = 0;
    char keys[256];
    int first;
    if (!rec) {
        if (strstr(jerr.text, "duplicate"))
            snprintf(why, cap, "%s (line %d, column %d of the record): a key given twice is ambiguous; give it once",
                     jerr.text, jerr.line, jerr.column);
        else if (jerr.line > 1)
            snprintf(why, cap, "invalid JSON at line %d, column %d of the record: %s", jerr.line, jerr.column, jerr.text);
        else
            snprintf(why, cap, "invalid JSON at column %d: %s", jerr.column, jerr.text);
        kind = PREP_BAD;
    } else if (!json_is_object(rec)) {
        snprintf(why, cap, "the record is %s, expected a JSON object", prep_json_type(rec));
        kind = PREP_BAD;
    } else if (o->n_map && prep_map_applies(o, rec)) {
        doc->kind = PREP_KIND_MAP;
        kind = prep_mapped(o, rec, doc, why, cap);
    } else if (prep_content_keys(rec, &first, keys, sizeof keys) > 1) {
        snprintf(why, cap, "the record has both %s: which one is its content is ambiguous (pass --map FIELD=ROLE,... "
                 "to say which fields to read)", keys);
        kind = PREP_BAD;
    } else if (first < 0) {
        prep_key_list(rec, keys, sizeof keys);
        snprintf(why, cap, "the record has none of input_ids, text, conversations, messages, instruction%s "
                 "(missing input_ids); its fields: %s; --map FIELD=ROLE,... reads other fields (e.g. --map "
                 "question=user,answer=assistant)", o->n_map ? " or a --map field" : "", keys[0] ? keys : "none");
        kind = PREP_BAD;
    } else {
        doc->kind = prep_kinds[first].kind;
        kind = prep_kinds[first].fn(o, rec, doc, why, cap);
    }
    if (kind == PREP_OK && o->tok) {
        kind = prep_length_policy(o, doc);
        if (kind == PREP_DROP)
            snprintf(why, cap, "%lld tokens, longer than the limit %lld (--truncate drop)", (long long)doc->cut,
                     (long long)(o->max_len > 0 ? o->max_len : o->seq_len));
    }
    json_decref(rec);
    return kind;
}
