/* serve_json.c — see serve_json.h. Every state the recognizer accepts is a prefix of some JSON object: a \u escape's
 * digits are checked as they come (a low surrogate only right after a high one), a UTF-8 sequence byte by byte, so
 * a constrained reply never reaches a state with no way on. */
#include "serve_json.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    J_TOP,       /* before the top-level object: whitespace or '{' */
    J_VALUE,     /* a value (after ':' or an array's ',') */
    J_OBJ_FIRST, /* after '{': a key or '}' */
    J_OBJ_KEY,   /* after an object's ',': a key */
    J_COLON,     /* after a key */
    J_AFTER,     /* after a value in a container: ',' or its closer */
    J_ARR_FIRST, /* after '[': a value or ']' */
    J_STR,       /* in a string (key: s->sub bit 7) */
    J_ESC,       /* after a string's '\' */
    J_HEX,       /* in \uXXXX: s->sub & 3 digits read, the value so far in s->lo:s->hi */
    J_SURR1,     /* after a high surrogate's \uXXXX: its low one's '\' */
    J_SURR2,     /* ... then 'u' */
    J_NEG,       /* after a number's '-' */
    J_ZERO,      /* a number's leading 0 */
    J_INT,       /* in a number's integer digits */
    J_DOT,       /* after '.' */
    J_FRAC,      /* in the fraction's digits */
    J_EXP,       /* after 'e' / 'E' */
    J_EXPS,      /* after the exponent's sign */
    J_EXPD,      /* in the exponent's digits */
    J_LIT,       /* in true / false / null: s->sub the bytes matched, s->lo which literal */
    J_DONE       /* the top-level object is complete */
};

static const char *const LIT[3] = {"true", "false", "null"};

void qf_json_start(qf_json_state *s) {
    memset(s, 0, sizeof *s);
    s->mode = J_TOP;
}

int qf_json_done(const qf_json_state *s) { return s->mode == J_DONE; }

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* a value ended: the container's turn, or the whole text's when it was the top-level object */
static void json_value_done(qf_json_state *s) { s->mode = s->depth ? J_AFTER : J_DONE; }

static int json_push(qf_json_state *s, int obj) {
    if (s->depth >= QF_JSON_DEPTH) return -1;
    s->stack = obj ? s->stack | (1ull << s->depth) : s->stack & ~(1ull << s->depth);
    s->depth++;
    s->mode = obj ? J_OBJ_FIRST : J_ARR_FIRST;
    return 0;
}

static int json_top_is_obj(const qf_json_state *s) { return (int)((s->stack >> (s->depth - 1)) & 1); }

static void json_pop(qf_json_state *s) {
    s->depth--;
    json_value_done(s);
}

/* the first byte of a value (not whitespace) */
static int json_value_start(qf_json_state *s, int c) {
    switch (c) {
    case '{': return json_push(s, 1);
    case '[': return json_push(s, 0);
    case '"': s->mode = J_STR, s->sub = 0; return 0;
    case '-': s->mode = J_NEG; return 0;
    case '0': s->mode = J_ZERO; return 0;
    case 't': case 'f': case 'n':
        s->mode = J_LIT, s->lo = c == 't' ? 0 : c == 'f' ? 1 : 2, s->sub = 1;
        return 0;
    default:
        if (c >= '1' && c <= '9') return s->mode = J_INT, 0;
        return -1;
    }
}

/* a byte inside a string (s->mode J_STR, no escape pending) */
static int json_string_byte(qf_json_state *s, int c) {
    if (s->utf8) { /* a UTF-8 sequence's continuation */
        if (c < s->lo || c > s->hi) return -1;
        s->utf8--;
        s->lo = s->utf8 ? 0x80 : 0, s->hi = s->utf8 ? 0xBF : 0; /* (0 outside a sequence: one state, one mask) */
        return 0;
    }
    if (c == '"') {
        const int key = (s->sub & 0x80) != 0;
        s->sub = 0;
        if (key) s->mode = J_COLON;
        else json_value_done(s);
        return 0;
    }
    if (c == '\\') return s->mode = J_ESC, 0;
    if (c < 0x20) return -1;
    if (c < 0x80) return 0;
    /* a lead byte: the sequence's length and the range of its first continuation (RFC 3629) */
    s->lo = 0x80, s->hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) s->utf8 = 1;
    else if (c == 0xE0) s->utf8 = 2, s->lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) s->utf8 = 2;
    else if (c == 0xED) s->utf8 = 2, s->hi = 0x9F;
    else if (c == 0xF0) s->utf8 = 3, s->lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) s->utf8 = 3;
    else if (c == 0xF4) s->utf8 = 3, s->hi = 0x8F;
    else return -1;
    return 0;
}

