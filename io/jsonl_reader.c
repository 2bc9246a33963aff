/* jsonl_reader.c — lines of plain, gzip and zstd JSONL files, in bounded memory (jsonl_reader.h).
 * zlib inflates gzip (every member of a multi-member file, as gunzip does); libzstd's streaming API decodes every
 * frame of a zstd file. A file that ends inside a gzip member or a zstd frame is an error ("truncated"). */
#include "jsonl_reader.h"
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

struct qf_jsonl {
    FILE *f;
    char *path;
    qf_jsonl_kind kind;
    int64_t end;      /* plain: lines starting at or after `end` are not ours; -1 = no limit */
    int64_t off;      /* plain: file offset of the next byte of buf */
    int64_t consumed; /* raw bytes read from the file */
    int64_t lineno;
    int eof, done;
    int bom_possible; /* the next line is the file's first: a UTF-8 byte-order mark is dropped */
    unsigned char *in; /* raw block (compressed input) */
    char *buf;         /* decoded block: bytes [bpos, blen) not yet returned */
    size_t bpos, blen;
    char *line; /* a line that straddles blocks */
    size_t line_cap;
    z_stream z;
    int z_ready, z_in_member;
    ZSTD_DStream *zs;
    ZSTD_inBuffer zin;
    size_t zs_last; /* 0 when the last zstd frame was complete */
    /* a JSON array file: the records are its elements (jsonl_next_array) */
    int array;
    int astate;    /* ARR_* */
    int64_t aline; /* the physical line of the next byte */
    qf_err pend;   /* a read error met while looking for '[' at open: returned by the first qf_jsonl_next */
};

enum { ARR_OPEN, ARR_FIRST, ARR_AFTER, ARR_NEXT, ARR_DONE };

const char *qf_jsonl_kind_name(qf_jsonl_kind k) {
    return k == QF_JSONL_GZIP ? "gzip" : k == QF_JSONL_ZSTD ? "zstd" : "plain";
}

int qf_jsonl_kind_of(const char *path, qf_jsonl_kind *kind, qf_err *e) {
    FILE *f = fopen(path, "rb");
    if (!f) return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot open: %s", path, strerror(errno));
    unsigned char m[4] = {0};
    size_t n = fread(m, 1, 4, f);
    fclose(f);
    *kind = QF_JSONL_PLAIN;
    if (n >= 2 && m[0] == 0x1f && m[1] == 0x8b) *kind = QF_JSONL_GZIP;
    if (n >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd) *kind = QF_JSONL_ZSTD;
    return 0;
}

/* Decodes the next block into r->buf. Returns the number of bytes (0 at the end) or -1 with e set. */
static long jsonl_fill(qf_jsonl *r, qf_err *e) {
    r->bpos = r->blen = 0;
    if (r->eof) return 0;
    if (r->kind == QF_JSONL_PLAIN) {
        size_t n = fread(r->buf, 1, QF_JSONL_BLOCK, r->f);
        if (n == 0 && ferror(r->f))
            return qf_err_set(e, QF_EXIT_INPUT, "read error: %s", strerror(errno)), -1;
        if (n == 0) r->eof = 1;
        r->consumed += (int64_t)n;
        r->blen = n;
        return (long)n;
    }
    for (;;) {
        if (r->kind == QF_JSONL_GZIP ? r->z.avail_in == 0 : r->zin.pos == r->zin.size) {
            size_t n = fread(r->in, 1, QF_JSONL_BLOCK, r->f);
            if (n == 0 && ferror(r->f))
                return qf_err_set(e, QF_EXIT_INPUT, "read error: %s", strerror(errno)), -1;
            r->consumed += (int64_t)n;
            if (n == 0) {
                int open_frame = r->kind == QF_JSONL_GZIP ? r->z_in_member : r->zs_last != 0;
                if (open_frame)
                    return qf_err_set(e, QF_EXIT_INPUT, "truncated %s data (the file ends inside a %s)",
                                      qf_jsonl_kind_name(r->kind), r->kind == QF_JSONL_GZIP ? "member" : "frame"),
                           -1;
                r->eof = 1;
                return 0;
            }
            if (r->kind == QF_JSONL_GZIP) {
                r->z.next_in = r->in;
                r->z.avail_in = (uInt)n;
            } else {
                r->zin = (ZSTD_inBuffer){r->in, n, 0};
            }
        }
        if (r->kind == QF_JSONL_GZIP) {
            if (!r->z_in_member) {
                if (inflateReset(&r->z) != Z_OK)
                    return qf_err_set(e, QF_EXIT_INPUT, "gzip: cannot reset the decoder"), -1;
                r->z_in_member = 1;
            }
            r->z.next_out = (Bytef *)r->buf;
            r->z.avail_out = (uInt)QF_JSONL_BLOCK;
            int zr = inflate(&r->z, Z_NO_FLUSH);
            if (zr == Z_STREAM_END)
                r->z_in_member = 0; /* another member may follow */
            else if (zr != Z_OK && zr != Z_BUF_ERROR)
                return qf_err_set(e, QF_EXIT_INPUT, "gzip data is corrupt (%s)",
                                  r->z.msg ? r->z.msg : "inflate failed"),
                       -1;
            r->blen = QF_JSONL_BLOCK - r->z.avail_out;
        } else {
            ZSTD_outBuffer out = {r->buf, QF_JSONL_BLOCK, 0};
            size_t zr = ZSTD_decompressStream(r->zs, &out, &r->zin);
            if (ZSTD_isError(zr))
                return qf_err_set(e, QF_EXIT_INPUT, "zstd data is corrupt (%s)", ZSTD_getErrorName(zr)),
                       -1;
            r->zs_last = zr;
            r->blen = out.pos;
        }
        if (r->blen > 0) return (long)r->blen;
    }
}

