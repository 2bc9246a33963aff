/* cmd_plot.c — `qwen-ft plot metrics.jsonl [more.jsonl ...] -o curves.svg|curves.png [--keys k1,k2,...]`:
 * training curves for people without TensorBoard. One panel per key (lines against the step; keys of evaluation
 * lines, valid_*, as points), one colour per input file, axes with ticks and labels. SVG is written as text; PNG is
 * rasterised here into an RGB buffer (lines, a 5x7 bitmap font) and encoded with zlib when the build has it, else
 * with stored deflate blocks (valid, larger). Bad input exits 2 naming file:line. */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "commands.h"
#include "plot_font.h"
#include "out_file.h"
#include "util.h"
#include <zlib.h>

#define PLOT_MAX_FILES 8
#define PLOT_MAX_KEYS 16

/* ---- data ------------------------------------------------------------------------------------------------- */

typedef struct {
    double *x, *y;
    size_t n, cap;
} series;

typedef struct {
    char key[64];
    int points;                    /* drawn as points (evaluation keys) rather than lines */
    series s[PLOT_MAX_FILES];
    char over_key[64];             /* "valid_K" drawn as points over K's curve ("" = none) */
    series over[PLOT_MAX_FILES];
    double ymin, ymax;
    size_t total;
} panel;

/* Appends (x, y); a step not after the last one means the run was resumed from an earlier checkpoint: the later
 * values replace the earlier ones from that step on (as TensorBoard does). */
static void series_add(series *s, double x, double y) {
    while (s->n > 0 && s->x[s->n - 1] >= x) s->n--;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->x = qf_realloc(s->x, s->cap * sizeof(double));
        s->y = qf_realloc(s->y, s->cap * sizeof(double));
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
}

static int read_metrics(const char *path, int file_index, panel *p, int np, qf_err *e) {
    FILE *f = qf_in_open("metrics file", path, 0, e); /* a FIFO or directory is refused, not waited on */
    if (!f) return e->code;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    int rc = 0;
    while (!rc && (len = (ssize_t)qf_getline_max(&line, &cap, f, QF_MAX_LINE_BYTES)) != -1) {
        lineno++;
        if (len == -2) {
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: the line is longer than %zu bytes, the limit of one JSONL line "
                            "(docs/reliability.md)", path, lineno, QF_MAX_LINE_BYTES);
            break;
        }
        const char *c = line;
        while (isspace((unsigned char)*c)) c++;
        if (!*c) continue;
        json_error_t je;
        json_t *o = json_loads(line, JSON_DECODE_ANY, &je);
        if (!o || !json_is_object(o)) {
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: not a JSON object%s%s", path, lineno, o ? "" : ": ",
                            o ? "" : je.text);
            json_decref(o);
            break;
        }
        json_t *st = json_object_get(o, "step");
        if (!json_is_number(st)) {
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: key 'step': missing or not a number", path, lineno);
            json_decref(o);
            break;
        }
        double x = json_number_value(st);
        for (int k = 0; k < np; k++) {
            json_t *v = json_object_get(o, p[k].key);
            if (!v || json_is_null(v)) continue; /* absent, or null (non-finite in metrics.jsonl) */
            if (json_is_boolean(v)) {
                series_add(&p[k].s[file_index], x, json_is_true(v) ? 1.0 : 0.0);
                continue;
            }
            if (!json_is_number(v)) {
                rc = qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: key '%s': not a number", path, lineno, p[k].key);
                break;
            }
            double y = json_number_value(v);
            if (isfinite(y)) series_add(&p[k].s[file_index], x, y);
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    return rc;
}

/* ---- scales and ticks ------------------------------------------------------------------------------------ */

static double nice_step(double range, int target) {
    double raw = range / target, mag = pow(10, floor(log10(raw))), r = raw / mag;
    double m = r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10;
    return m * mag;
}

static void fmt_tick(double v, double step, char *buf, size_t n) {
    if (fabs(v) < step * 1e-9) v = 0;
    double a = fabs(v);
    if (v != 0 && (a >= 1e6 || a < 1e-3)) {
        snprintf(buf, n, "%.3g", v);
    } else {
        int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
        if (dec > 6) dec = 6;
        snprintf(buf, n, "%.*f", dec, v);
    }
}

