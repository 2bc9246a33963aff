/* util.h — the base layer (kernels/base): errors, exit codes, checked allocation, conversions, small helpers shared by
 * every layer. Knows no MPI, no files beyond mkdir/stat: kernels/, io/ and the engine (src/) all build on it.
 * No global mutable state but the fatal and out-of-memory hooks: errors travel in a qf_err the caller owns. */
#ifndef QF_UTIL_H
#define QF_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define QF_EXIT_OK 0
#define QF_EXIT_INPUT 2   /* bad deck, data, model file, command line */
#define QF_EXIT_RUNTIME 3 /* OOM, MPI/NCCL error, lost rank */

/* An error travelling up to the command that reports it. code is an exit code (0 = none). */
typedef struct qf_err {
    int code;
    char msg[2048];
} qf_err;

/* Sets e (if e->code is still 0) and returns code; printf-style message. */
int qf_err_set(qf_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Internal invariant broken or allocation failed: hands "file:line: msg" to the fatal hook, which the engine
 * installs once MPI is up (it prints the message with the rank and stops every rank: src/parallel/comm.c); without a hook,
 * or when the hook returns, prints "qwen-ft: file:line: msg" and exits with code 3. */
void qf_fatal_at(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
typedef void (*qf_fatal_hook)(const char *where_and_msg);
/* Installs the hook (NULL: none); call once, before other threads start. */
void qf_fatal_set_hook(qf_fatal_hook hook);
/* A cleanup run before the hook (kernels/base/out_file.c removes its temporaries; async-signal-safe). */
void qf_fatal_set_cleanup(void (*cleanup)(void));
#define QF_FATAL(...) qf_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

/* An allocation that failed inside a training step, where the run may recover: the first step of a run whose layout
 * came from an "auto" plan falls back to the next plan (src/train/train.c). The site calls qf_oom_rescue(what,
 * bytes) before its fatal error; it hands them to the out-of-memory hook (the run's, only while its first step
 * runs), which either leaves the step by longjmp (one rank), or returns 1: the failure is noted, the caller takes
 * rescue memory instead (host-backed: model/backend.h qf_backend_alloc_rescue) so that the step reaches the ranks'
 * agreement at its end (several ranks); 0 (no hook, another thread): the caller stops as before (QF_FATAL). */
typedef int (*qf_oom_hook)(void *arg, const char *what, size_t bytes);
/* Installs the hook with its argument (NULL: none). */
void qf_oom_set_hook(qf_oom_hook hook, void *arg);
int qf_oom_rescue(const char *what, size_t bytes);
#define QF_CHECK(cond)                                                \
    do {                                                              \
        if (!(cond)) qf_fatal_at(__FILE__, __LINE__, "check failed: %s", #cond); \
    } while (0)

void *qf_malloc_at(size_t n, const char *file, int line);
void *qf_calloc_at(size_t n, size_t sz, const char *file, int line);
void *qf_realloc_at(void *p, size_t n, const char *file, int line);
char *qf_strdup_at(const char *s, const char *file, int line);
#define qf_malloc(n) qf_malloc_at((n), __FILE__, __LINE__)
#define qf_calloc(n, s) qf_calloc_at((n), (s), __FILE__, __LINE__)
#define qf_realloc(p, n) qf_realloc_at((p), (n), __FILE__, __LINE__)
#define qf_strdup(s) qf_strdup_at((s), __FILE__, __LINE__)

/* Large host buffers (model and optimizer state, the offload's buffers, the CPU table's tensors) in 2 MiB pages
 * where the kernel gives transparent huge pages on request (THP "madvise" or "always"): their first touch then
 * faults 512 times fewer pages (the moments of an offloaded run are first touched by its first host AdamW, inside
 * the second step). Buffers under 64 MiB, and systems without MADV_HUGEPAGE, stay as they are; only the buffer's
 * 2 MiB-aligned interior is advised, so any allocator's block will do. */
void qf_host_hugepages(void *p, size_t bytes);

/* A list of strings in order (a repeatable option's values, --set overrides); v[0..n-1] are borrowed. */
typedef struct qf_strlist {
    const char **v;
    int n;
} qf_strlist;

/* Wall clock in seconds (monotonic). */
double qf_now(void);

/* Levenshtein distance, for "did you mean". */
int qf_edit_distance(const char *a, const char *b);

/* bf16 <-> fp32 and fp16 <-> fp32 (round to nearest even; NaN stays NaN). Inline: the host's per-element loops
 * over the offloaded state (host_act_cpu.c, adamw_cpu.c: billions of elements a step) would otherwise pay a call
 * per element and never vectorise. */
static inline uint16_t qf_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float qf_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* fp16: written as selects, no branches or calls, so that the host loops vectorise; bit for bit the scalar rules
 * (round to nearest even, subnormals kept, overflow to infinity, NaN to the quiet NaN 0x7e00 with its sign):
 * tests/unit/test_convert.c checks every fp16 value and a sweep of floats. A subnormal result is rounded by the FPU:
 * adding 0.5 (2^-1) places the value's 2^-24 units in the low mantissa bits, the hardware's nearest-even does the rest. */
static inline uint16_t qf_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    float af, sub;
    memcpy(&af, &a, 4);
    sub = af + 0.5f; /* exponent of 0.5: the sum's low 11 bits are the value in units of 2^-24, rounded */
    uint32_t s;
    memcpy(&s, &sub, 4);
    const uint32_t rs = s - 0x3f000000u;                                    /* a < 2^-14: the subnormal */
    const uint32_t rn = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;         /* rebias by -112 << 23, round */
    uint32_t r = a < 0x38800000u ? rs : rn;
    r = a >= 0x47800000u ? 0x7c00u : r; /* 65520 and up round to infinity in rn already; 65536 and up here */
    r = a > 0x7f800000u ? 0x7e00u : r;
    return (uint16_t)(sign | r);
}
static inline float qf_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = h & 0x7c00u, m = (uint32_t)(h & 0x7fffu) << 13;
    /* a subnormal m x 2^-24: its bits under exponent 2^-14 (113 << 23), minus 2^-14 in float arithmetic (exact) */
    uint32_t us = m + (113u << 23);
    float fs;
    memcpy(&fs, &us, 4);
    fs -= 6.103515625e-05f;
    uint32_t sub;
    memcpy(&sub, &fs, 4);
    const uint32_t rebias = e == 0x7c00u ? 224u << 23 : 112u << 23; /* infinity and NaN: exponent 255 */
    const uint32_t u = sign | (e == 0 ? sub : m + rebias);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The double a float hyper-parameter stands for: the double of its shortest round-trip decimal form
 * (0.999f -> 0.999), as torch holds Python-float hyper-parameters. Shared by the CPU and CUDA AdamW so both form
 * their scalars identically. */
double qf_float_widen(float f);

/* Input size limits (docs/reliability.md): one JSONL line (a prepare record, a metrics line), a tokenizer file. */
#define QF_MAX_LINE_BYTES ((size_t)1 << 24)      /* 16 MiB */
#define QF_MAX_TOKENIZER_BYTES ((size_t)1 << 26) /* 64 MiB (Qwen's tokenizer.json: 7 MB) */
/* A deck file (each @include too) and a DeepSpeed JSON: real ones are a few KB. The caps keep their parsers fast:
 * libconfig rescans a token from its start each time its 8 KB buffer refills (a long comment or string line is
 * quadratic) and checks each new setting against every setting of its group (quadratic in a group's size). */
#define QF_MAX_DECK_BYTES ((size_t)1 << 22)  /* 4 MiB */
#define QF_MAX_DECK_LINE ((size_t)1 << 16)   /* 64 KiB, one line of a deck */
#define QF_MAX_DECK_SETTINGS 4096            /* settings of a deck with its includes; keys + list values of a JSON */
/* getline with a bound: reads one line (with its '\n') into *line (grown as getline grows it), NUL-terminated.
 * Returns its length, -1 at end of file (or on a read error: check ferror), or -2 when the line is longer than
 * max bytes (the rest of it is left unread; memory stays O(max)). */
long long qf_getline_max(char **line, size_t *cap, FILE *f, size_t max);

/* Flushes f and stops every rank (QF_FATAL, exit 3) when anything written to it was lost (disk full, quota, I/O
 * error): a log that silently stays empty is a defect (docs/reliability.md). what names the file in the message. */
void qf_flush_or_die_at(FILE *f, const char *what, const char *file, int line);
#define qf_flush_or_die(f, what) qf_flush_or_die_at((f), (what), __FILE__, __LINE__)

/* Creates every directory of path (like mkdir -p). 0 on success. */
int qf_mkdirs(const char *path);
/* 1 if path exists. */
int qf_exists(const char *path);

#endif
