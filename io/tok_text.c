/* tok_text.c — text for the tokenizer (see tok_impl.h): strict UTF-8 validation, NFC via utf8proc with a quick
 * check that skips text already in NFC, GPT-2's byte-level alphabet, PCRE2 pattern compilation (with \s read as
 * Unicode White_Space, as the reference engines read it). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_impl.h"

size_t qf_tok_utf8_check(const char *str, size_t len) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < len) {
        if (i + 8 <= len) { /* ASCII runs, 8 bytes at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) n = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            n = 3;
            if (c == 0xE0) lo = 0xA0;      /* overlong */
            else if (c == 0xED) hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4;
            if (c == 0xF0) lo = 0x90;      /* overlong */
            else if (c == 0xF4) hi = 0x8F; /* > U+10FFFF */
        } else return i;
        if (i + n > len || s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k < n; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += n;
    }
    return len;
}

/* Decodes the code point at s (valid UTF-8); returns its length. */
static size_t utf8_next(const uint8_t *s, uint32_t *cp) {
    if (s[0] < 0x80) return *cp = s[0], 1;
    if (s[0] < 0xE0) return *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F), 2;
    if (s[0] < 0xF0) return *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F), 3;
    *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
          (s[3] & 0x3F);
    return 4;
}

/* A starter that never takes part in a composition as its second element (Hangul V/T jamo compose
 * algorithmically, so utf8proc does not flag them). */
static int nfc_starter(uint32_t cp, const utf8proc_property_t *p) {
    if (p->combining_class != 0) return 0;
    if (p->comb_index != UINT16_MAX && (p->comb_index & 0x8000)) return 0;
    if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) return 0;
    return 1;
}

/* One code point that NFC maps to itself. */
static int nfc_keeps(uint32_t cp) {
    uint8_t in[4], *out = NULL;
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, in);
    utf8proc_ssize_t m = utf8proc_map(in, n, &out, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    int same = m == n && out && !memcmp(in, out, (size_t)n);
    free(out);
    return same;
}

uint8_t *qf_tok_nfc_table(void) {
    uint8_t *yes = qf_calloc(QF_TOK_NFC_TABLE / 8, 1);
    for (uint32_t cp = 0; cp < QF_TOK_NFC_TABLE; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
        if (!nfc_starter(cp, p)) continue;
        if (p->decomp_seqindex != UINT16_MAX && !nfc_keeps(cp)) continue;
        yes[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    }
    return yes;
}

static int nfc_quick(const uint8_t *yes, const uint8_t *s, size_t len) {
    for (size_t i = 0; i < len;) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        i += utf8_next(s + i, &cp);
        if (cp < QF_TOK_NFC_TABLE) {
            if (!(yes[cp >> 3] & (1u << (cp & 7)))) return 0;
        } else {
            const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
            if (!nfc_starter(cp, p) || p->decomp_seqindex != UINT16_MAX) return 0;
        }
    }
    return 1;
}

char *qf_tok_nfc(const uint8_t *yes, const char *s, size_t len, size_t *out_len) {
    if (nfc_quick(yes, (const uint8_t *)s, len)) {
        *out_len = len;
        return (char *)s;
    }
    uint8_t *out = NULL;
    utf8proc_ssize_t n = utf8proc_map((const uint8_t *)s, (utf8proc_ssize_t)len, &out,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (n < 0) {
        free(out);
        return NULL;
    }
    *out_len = (size_t)n;
    return (char *)out;
}

/* ---- GPT-2's bytes_to_unicode ----------------------------------------------------------------------------------- */

static int byte_printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

uint32_t qf_tok_byte_char(uint8_t b) {
    if (byte_printable(b)) return b;
    if (b <= 32) return 256u + b;            /* 0..32    -> 256..288 */
    if (b <= 160) return 256u + 33 + (b - 127); /* 127..160 -> 289..322 */
    return 323;                              /* 173 */
}

int qf_tok_char_byte(uint32_t cp) {
    if (cp < 256) return byte_printable((int)cp) ? (int)cp : -1;
    if (cp <= 288) return (int)cp - 256;
    if (cp <= 322) return (int)cp - 289 + 127;
    if (cp == 323) return 173;
    return -1;
}

long qf_tok_unmap(const char *str, size_t len, char *out) {
    const uint8_t *s = (const uint8_t *)str;
    long n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += utf8_next(s + i, &cp);
        int b = qf_tok_char_byte(cp);
        if (b < 0) return -1;
        out[n++] = (char)b;
    }
    return n;
}

/* ---- patterns --------------------------------------------------------------------------------------------------- */

/* \s and \S as the Unicode White_Space property, which is what Oniguruma (HF tokenizers) and Rust's regex
 * (tiktoken) mean by them; PCRE2's UCP \s also matches U+180E MONGOLIAN VOWEL SEPARATOR. Other escapes and
 * \Q...\E are copied as they are. malloc'd. */
static char *regex_rewrite(const char *p, size_t len, size_t *out_len) {
    static const char WS[] = "\\p{White_Space}";
    char *o = qf_malloc(len * 8 + 1);
    size_t n = 0;
    int quoted = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] != '\\' || i + 1 == len) {
            o[n++] = p[i];
            continue;
        }
        char c = p[++i];
        if (quoted) quoted = c != 'E';
        else if (c == 'Q') quoted = 1;
        else if (c == 's' || c == 'S') {
            memcpy(o + n, WS, sizeof WS - 1);
            if (c == 'S') o[n + 1] = 'P';
            n += sizeof WS - 1;
            continue;
        }
        o[n++] = '\\';
        o[n++] = c;
    }
    *out_len = n;
    return o;
}

pcre2_code *qf_tok_regex_compile(const char *pattern, size_t len, int literal, const char *path, qf_err *e) {
    int err = 0;
    PCRE2_SIZE at = 0;
    uint32_t opt = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    size_t n = len;
    char *rw = literal ? NULL : regex_rewrite(pattern, len, &n);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(rw ? rw : pattern), n, opt, &err, &at, NULL);
    free(rw);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        qf_err_set(e, QF_EXIT_INPUT, "%s: the pre-tokenizer pattern does not compile (%s, near offset %zu)", path,
                   (const char *)msg, (size_t)at);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT (unsupported CPU, SELinux) the interpreter runs */
    return re;
}