/* ---- a canvas with two back ends: SVG text and an RGB raster ---------------------------------------------- */

typedef struct {
    unsigned char r, g, b;
} rgb;

static const rgb k_palette[PLOT_MAX_FILES] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40},
                                              {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {127, 127, 127}};
static const rgb k_black = {0, 0, 0}, k_grid = {225, 225, 225}, k_axis = {90, 90, 90};

typedef struct {
    int svg;          /* 1: SVG into f; 0: raster into px */
    FILE *f;
    int w, h;
    unsigned char *px; /* w*h*3 */
    int scale;        /* font scale of the raster */
} canvas;

static void put_px(canvas *c, int x, int y, rgb col) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
    unsigned char *p = c->px + ((size_t)y * c->w + x) * 3;
    p[0] = col.r;
    p[1] = col.g;
    p[2] = col.b;
}

static void draw_line(canvas *c, double x0, double y0, double x1, double y1, rgb col, int width) {
    if (c->svg) {
        fprintf(c->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"rgb(%d,%d,%d)\" stroke-width=\"%d\"/>\n",
                x0, y0, x1, y1, col.r, col.g, col.b, width);
        return;
    }
    /* DDA with a square brush of `width` pixels */
    double dx = x1 - x0, dy = y1 - y0;
    int steps = (int)ceil(fmax(fabs(dx), fabs(dy)));
    if (steps < 1) steps = 1;
    for (int i = 0; i <= steps; i++) {
        int x = (int)lround(x0 + dx * i / steps), y = (int)lround(y0 + dy * i / steps);
        for (int a = 0; a < width; a++)
            for (int b = 0; b < width; b++) put_px(c, x + a - width / 2, y + b - width / 2, col);
    }
}

static void draw_polyline(canvas *c, const double *xs, const double *ys, size_t n, rgb col) {
    if (n == 0) return;
    if (c->svg) {
        fprintf(c->f, "<polyline fill=\"none\" stroke=\"rgb(%d,%d,%d)\" stroke-width=\"1.5\" points=\"", col.r, col.g,
                col.b);
        for (size_t i = 0; i < n; i++) fprintf(c->f, "%s%.1f,%.1f", i ? " " : "", xs[i], ys[i]);
        fprintf(c->f, "\"/>\n");
        return;
    }
    if (n == 1) draw_line(c, xs[0], ys[0], xs[0], ys[0], col, 2);
    for (size_t i = 1; i < n; i++) draw_line(c, xs[i - 1], ys[i - 1], xs[i], ys[i], col, 2);
}

static void draw_point(canvas *c, double x, double y, rgb col) {
    if (c->svg) {
        fprintf(c->f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"rgb(%d,%d,%d)\"/>\n", x, y, col.r, col.g, col.b);
        return;
    }
    int cx = (int)lround(x), cy = (int)lround(y);
    for (int a = -3; a <= 3; a++)
        for (int b = -3; b <= 3; b++)
            if (a * a + b * b <= 10) put_px(c, cx + a, cy + b, col);
}

static void xml_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else if ((unsigned char)*s >= 32) fputc(*s, f);
    }
}

/* anchor: 0 start, 1 middle, 2 end; y is the text's vertical centre */
static int text_width(const canvas *c, const char *s) {
    return c->svg ? (int)strlen(s) * 7 : (int)strlen(s) * 6 * c->scale;
}

