/* prep_run.h — the phases of `qwen-ft prepare` across MPI ranks (docs/formats.md, "At scale"):
 *   1. prep_inputs_plan   every rank: the inputs (globs expanded), their sizes and compression, and this rank's
 *                         byte ranges (a contiguous 1/N of all input bytes; compressed files whole)
 *   2. prep_read_pass     every rank tokenizes its ranges into spill files (tokens, masks) and keeps 24 bytes per
 *                         document (content id + length); first error / broken lines / summary agreed by all
 *   3. prep_split_decide  side (train/valid) from the content id; duplicates across all ranks; --dedup
 *   4. prep_write_side    every rank writes its documents of one side into ONE HDF5 file, collectively
 *   5. prep_summary_print rank 0 prints the summary (--check prints only that)
 * The result does not depend on the number of ranks: document order is input order, a record's side and
 * whether it is a duplicate depend only on its content and on the records before it. */
#ifndef QF_PREP_RUN_H
#define QF_PREP_RUN_H
#include <mpi.h>
#include <stdio.h>
#include "jsonl_reader.h"
#include "prep.h"

#define PREP_SHOW_BROKEN 5 /* broken lines named in the summary */
#define PREP_HIST_BINS 33  /* bin 0: empty documents; bin b >= 1: lengths in [2^(b-1), 2^b) tokens */

typedef struct prep_input {
    char *path;
    int64_t size;
    qf_jsonl_kind kind;
    int array; /* a JSON array file: read whole by one rank, as a compressed file */
} prep_input;

typedef struct prep_range {
    int file;
    int64_t start, end; /* bytes; a compressed file: 0, size */
} prep_range;

typedef struct prep_plan {
    prep_input *in;
    int n_in;
    int64_t total_bytes;
    prep_range *mine; /* this rank's ranges, in input order */
    int n_mine;
    int64_t my_bytes;
} prep_plan;

/* what the summary counts; every field is int64 so that ranks sum it as an array (up to min_len, exclusive) */
typedef struct prep_summary {
    int64_t records[PREP_KIND_COUNT];
    int64_t docs, tokens, trained, turns, empty_turns, unanswered, broken, lines;
    int64_t hist[PREP_HIST_BINS];
    int64_t over_seq_len;
    int64_t untokenized; /* --check without --tokenizer: text and chat records counted, not tokenized */
    int64_t truncated, truncated_tokens, cut_in_answer, dropped_long; /* the length policy */
    int64_t min_len, max_len; /* reduced with MIN / MAX */
} prep_summary;

typedef struct prep_broken {
    int file;
    int64_t line; /* local to the rank until prep_read_pass returns, then the file's line number */
    char why[400];
} prep_broken;

/* per document, kept in memory while the rank's spill files hold its tokens */
typedef struct prep_meta {
    uint8_t id[16];
    int64_t ntok;
} prep_meta;

enum { PREP_F_VALID = 1, PREP_F_DUP = 2 }; /* prep_split_decide's flags */

typedef struct prep_pass {
    prep_meta *meta;
    int64_t n, cap;
    char *spill_tok, *spill_mask; /* paths (NULL under --check) */
    int spill_slot[2];            /* in the exit-path tracker (kernels/base/out_file.h) */
    prep_summary sum;             /* this rank's; after prep_read_pass rank 0 holds the totals */
    prep_broken broken[PREP_SHOW_BROKEN]; /* rank 0 after prep_read_pass: the first ones of the corpus */
    int n_broken_shown;
} prep_pass;

typedef struct prep_dup_stats {
    int64_t dup_records;   /* records whose content an earlier record has */
    int64_t dup_contents;  /* contents held by more than one record */
    int64_t dup_train, dup_valid; /* of dup_records: on the train / valid side */
    int64_t cross;         /* contents with records on both sides (0 by construction; counted, not assumed) */
    int64_t dropped;       /* by --dedup */
    int64_t train_docs, valid_docs, train_tokens, valid_tokens;
    int64_t valid_forced;   /* 1: no record fell under the fraction; the smallest hash went to valid */
    int64_t valid_disabled; /* 1: too few distinct contents for a split */
} prep_dup_stats;

int prep_inputs_plan(const prep_opts *o, prep_plan *p, qf_err *e);
void prep_plan_free(prep_plan *p);

/* Reads this rank's ranges. Collective. Returns 0 or an exit code; the message (FILE:LINE: what) is printed by
 * rank 0. spill_base: where the spill files go (their names add .spill-r<rank>.tok / .mask; the base is the
 * output's temporary name, unique to the run); NULL under --check. */
int prep_read_pass(const prep_opts *o, const prep_plan *plan, const char *spill_base, prep_pass *p, MPI_Comm comm);
void prep_pass_free(prep_pass *p); /* also removes the spill files */

/* flags[p->n] and the duplicate statistics (the same on every rank). Collective. */
void prep_split_decide(const prep_opts *o, const prep_pass *p, uint8_t *flags, prep_dup_stats *st, MPI_Comm comm);
/* 1 if a record of this content id goes to the validation side under seed and fraction */
int prep_split_valid(const uint8_t id[16], uint64_t seed, double fraction);

/* Writes the documents of one side (valid = 1: PREP_F_VALID ones) that are kept into tmp, the temporary of the
 * output path that rank 0 publishes (prep_build.c). Collective. 0 or an exit code (message printed by rank 0). */
int prep_write_side(const prep_opts *o, const prep_pass *p, const uint8_t *flags, int valid, const char *path,
                    const char *tmp, const char *source, MPI_Comm comm);

/* summary (prep_check.c) */
void prep_summary_init(prep_summary *s);
void prep_summary_add(prep_summary *s, const prep_opts *o, const prep_doc *d);
void prep_summary_reduce(prep_summary *s, MPI_Comm comm); /* totals on rank 0 */
void prep_summary_print(FILE *f, const prep_opts *o, const prep_plan *plan, const prep_pass *p,
                        const prep_dup_stats *dup, double seconds);

/* progress line on a terminal (prep_check.c): bytes of this rank's share, records/s, ETA */
typedef struct prep_progress {
    int on;
    double t0, last;
    int64_t total;
} prep_progress;
void prep_progress_start(prep_progress *pr, const prep_opts *o, int64_t total_bytes);
void prep_progress_update(prep_progress *pr, int64_t bytes, int64_t records);
void prep_progress_end(prep_progress *pr);

#endif