/* a \uXXXX digit: the first two digits decide a surrogate (D8-DB high, DC-DF low: only right after a high one) */
static int json_hex_digit(qf_json_state *s, int c) {
    const int h = hexval(c), k = s->sub & 3, low = (s->sub & 0x40) != 0;
    if (h < 0) return -1;
    if (k == 0 && low && h != 0xD) return -1;
    if (k == 1) {
        const int first = s->lo; /* the first digit */
        if (low && h < 0xC) return -1;            /* a low surrogate: DC00-DFFF */
        if (!low && first == 0xD && h >= 0xC) return -1; /* a lone low surrogate */
        s->hi = (uint8_t)(first == 0xD && h >= 0x8 && h <= 0xB); /* a high one: its low one must follow */
    }
    if (k == 0) s->lo = (uint8_t)h;
    if (k < 3) return s->sub = (uint8_t)((s->sub & 0xC0) | (k + 1)), 0;
    /* the fourth digit: back in the string, or on to the low surrogate's "\u" */
    const int high = !low && s->hi;
    s->sub &= 0x80; /* the key flag stays */
    s->lo = s->hi = 0, s->utf8 = 0;
    s->mode = high ? J_SURR1 : J_STR;
    return 0;
}

static int json_byte(qf_json_state *s, int c) {
    switch (s->mode) {
    case J_TOP:
        if (is_ws(c)) return 0;
        return c == '{' ? json_push(s, 1) : -1;
    case J_VALUE:
        if (is_ws(c)) return 0;
        return json_value_start(s, c);
    case J_ARR_FIRST:
        if (is_ws(c)) return 0;
        if (c == ']') return json_pop(s), 0;
        return json_value_start(s, c);
    case J_OBJ_FIRST:
    case J_OBJ_KEY:
        if (is_ws(c)) return 0;
        if (c == '}' && s->mode == J_OBJ_FIRST) return json_pop(s), 0;
        if (c != '"') return -1;
        s->mode = J_STR, s->sub = 0x80;
        return 0;
    case J_COLON:
        if (is_ws(c)) return 0;
        return c == ':' ? (s->mode = J_VALUE, 0) : -1;
    case J_AFTER:
        if (is_ws(c)) return 0;
        if (c == ',') return s->mode = json_top_is_obj(s) ? J_OBJ_KEY : J_VALUE, 0;
        if (c == (json_top_is_obj(s) ? '}' : ']')) return json_pop(s), 0;
        return -1;
    case J_STR: return json_string_byte(s, c);
    case J_ESC:
        if (c == 'u') return s->mode = J_HEX, s->sub &= 0x80, 0;
        if (!strchr("\"\\/bfnrt", c) || c == 0) return -1;
        return s->mode = J_STR, 0;
    case J_HEX: return json_hex_digit(s, c);
    case J_SURR1: return c == '\\' ? (s->mode = J_SURR2, 0) : -1;
    case J_SURR2: return c == 'u' ? (s->mode = J_HEX, s->sub = (uint8_t)((s->sub & 0x80) | 0x40), 0) : -1;
    case J_NEG:
        if (c == '0') return s->mode = J_ZERO, 0;
        return c >= '1' && c <= '9' ? (s->mode = J_INT, 0) : -1;
    case J_DOT:
        return c >= '0' && c <= '9' ? (s->mode = J_FRAC, 0) : -1;
    case J_EXP: /* a sign, or the exponent's first digit as J_EXPS takes it */
        if (c == '+' || c == '-') return s->mode = J_EXPS, 0;
        /* fall through */
    case J_EXPS:
        return c >= '0' && c <= '9' ? (s->mode = J_EXPD, 0) : -1;
    case J_ZERO:
    case J_INT:
    case J_FRAC:
    case J_EXPD: /* a number that may end here */
        if (c >= '0' && c <= '9') {
            if (s->mode == J_ZERO) return -1; /* no leading zeros */
            return 0;
        }
        if (c == '.' && (s->mode == J_ZERO || s->mode == J_INT)) return s->mode = J_DOT, 0;
        if ((c == 'e' || c == 'E') && s->mode != J_EXPD) return s->mode = J_EXP, 0;
        json_value_done(s); /* the number ends: the byte is the container's */
        return json_byte(s, c);
    case J_LIT:
        if (c != LIT[s->lo][s->sub]) return -1;
        if (LIT[s->lo][++s->sub] == 0) s->lo = 0, s->sub = 0, json_value_done(s);
        return 0;
    default: /* J_DONE: nothing after the object */
        return -1;
    }
}