static void draw_text(canvas *c, double x, double y, const char *s, int anchor, rgb color) {
    if (c->svg) {
        static const char *const anchors[3] = {"start", "middle", "end"};
        fprintf(c->f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" dominant-baseline=\"middle\" fill=\"rgb(%d,%d,%d)\">",
                x, y, anchors[anchor], color.r, color.g, color.b);
        xml_escaped(c->f, s);
        fprintf(c->f, "</text>\n");
        return;
    }
    int w = text_width(c, s), sc = c->scale;
    int x0 = (int)lround(x) - (anchor == 1 ? w / 2 : anchor == 2 ? w : 0);
    int y0 = (int)lround(y) - 7 * sc / 2;
    for (size_t i = 0; s[i]; i++) {
        unsigned ch = (unsigned char)s[i];
        if (ch < 32 || ch > 126) ch = '?';
        const unsigned char *g = k_font5x7[ch - 32];
        for (int row = 0; row < 7; row++)
            for (int cx = 0; cx < 5; cx++)
                if (g[row] & (1u << (4 - cx)))
                    for (int a = 0; a < sc; a++)
                        for (int b = 0; b < sc; b++)
                            put_px(c, x0 + (int)i * 6 * sc + cx * sc + a, y0 + row * sc + b, color);
    }
}

static void fill_rect(canvas *c, int x, int y, int w, int h, rgb col) {
    if (c->svg) {
        fprintf(c->f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"rgb(%d,%d,%d)\"/>\n", x, y, w, h,
                col.r, col.g, col.b);
        return;
    }
    for (int j = y; j < y + h; j++)
        for (int i = x; i < x + w; i++) put_px(c, i, j, col);
}

/* ---- layout ------------------------------------------------------------------------------------------------ */

enum { W = 960, PANEL_H = 250, TOP = 34, LEFT = 90, RIGHT = 30, PAD_TOP = 44, PAD_BOTTOM = 40 };

/* the shared x range of every panel: [xmin, xmax] of all steps, padded so points on the ends stay whole */
typedef struct {
    double xmin, xmax;
} xrange;

static double to_x(const xrange *r, double v) { return LEFT + (v - r->xmin) / (r->xmax - r->xmin) * (W - RIGHT - LEFT); }

static void draw_series(canvas *c, const series *s, const xrange *r, double ymin, double ymax, int py0, int py1,
                        int points, rgb col) {
    if (!s->n) return;
    double *X = qf_malloc(s->n * sizeof(double)), *Y = qf_malloc(s->n * sizeof(double));
    for (size_t i = 0; i < s->n; i++) {
        X[i] = to_x(r, s->x[i]);
        Y[i] = py1 - (s->y[i] - ymin) / (ymax - ymin) * (py1 - py0);
    }
    if (points)
        for (size_t i = 0; i < s->n; i++) draw_point(c, X[i], Y[i], col);
    else
        draw_polyline(c, X, Y, s->n, col);
    free(X);
    free(Y);
}

/* The legend, inside the plot area's top-right corner on a white box: one line per file with data (several files),
 * and the line/point meaning when an evaluation key is drawn over a training key. */
static void draw_legend(canvas *c, const panel *p, const char *const *files, int nfiles, int py0) {
    const char *label[PLOT_MAX_FILES + 2];
    int kind[PLOT_MAX_FILES + 2], colour[PLOT_MAX_FILES + 2], n = 0, wmax = 0; /* kind: 0 line, 1 point */
    for (int k = 0; k < nfiles && nfiles > 1; k++)
        if (p->s[k].n || p->over[k].n) label[n] = files[k], kind[n] = 0, colour[n++] = k;
    if (p->over_key[0]) {
        label[n] = p->key, kind[n] = 0, colour[n++] = -1;
        label[n] = p->over_key, kind[n] = 1, colour[n++] = -1;
    }
    if (!n) return;
    for (int i = 0; i < n; i++) wmax = text_width(c, label[i]) > wmax ? text_width(c, label[i]) : wmax;
    int lh = c->svg ? 16 : 9 * c->scale, bw = wmax + 40, bh = n * lh + 8;
    int bx = W - RIGHT - bw - 6, by = py0 + 6;
    fill_rect(c, bx, by, bw, bh, (rgb){255, 255, 255});
    draw_line(c, bx, by, bx + bw, by, k_grid, 1);
    draw_line(c, bx, by + bh, bx + bw, by + bh, k_grid, 1);
    draw_line(c, bx, by, bx, by + bh, k_grid, 1);
    draw_line(c, bx + bw, by, bx + bw, by + bh, k_grid, 1);
    for (int i = 0; i < n; i++) {
        int y = by + 4 + lh / 2 + i * lh;
        rgb col = colour[i] >= 0 ? k_palette[colour[i]] : k_axis;
        if (kind[i]) draw_point(c, bx + 15, y, col);
        else draw_line(c, bx + 6, y, bx + 24, y, col, 3);
        draw_text(c, bx + 32, y, label[i], 0, k_black);
    }
}

