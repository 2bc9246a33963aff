/* serve_text.c — UTF-8 repair for JSON replies (see serve.h). */
#include "serve.h"
#include <string.h>

/* length of the valid UTF-8 sequence at u[0..n), 0 when ill-formed; *need: its full length when cut short */
static size_t text_seq(const unsigned char *u, size_t n, size_t *need) {
    unsigned b = u[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (b < 0x80) return *need = 1, 1;
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b >= 0xE0 && b <= 0xEF) len = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4) len = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    else return *need = 1, 0;
    *need = len;
    size_t j = 1;
    while (j < len && j < n && u[j] >= (j == 1 ? lo : 0x80) && u[j] <= (j == 1 ? hi : 0xBF)) j++;
    if (j == len) return len;
    *need = j < n ? j : len; /* j < n: broken after j bytes; else cut short by the end */
    return 0;
}

char *qf_serve_utf8_lossy(const char *s, size_t n, size_t *outlen) {
    const unsigned char *u = (const unsigned char *)s;
    char *o = qf_malloc(3 * n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t need, len = text_seq(u + i, n - i, &need);
        if (len) {
            memcpy(o + k, s + i, len);
            k += len, i += len;
        } else { /* one U+FFFD per maximal subpart, as Python's errors="replace" */
            size_t skip = need < n - i ? need : n - i;
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3, i += skip ? skip : 1;
        }
    }
    o[k] = 0;
    *outlen = k;
    return o;
}

size_t qf_serve_utf8_complete(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = n;
    for (int back = 0; back < 4 && i > 0; back++) { /* the last lead byte within 4 of the end */
        i--;
        if ((u[i] & 0xC0) != 0x80) {
            size_t need;
            if (text_seq(u + i, n - i, &need) == 0 && i + need > n && need <= 4) return i; /* cut short */
            return n;
        }
    }
    return n;
}