int qf_jsonl_open(const char *path, int64_t start, int64_t end, qf_jsonl **out, qf_err *e) {
    *out = NULL;
    qf_jsonl_kind kind;
    if (qf_jsonl_kind_of(path, &kind, e)) return e->code;
    if (kind != QF_JSONL_PLAIN && start != 0)
        return qf_err_set(e, QF_EXIT_RUNTIME, "%s: a compressed file is read whole, not from byte %lld", path,
                          (long long)start);
    qf_jsonl *r = qf_calloc(1, sizeof *r);
    r->path = qf_strdup(path);
    r->kind = kind;
    r->end = end;
    r->bom_possible = start == 0;
    r->f = fopen(path, "rb");
    if (!r->f) {
        qf_err_set(e, QF_EXIT_INPUT, "%s: cannot open: %s", path, strerror(errno));
        qf_jsonl_close(r);
        return QF_EXIT_INPUT;
    }
    r->buf = qf_malloc(QF_JSONL_BLOCK);
    if (kind == QF_JSONL_GZIP) {
        r->in = qf_malloc(QF_JSONL_BLOCK);
        if (inflateInit2(&r->z, 15 + 16) != Z_OK) QF_FATAL("zlib: inflateInit2 failed");
        r->z_ready = 1;
    } else if (kind == QF_JSONL_ZSTD) {
        r->in = qf_malloc(QF_JSONL_BLOCK);
        r->zs = ZSTD_createDStream();
        if (!r->zs) QF_FATAL("zstd: cannot create a decompression stream");
        ZSTD_initDStream(r->zs);
    }
    int rc = 0;
    if (kind == QF_JSONL_PLAIN && start > 0) {
        /* the line holding byte start-1 is the previous range's; ours begin after its newline */
        if (fseeko(r->f, (off_t)(start - 1), SEEK_SET) != 0) {
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: cannot seek to byte %lld: %s", path, (long long)start - 1,
                            strerror(errno));
        } else {
            r->off = start - 1;
            for (int found = 0; !found && rc == 0;) {
                if (r->bpos == r->blen) {
                    long n = jsonl_fill(r, e);
                    if (n < 0) rc = e->code;
                    if (n <= 0) break;
                }
                char *p = memchr(r->buf + r->bpos, '\n', r->blen - r->bpos);
                size_t take = p ? (size_t)(p - (r->buf + r->bpos)) + 1 : r->blen - r->bpos;
                r->bpos += take;
                r->off += (int64_t)take;
                found = p != NULL;
            }
        }
    }
    if (rc == 0 && start == 0) { /* a JSON array file: '[' first (after a byte-order mark and whitespace) */
        long n = jsonl_fill(r, &r->pend); /* an error here is the first line's: FILE:LINE for the caller */
        size_t i = n >= 3 && !memcmp(r->buf, "\xEF\xBB\xBF", 3) ? 3 : 0;
        while (n > 0 && i < r->blen && strchr(" \t\r\n", r->buf[i])) i++;
        if (n > 0 && i < r->blen && r->buf[i] == '[') {
            r->array = 1;
            r->aline = 1;
            r->bpos = n >= 3 && !memcmp(r->buf, "\xEF\xBB\xBF", 3) ? 3 : 0; /* whitespace: counted as read */
        }
    }
    if (rc) {
        qf_jsonl_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

int qf_jsonl_is_array(const qf_jsonl *r) { return r->array; }

static void jsonl_append(qf_jsonl *r, size_t *len, const char *p, size_t n, qf_err *e) {
    if (*len + n > r->line_cap) {
        size_t cap = r->line_cap ? r->line_cap : 4096;
        while (cap < *len + n) cap *= 2;
        r->line = qf_realloc(r->line, cap);
        r->line_cap = cap;
    }
    memcpy(r->line + *len, p, n);
    *len += n;
}

/* Drops the rest of an over-long line (through its newline) so that reading goes on with the next line. -1 on a
 * read error (e set), else 0. */
static int jsonl_discard_line(qf_jsonl *r, qf_err *e) {
    for (;;) {
        if (r->bpos == r->blen) {
            long got = jsonl_fill(r, e);
            if (got < 0) return -1;
            if (got == 0) return 0;
        }
        char *s = r->buf + r->bpos;
        char *p = memchr(s, '\n', r->blen - r->bpos);
        size_t take = p ? (size_t)(p - s) + 1 : r->blen - r->bpos;
        r->bpos += take;
        r->off += (int64_t)take;
        if (p) return 0;
    }
}

/* the over-long line's error; the line is skipped (-2) unless reading failed on the way (-1) */
static int jsonl_too_long(qf_jsonl *r, qf_err *e) {
    qf_err_set(e, QF_EXIT_INPUT, "the line is longer than %zu bytes, the limit of one record (QF_JSONL_MAX_LINE)", QF_JSONL_MAX_LINE);
    qf_err ignored = {0};
    return jsonl_discard_line(r, &ignored) ? -1 : -2;
}

/* the next byte of the decoded stream (advancing), or -1 at the end, -2 on a read error (e set) */
static int jsonl_byte(qf_jsonl *r, qf_err *e) {
    if (r->bpos == r->blen) {
        long got = jsonl_fill(r, e);
        if (got < 0) return -2;
        if (got == 0) return -1;
    }
    int c = (unsigned char)r->buf[r->bpos++];
    if (c == '\n') r->aline++;
    return c;
}

/* the next byte without taking it (-1 at the end, -2 on error) */
static int jsonl_peek(qf_jsonl *r, qf_err *e) {
    if (r->bpos == r->blen) {
        long got = jsonl_fill(r, e);
        if (got < 0) return -2;
        if (got == 0) return -1;
    }
    return (unsigned char)r->buf[r->bpos];
}

static int jsonl_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The next element of a JSON array file, as qf_jsonl_next returns a line: its bytes (copied), *lineno the line
 * where it starts. The array's own syntax (brackets, commas) is checked here; the element's, by the caller's JSON
 * parser. An element over QF_JSONL_MAX_LINE is skipped (-2). */
static int jsonl_next_array(qf_jsonl *r, const char **line, size_t *len, int64_t *lineno, qf_err *e) {
    int c;
    for (;;) { /* between elements */
        while ((c = jsonl_peek(r, e)) >= 0 && jsonl_ws(c)) jsonl_byte(r, e);
        *lineno = r->aline;
        if (c == -2) return -1;
        if (r->astate == ARR_DONE) {
            if (c == -1) return r->done = 1, 0;
            return qf_err_set(e, QF_EXIT_INPUT, "data after the end of the JSON array ('%c')", c), -1;
        }
        if (c == -1)
            return qf_err_set(e, QF_EXIT_INPUT, "the file ends inside the JSON array (no closing ']')"), -1;
        if (r->astate == ARR_OPEN) {
            jsonl_byte(r, e); /* '[', seen at open */
            r->astate = ARR_FIRST;
            continue;
        }
        if (r->astate == ARR_AFTER) {
            if (c == ',') { jsonl_byte(r, e); r->astate = ARR_NEXT; continue; }
            if (c == ']') { jsonl_byte(r, e); r->astate = ARR_DONE; continue; }
            return qf_err_set(e, QF_EXIT_INPUT, "expected ',' or ']' after a record of the JSON array, not '%c'", c), -1;
        }
        if (c == ']') {
            if (r->astate == ARR_NEXT)
                return qf_err_set(e, QF_EXIT_INPUT, "a ',' before the JSON array's closing ']' (no record after it)"), -1;
            jsonl_byte(r, e);
            r->astate = ARR_DONE;
            continue;
        }
        if (c == ',') return qf_err_set(e, QF_EXIT_INPUT, "an empty record (',') in the JSON array"), -1;
        break;
    }
    /* one element: brackets and braces balanced outside strings; a scalar ends at ',' ']' or whitespace */
    size_t n = 0;
    int depth = 0, in_str = 0, esc = 0, too_long = 0;
    int64_t start = r->aline;
    for (;;) {
        c = jsonl_peek(r, e);
        if (c == -2) return -1;
        if (c == -1) {
            if (depth > 0 || in_str)
                return qf_err_set(e, QF_EXIT_INPUT, "the file ends inside the record of the JSON array that starts on "
                                                    "line %lld", (long long)start), -1;
            break;
        }
        if (!in_str && depth == 0 && n > 0 && (c == ',' || c == ']' || jsonl_ws(c))) break;
        jsonl_byte(r, e);
        char ch = (char)c;
        if (n + 1 > QF_JSONL_MAX_LINE) too_long = 1;
        if (!too_long) jsonl_append(r, &n, &ch, 1, e);
        else n++;
        if (in_str) {
            if (esc) esc = 0;
            else if (c == '\\') esc = 1;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth <= 0) break;
        }
    }
    r->astate = ARR_AFTER;
    r->lineno++;
    *lineno = start;
    if (too_long)
        return qf_err_set(e, QF_EXIT_INPUT, "the record is longer than %zu bytes, the limit of one record "
                                            "(QF_JSONL_MAX_LINE)", QF_JSONL_MAX_LINE), -2;
    *line = r->line;
    *len = n;
    return 1;
}