static void draw_panel(canvas *c, const panel *p, int index, const xrange *r, const char *const *files, int nfiles) {
    int y0 = TOP + index * PANEL_H;                 /* panel top */
    int px0 = LEFT, px1 = W - RIGHT;                /* plot area */
    int py0 = y0 + PAD_TOP, py1 = y0 + PANEL_H - PAD_BOTTOM;
    double ymin = p->ymin, ymax = p->ymax;
    if (ymax <= ymin) {
        double d = fabs(ymin) > 0 ? fabs(ymin) * 0.1 : 1;
        ymin -= d;
        ymax += d;
    } else {
        double pad = 0.05 * (ymax - ymin);
        ymin -= pad;
        ymax += pad;
    }
    double xs = nice_step(r->xmax - r->xmin, 8), ys = nice_step(ymax - ymin, 5);
    char buf[160];
    if (p->over_key[0]) snprintf(buf, sizeof buf, "%s, %s (points)", p->key, p->over_key);
    else snprintf(buf, sizeof buf, "%s", p->key);
    draw_text(c, px0, y0 + 14, buf, 0, k_black);
    /* grid, ticks and labels */
    for (double v = ceil(ymin / ys) * ys; v <= ymax + ys * 1e-9; v += ys) {
        double y = py1 - (v - ymin) / (ymax - ymin) * (py1 - py0);
        draw_line(c, px0, y, px1, y, k_grid, 1);
        draw_line(c, px0 - 5, y, px0, y, k_axis, 1);
        fmt_tick(v, ys, buf, sizeof buf);
        draw_text(c, px0 - 8, y, buf, 2, k_axis);
    }
    for (double v = ceil(r->xmin / xs) * xs; v <= r->xmax + xs * 1e-9; v += xs) {
        double x = to_x(r, v);
        draw_line(c, x, py0, x, py1, k_grid, 1);
        draw_line(c, x, py1, x, py1 + 5, k_axis, 1);
        fmt_tick(v, xs, buf, sizeof buf);
        draw_text(c, x, py1 + 16, buf, 1, k_axis);
    }
    draw_text(c, px1, py1 + 32, "step", 2, k_axis);
    draw_line(c, px0, py0, px0, py1, k_axis, 1);
    draw_line(c, px0, py1, px1, py1, k_axis, 1);
    for (int k = 0; k < nfiles; k++) {
        draw_series(c, &p->s[k], r, ymin, ymax, py0, py1, p->points, k_palette[k]);
        draw_series(c, &p->over[k], r, ymin, ymax, py0, py1, 1, k_palette[k]);
    }
    draw_legend(c, p, files, nfiles, py0);
}

static void draw_all(canvas *c, const panel *p, int np, const xrange *r, const char *const *files, int nfiles) {
    fill_rect(c, 0, 0, c->w, c->h, (rgb){255, 255, 255});
    char title[600];
    if (nfiles > 1) snprintf(title, sizeof title, "qwen-ft: %d metrics files (colours in each panel)", nfiles);
    else snprintf(title, sizeof title, "qwen-ft: %s", files[0]);
    draw_text(c, 10, 16, title, 0, k_axis);
    for (int i = 0; i < np; i++) draw_panel(c, &p[i], i, r, files, nfiles);
}

/* ---- PNG ------------------------------------------------------------------------------------------------- */

static void be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void png_chunk(FILE *f, const char *type, const unsigned char *data, size_t n) {
    unsigned char hd[8];
    be32(hd, (uint32_t)n);
    memcpy(hd + 4, type, 4);
    fwrite(hd, 1, 8, f);
    if (n) fwrite(data, 1, n, f);
    uLong crc = crc32(0L, (const Bytef *)type, 4);
    if (n) crc = crc32(crc, data, (uInt)n);
    unsigned char t[4];
    be32(t, (uint32_t)crc);
    fwrite(t, 1, 4, f);
}