int qf_json_feed(qf_json_state *s, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (json_byte(s, b[i])) return -1;
    return 0;
}

/* ---- the vocabulary and the mask --------------------------------------------------------------------------- */

int qf_json_vocab_init(qf_json_vocab *v, const qf_tokenizer *tok, int64_t V, const int32_t *stop, int nstop,
                       qf_err *e) {
    memset(v, 0, sizeof *v);
    v->V = V;
    v->off = qf_malloc((size_t)(V + 1) * sizeof *v->off);
    v->kind = qf_malloc((size_t)V);
    size_t cap = (size_t)V * 8, n = 0;
    v->bytes = qf_malloc(cap);
    const int64_t TV = qf_tok_vocab_size(tok);
    for (int64_t id = 0; id < V; id++) {
        v->off[id] = (int64_t)n;
        v->kind[id] = 2;
        int stopped = 0;
        for (int k = 0; k < nstop; k++) stopped |= stop[k] == id;
        if (stopped) {
            v->kind[id] = 1;
            continue;
        }
        if (id >= TV || qf_tok_len(tok, (int32_t)id) <= 0) continue;
        const int32_t one = (int32_t)id;
        size_t len = 0;
        qf_err de = {0};
        char *t = qf_tok_decode(tok, &one, 1, &len, &de);
        if (!t) continue;
        if (qf_tok_special(tok, t) != id) { /* a text token (an added special one stays out) */
            if (n + len > cap) cap = (n + len) * 2, v->bytes = qf_realloc(v->bytes, cap);
            memcpy(v->bytes + n, t, len);
            n += len;
            v->kind[id] = 0;
        }
        free(t);
    }
    v->off[V] = (int64_t)n;
    for (int i = 0; i < QF_JSON_CACHE; i++) v->cache[i].allow = qf_calloc((size_t)V / 8 + 1, 1);
    (void)e;
    return 0;
}

void qf_json_vocab_free(qf_json_vocab *v) {
    free(v->bytes), free(v->off), free(v->kind);
    for (int i = 0; i < QF_JSON_CACHE; i++) free(v->cache[i].allow);
    memset(v, 0, sizeof *v);
}

static int json_same(const qf_json_state *a, const qf_json_state *b) {
    return a->mode == b->mode && a->sub == b->sub && a->utf8 == b->utf8 && a->lo == b->lo && a->hi == b->hi &&
           a->depth == b->depth && a->stack == b->stack;
}

void qf_json_mask(qf_json_vocab *v, const qf_json_state *s, float *logits) {
    const int done = qf_json_done(s);
    /* the allowed set of s: from the cache, else every token tried from a copy of s */
    int c = -1, lru = 0;
    for (int i = 0; i < QF_JSON_CACHE; i++) {
        if (v->cache[i].used && json_same(&v->cache[i].s, s)) c = i;
        if (v->cache[i].used < v->cache[lru].used) lru = i;
    }
    if (c < 0) {
        c = lru;
        uint8_t *a = v->cache[c].allow;
        memset(a, 0, (size_t)v->V / 8 + 1);
        for (int64_t id = 0; id < v->V; id++) {
            int ok;
            if (v->kind[id] == 1) ok = done;
            else if (v->kind[id] == 2 || done || v->off[id + 1] == v->off[id]) ok = 0;
            else {
                qf_json_state t = *s;
                ok = qf_json_feed(&t, v->bytes + v->off[id], (size_t)(v->off[id + 1] - v->off[id])) == 0;
            }
            if (ok) a[id >> 3] |= (uint8_t)(1u << (id & 7));
        }
        v->cache[c].s = *s;
    }
    v->cache[c].used = ++v->clock;
    const uint8_t *a = v->cache[c].allow;
    int64_t any = 0;
    for (int64_t id = 0; id < v->V; id++) any += a[id >> 3] >> (id & 7) & 1;
    for (int64_t id = 0; id < v->V; id++) /* none allowed (a vocabulary without a needed byte): the stop tokens */
        if (any ? !(a[id >> 3] >> (id & 7) & 1) : v->kind[id] != 1) logits[id] = -INFINITY;
}