int qf_jsonl_next(qf_jsonl *r, const char **line, size_t *len, int64_t *lineno, qf_err *e) {
    if (r->done) return 0;
    if (r->pend.code) {
        *e = r->pend;
        *lineno = 1;
        r->done = 1;
        return -1;
    }
    if (r->array) return jsonl_next_array(r, line, len, lineno, e);
    if (r->kind == QF_JSONL_PLAIN && r->end >= 0 && r->off >= r->end) {
        r->done = 1;
        return 0;
    }
    int at_file_start = r->bom_possible;
    r->bom_possible = 0;
    r->lineno++;
    *lineno = r->lineno; /* also on errors: the caller names FILE:LINE */
    size_t n = 0;
    int copied = 0;
    for (;;) {
        if (r->bpos == r->blen) {
            long got = jsonl_fill(r, e);
            if (got < 0) return -1;
            if (got == 0) {
                if (n == 0 && !copied) {
                    r->done = 1;
                    r->lineno--;
                    return 0;
                }
                break; /* a last line without a newline */
            }
        }
        char *s = r->buf + r->bpos;
        size_t avail = r->blen - r->bpos;
        char *p = memchr(s, '\n', avail);
        size_t take = p ? (size_t)(p - s) : avail;
        if (p && !copied) { /* the whole line is inside the block: no copy */
            if (take > QF_JSONL_MAX_LINE) return jsonl_too_long(r, e);
            *line = s;
            n = take;
            r->bpos += take + 1;
            r->off += (int64_t)take + 1;
            goto got;
        }
        if (n + take > QF_JSONL_MAX_LINE) return jsonl_too_long(r, e);
        jsonl_append(r, &n, s, take, e);
        copied = 1;
        r->bpos += take + (p ? 1 : 0);
        r->off += (int64_t)take + (p ? 1 : 0);
        if (p) break;
    }
    *line = r->line ? r->line : "";
got:
    if (at_file_start && n >= 3 && !memcmp(*line, "\xEF\xBB\xBF", 3)) *line += 3, n -= 3; /* UTF-8 byte-order mark */
    *len = n;
    *lineno = r->lineno;
    return 1;
}