/* a zlib stream of raw (deflate, level 6); NULL if zlib fails */
static unsigned char *zlib_stream(const unsigned char *raw, size_t n, size_t *out_n) {
    uLongf cap = compressBound((uLong)n);
    unsigned char *z = qf_malloc(cap);
    if (compress2(z, &cap, raw, (uLong)n, 6) != Z_OK) {
        free(z);
        return NULL;
    }
    *out_n = cap;
    return z;
}

static int write_png(const char *path, const canvas *c) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    fwrite(sig, 1, 8, f);
    unsigned char ihdr[13];
    be32(ihdr, (uint32_t)c->w);
    be32(ihdr + 4, (uint32_t)c->h);
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = 2;  /* colour type RGB */
    ihdr[10] = 0; /* deflate */
    ihdr[11] = 0; /* filter method */
    ihdr[12] = 0; /* no interlace */
    png_chunk(f, "IHDR", ihdr, 13);
    size_t row = (size_t)c->w * 3 + 1, n = row * (size_t)c->h;
    unsigned char *raw = qf_malloc(n);
    for (int y = 0; y < c->h; y++) {
        raw[(size_t)y * row] = 0; /* filter: none */
        memcpy(raw + (size_t)y * row + 1, c->px + (size_t)y * c->w * 3, (size_t)c->w * 3);
    }
    size_t zn = 0;
    unsigned char *z = zlib_stream(raw, n, &zn);
    if (!z) {
        free(raw);
        fclose(f);
        return -1;
    }
    png_chunk(f, "IDAT", z, zn);
    png_chunk(f, "IEND", NULL, 0);
    free(raw);
    free(z);
    return fclose(f) == 0 ? 0 : -1;
}

/* ---- the command ------------------------------------------------------------------------------------------- */

typedef struct plot_opts {
    qf_strlist files;
    const char *out, *keys;
} plot_opts;

static const qf_opt PLOT_OPTS[] = {
    {.name = "out", .short_name = 'o', .type = QF_OPT_STR, .off = offsetof(plot_opts, out), .meta = "OUT.svg|OUT.png",
     .required = 1, .help = "the picture to write: SVG or PNG, by its name"},
    {.name = "keys", .type = QF_OPT_STR, .off = offsetof(plot_opts, keys), .def = "loss,lr,grad_norm,valid_loss",
     .meta = "K1,K2,...",
     .help = "the numbers to plot, one panel each (keys no file has are left out unless named here), e.g. "
             "--keys=loss,tokens_per_s,mfu"},
    {.name = "set", .type = QF_OPT_IGNORED, .meta = "KEY=VALUE", .help = "plot reads no deck"},
};

/* 1 for OUT.svg, 0 for OUT.png (either case); -1 for any other name */
static int output_is_svg(const char *out) {
    size_t ol = strlen(out);
    if (ol > 4 && !strcasecmp(out + ol - 4, ".svg")) return 1;
    return ol > 4 && !strcasecmp(out + ol - 4, ".png") ? 0 : -1;
}

/* --keys "k1,k2,...": one panel each into p[PLOT_MAX_KEYS] (empty names skipped; valid_* drawn as points) */
static int parse_keys(const char *keys, panel *p, int *np, qf_err *e) {
    for (const char *k = keys; *k && *np <= PLOT_MAX_KEYS;) {
        size_t n = strcspn(k, ",");
        if (n > 0 && *np == PLOT_MAX_KEYS)
            return qf_err_set(e, QF_EXIT_INPUT, "--keys: at most %d keys", PLOT_MAX_KEYS);
        if (n >= sizeof p[0].key) return qf_err_set(e, QF_EXIT_INPUT, "--keys: key '%.*s' is too long", (int)n, k);
        if (n > 0) {
            panel *q = &p[(*np)++];
            memcpy(q->key, k, n);
            q->key[n] = 0;
            q->points = !strncmp(q->key, "valid_", 6);
        }
        k += n + (k[n] == ',');
    }
    return 0;
}

