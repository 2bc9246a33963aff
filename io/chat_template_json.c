/* chat_template_json.c — JSON as Python's json.dumps(v, ensure_ascii=False) writes it, the `tojson` filter of
 * transformers' chat templates: ", " and ": " separators, keys in their order, non-ASCII as it is, control
 * characters as \n \r \t \b \f or \u00xx, floats as Python's repr (shortest round trip; exponent form below 1e-4
 * and from 1e16). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat_template_impl.h"

static void js_put(char **s, size_t *n, size_t *cap, const char *p, size_t k) {
    if (*n + k + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *n + k + 1) c *= 2;
        *s = qf_realloc(*s, c);
        *cap = c;
    }
    memcpy(*s + *n, p, k);
    *n += k;
    (*s)[*n] = 0;
}
#define JS_LIT(x) js_put(s, n, cap, x, sizeof(x) - 1)

static void js_string(const char *p, size_t k, char **s, size_t *n, size_t *cap) {
    JS_LIT("\"");
    size_t run = 0;
    for (size_t i = 0; i < k; i++) {
        unsigned char c = (unsigned char)p[i];
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        char u[8];
        if (!esc && c < 0x20) snprintf(u, sizeof u, "\\u%04x", c), esc = u;
        if (!esc) continue;
        js_put(s, n, cap, p + run, i - run);
        js_put(s, n, cap, esc, strlen(esc));
        run = i + 1;
    }
    js_put(s, n, cap, p + run, k - run);
    JS_LIT("\"");
}

/* Python's repr of a float */
static void js_real(double x, char **s, size_t *n, size_t *cap) {
    char b[64];
    if (isnan(x)) { JS_LIT("NaN"); return; }
    if (isinf(x)) { if (x < 0) JS_LIT("-Infinity"); else JS_LIT("Infinity"); return; }
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(b, sizeof b, "%.*e", p - 1, x);
        if (strtod(b, NULL) == x) break;
    }
    /* b = d.ddde[+-]XX with p significant digits; Python writes fixed notation for -4 <= exp < 16 */
    char *e = strchr(b, 'e');
    int exp = atoi(e + 1);
    char digits[32];
    size_t nd = 0;
    int neg = b[0] == '-';
    for (char *q = b + neg; q < e; q++)
        if (*q != '.') digits[nd++] = *q;
    digits[nd] = 0;
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -5 + 1 && exp < 16) { /* repr: fixed when -4 <= exp < 16 */
        if (exp < 0) {
            out[o++] = '0', out[o++] = '.';
            for (int z = 0; z < -exp - 1; z++) out[o++] = '0';
            memcpy(out + o, digits, nd), o += nd;
        } else {
            for (int k = 0; k <= exp; k++) out[o++] = k < (int)nd ? digits[k] : '0';
            out[o++] = '.';
            if ((int)nd > exp + 1) memcpy(out + o, digits + exp + 1, nd - (size_t)exp - 1), o += nd - (size_t)exp - 1;
            else out[o++] = '0';
        }
    } else {
        out[o++] = digits[0];
        if (nd > 1) out[o++] = '.', memcpy(out + o, digits + 1, nd - 1), o += nd - 1;
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    js_put(s, n, cap, out, o);
}

void qf_tmpl_tojson(const json_t *v, char **s, size_t *n, size_t *cap) {
    char b[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        int first = 1;
        JS_LIT("{");
        json_object_foreach((json_t *)v, k, x) {
            if (!first) JS_LIT(", ");
            first = 0;
            js_string(k, strlen(k), s, n, cap);
            JS_LIT(": ");
            qf_tmpl_tojson(x, s, n, cap);
        }
        JS_LIT("}");
        break;
    }
    case JSON_ARRAY: {
        JS_LIT("[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) JS_LIT(", ");
            qf_tmpl_tojson(json_array_get(v, i), s, n, cap);
        }
        JS_LIT("]");
        break;
    }
    case JSON_STRING: js_string(json_string_value(v), json_string_length(v), s, n, cap); break;
    case JSON_INTEGER:
        snprintf(b, sizeof b, "%lld", (long long)json_integer_value(v));
        js_put(s, n, cap, b, strlen(b));
        break;
    case JSON_REAL: js_real(json_real_value(v), s, n, cap); break;
    case JSON_TRUE: JS_LIT("true"); break;
    case JSON_FALSE: JS_LIT("false"); break;
    case JSON_NULL: JS_LIT("null"); break;
    }
}