int64_t qf_jsonl_consumed(const qf_jsonl *r) { return r->consumed; }

void qf_jsonl_close(qf_jsonl *r) {
    if (!r) return;
    if (r->f) fclose(r->f);
    if (r->z_ready) inflateEnd(&r->z);
    if (r->zs) ZSTD_freeDStream(r->zs);
    free(r->in);
    free(r->buf);
    free(r->line);
    free(r->path);
    free(r);
}

int qf_jsonl_expand(const char *const *patterns, int npat, char ***paths, int *n, qf_err *e) {
    char **v = NULL;
    int nv = 0, cap = 0;
    for (int i = 0; i < npat; i++) {
        const char *p = patterns[i];
        glob_t g;
        int has_glob = strpbrk(p, "*?[") != NULL;
        int gr = has_glob ? glob(p, 0, NULL, &g) : GLOB_NOMATCH;
        if (has_glob && gr != 0) {
            if (gr != GLOB_NOMATCH) globfree(&g);
            qf_jsonl_paths_free(v, nv);
            return qf_err_set(e, QF_EXIT_INPUT, "--in %s: no file matches", p);
        }
        size_t k = has_glob ? g.gl_pathc : 1;
        if (nv + (int)k > cap) {
            cap = (nv + (int)k) * 2;
            v = qf_realloc(v, (size_t)cap * sizeof *v);
        }
        for (size_t j = 0; j < k; j++) v[nv++] = qf_strdup(has_glob ? g.gl_pathv[j] : p);
        if (has_glob) globfree(&g);
    }
    *paths = v;
    *n = nv;
    return 0;
}

void qf_jsonl_paths_free(char **paths, int n) {
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}