/* an evaluation key goes over its training key's panel (valid_loss over loss) when both are plotted; the
 * evaluation panel is left without key and series */
static void merge_eval_panels(panel *p, int np) {
    for (int k = 0; k < np; k++) {
        if (!p[k].points) continue;
        for (int t = 0; t < np; t++)
            if (!p[t].points && !p[t].over_key[0] && !strcmp(p[t].key, p[k].key + 6)) {
                snprintf(p[t].over_key, sizeof p[t].over_key, "%s", p[k].key);
                memcpy(p[t].over, p[k].s, sizeof p[t].over);
                memset(p[k].s, 0, sizeof p[k].s);
                p[k].key[0] = 0; /* merged */
                break;
            }
    }
}

/* q's y range and number of values; widens the shared x range */
static void panel_range(panel *q, int nfiles, xrange *xr) {
    q->ymin = INFINITY;
    q->ymax = -INFINITY;
    for (int i = 0; i < nfiles; i++)
        for (int o = 0; o < 2; o++) {
            const series *sr = o ? &q->over[i] : &q->s[i];
            for (size_t j = 0; j < sr->n; j++) {
                xr->xmin = fmin(xr->xmin, sr->x[j]);
                xr->xmax = fmax(xr->xmax, sr->x[j]);
                q->ymin = fmin(q->ymin, sr->y[j]);
                q->ymax = fmax(q->ymax, sr->y[j]);
                q->total++;
            }
        }
}

/* The panels with data first, in their order (returns how many); their y ranges and the x range they share. */
static int keep_panels_with_data(panel *p, int np, int nfiles, int keys_given, xrange *xr) {
    int kept = 0;
    for (int k = 0; k < np; k++) {
        panel *q = &p[k];
        if (!q->key[0]) continue;
        panel_range(q, nfiles, xr);
        if (!q->total) {
            if (keys_given) fprintf(stderr, "qwen-ft plot: no values of '%s' in the input; panel left out\n", q->key);
            continue; /* freed with the others at the end */
        }
        if (kept != k) {
            panel keep = *q;
            *q = p[kept]; /* a panel without data, or a merged one: nothing of it is drawn */
            p[kept] = keep;
        }
        kept++;
    }
    return kept;
}

static void pad_xrange(xrange *xr) {
    if (xr->xmax <= xr->xmin) {
        xr->xmin -= 1;
        xr->xmax += 1;
    } else { /* points on the frame would be cut in half */
        double pad = 0.03 * (xr->xmax - xr->xmin);
        xr->xmin -= pad;
        xr->xmax += pad;
    }
}

/* the panels as SVG text into out */
static int render_svg(const char *out, canvas *c, const panel *p, int kept, const xrange *xr,
                      const char *const *files, int nfiles, qf_err *e) {
    c->f = fopen(out, "w");
    if (!c->f) return qf_err_set(e, QF_EXIT_RUNTIME, "cannot write %s: %s", out, strerror(errno));
    fprintf(c->f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                  "font-family=\"DejaVu Sans Mono, monospace\" font-size=\"12\">\n",
            c->w, c->h, c->w, c->h);
    draw_all(c, p, kept, xr, files, nfiles);
    fprintf(c->f, "</svg>\n");
    if (fclose(c->f) != 0) return qf_err_set(e, QF_EXIT_RUNTIME, "writing %s failed", out);
    return 0;
}

/* the panels rasterised, into out as PNG */
static int render_png(const char *out, canvas *c, const panel *p, int kept, const xrange *xr,
                      const char *const *files, int nfiles, qf_err *e) {
    int rc = 0;
    c->px = qf_malloc((size_t)c->w * c->h * 3);
    draw_all(c, p, kept, xr, files, nfiles);
    if (write_png(out, c) != 0) rc = qf_err_set(e, QF_EXIT_RUNTIME, "cannot write %s: %s", out, strerror(errno));
    free(c->px);
    return rc;
}

/* "plot: OUT (N panels: k1 k2+valid_k2 ...)" */
static void print_summary(const char *out, const panel *p, int kept) {
    printf("plot: %s (%d panel%s:", out, kept, kept == 1 ? "" : "s");
    for (int k = 0; k < kept; k++) printf(" %s%s%s", p[k].key, p[k].over_key[0] ? "+" : "", p[k].over_key);
    printf(")\n");
}

/* The read panels merged, laid out and written to o->out. */
static int draw_panels(const plot_opts *o, const char *path, int svg, panel *p, int np, int *kept_out, qf_err *e) {
    const char *const *files = o->files.v;
    int nfiles = o->files.n;
    merge_eval_panels(p, np);
    xrange xr = {INFINITY, -INFINITY};
    int kept = keep_panels_with_data(p, np, nfiles, qf_opts_given(&qf_cmd_plot, o, "keys"), &xr);
    *kept_out = kept;
    pad_xrange(&xr);
    if (!kept)
        return qf_err_set(e, QF_EXIT_INPUT, "none of the keys (%s) has a value in %s%s", o->keys, files[0],
                          nfiles > 1 ? " and the other files" : "");
    canvas c = {.svg = svg, .w = W, .h = TOP + kept * PANEL_H + 10, .scale = 2};
    return svg ? render_svg(path, &c, p, kept, &xr, files, nfiles, e)
               : render_png(path, &c, p, kept, &xr, files, nfiles, e);
}

/* kept, empty and merged panels alike (merged ones hold no series) */
static void free_panels(panel *p, int np, int nfiles) {
    for (int k = 0; k < np; k++)
        for (int i = 0; i < nfiles; i++) free(p[k].s[i].x), free(p[k].s[i].y), free(p[k].over[i].x), free(p[k].over[i].y);
    free(p);
}

static int plot(const plot_opts *o, qf_err *e) {
    int svg = output_is_svg(o->out);
    if (svg < 0) return qf_err_set(e, QF_EXIT_INPUT, "%s: the output must end in .svg or .png", o->out);
    /* the output rule (kernels/base/out_file.h): never one of the metrics files, a temporary renamed at the end */
    qf_out out;
    if (qf_out_begin(&out, "--out", o->out, o->files.v, o->files.n, e)) return e->code;
    panel *p = qf_calloc(PLOT_MAX_KEYS, sizeof *p);
    int np = 0;
    int rc = parse_keys(o->keys, p, &np, e);
    for (int i = 0; i < o->files.n && !rc; i++) rc = read_metrics(o->files.v[i], i, p, np, e);
    int kept = 0;
    if (!rc) rc = draw_panels(o, out.tmp, svg, p, np, &kept, e);
    if (!rc) rc = qf_out_commit(&out, e);
    qf_out_abort(&out);
    if (!rc) print_summary(o->out, p, kept);
    free_panels(p, np, o->files.n);
    return rc;
}

static int plot_main(const void *opts) {
    qf_err e = {0};
    int rc = plot(opts, &e);
    if (rc) fprintf(stderr, "qwen-ft plot: %s\n", e.msg);
    return rc;
}

const qf_cmd qf_cmd_plot = {
    .name = "plot",
    .synopsis = "METRICS.jsonl [MORE.jsonl]... --out=OUT.svg|OUT.png [--keys=K1,K2,...]",
    .summary = "training curves from metrics.jsonl (no TensorBoard needed)",
    .about = "One panel per key against the step, one colour per file (up to 8 files); evaluation keys (valid_*)\n"
             "as points. Any number in the lines can be plotted. Bad input exits 2 naming file:line.",
    .opts = PLOT_OPTS,
    .nopts = QF_NOPTS(PLOT_OPTS),
    .pos_meta = "METRICS.jsonl",
    .pos_min = 1,
    .pos_max = PLOT_MAX_FILES,
    .pos_off = offsetof(plot_opts, files),
    .size = sizeof(plot_opts),
    .run = plot_main,
    .rank0 = 1, /* one process draws */
};
