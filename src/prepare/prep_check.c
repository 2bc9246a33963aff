/* prep_check.c — what `qwen-ft prepare` reports about its input: the summary that --check prints instead of
 * writing, and every prepare prints after writing (docs/formats.md, "--check and the summary"), and the progress
 * line on a terminal. */
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include "prep_run.h"

#define PREP_PROGRESS_EVERY_S 0.5

const char *const prep_kind_names[PREP_KIND_COUNT] = {"pre-tokenized", "text", "conversations",
                                                      "messages", "alpaca", "map"};

void prep_summary_init(prep_summary *s) {
    memset(s, 0, sizeof *s);
    s->min_len = INT64_MAX;
    s->max_len = -1;
}

void prep_summary_add(prep_summary *s, const prep_opts *o, const prep_doc *d) {
    s->records[d->kind]++;
    s->docs++;
    s->turns += d->turns;
    s->empty_turns += d->empty_turns;
    s->unanswered += d->unanswered;
    if (!o->tok && d->kind != PREP_KIND_PRETOKENIZED) { /* --check without --tokenizer */
        s->untokenized++;
        return;
    }
    if (d->cut) s->truncated++, s->truncated_tokens += d->cut, s->cut_in_answer += d->cut_in_answer;
    s->tokens += d->n;
    for (int64_t i = 1; i < d->n; i++) s->trained += d->mask[i];
    int b = 0;
    for (int64_t v = d->n; v > 0 && b < PREP_HIST_BINS - 1; v >>= 1) b++;
    s->hist[b]++;
    int64_t L = o->max_len > 0 ? o->max_len : o->seq_len;
    if (L > 0 && d->n > L) s->over_seq_len++;
    if (d->n < s->min_len) s->min_len = d->n;
    if (d->n > s->max_len) s->max_len = d->n;
}

void prep_summary_reduce(prep_summary *s, MPI_Comm comm) {
    int rank;
    MPI_Comm_rank(comm, &rank);
    int nsum = (int)(offsetof(prep_summary, min_len) / sizeof(int64_t));
    prep_summary t;
    MPI_Reduce(s, &t, nsum, MPI_INT64_T, MPI_SUM, 0, comm);
    MPI_Reduce(&s->min_len, &t.min_len, 1, MPI_INT64_T, MPI_MIN, 0, comm);
    MPI_Reduce(&s->max_len, &t.max_len, 1, MPI_INT64_T, MPI_MAX, 0, comm);
    if (rank == 0) *s = t;
}

static double prep_mb(int64_t b) { return (double)b / 1e6; }

void prep_summary_print(FILE *f, const prep_opts *o, const prep_plan *plan, const prep_pass *p,
                        const prep_dup_stats *dup, double seconds) {
    const prep_summary *s = &p->sum;
    int kinds[3] = {0}, arrays = 0;
    for (int i = 0; i < plan->n_in; i++) kinds[plan->in[i].kind]++, arrays += plan->in[i].array;
    char arr[48] = "";
    if (arrays) snprintf(arr, sizeof arr, "; %d JSON array%s", arrays, arrays == 1 ? "" : "s");
    fprintf(f, "prepare: summary: %d file%s (%.2f MB; %d plain, %d gzip, %d zstd%s), %lld lines, %lld records",
            plan->n_in, plan->n_in == 1 ? "" : "s", prep_mb(plan->total_bytes), kinds[0], kinds[1], kinds[2], arr,
            (long long)s->lines, (long long)s->docs);
    const char *sep = " (";
    for (int k = 0; k < PREP_KIND_COUNT; k++)
        if (s->records[k]) fprintf(f, "%s%s %lld", sep, prep_kind_names[k], (long long)s->records[k]), sep = ", ";
    fprintf(f, "%s, %lld broken line%s", *sep == ',' ? ")" : "", (long long)s->broken, s->broken == 1 ? "" : "s");
    for (int i = 0; i < p->n_broken_shown; i++)
        fprintf(f, "%s%s:%lld", i ? ", " : " (", plan->in[p->broken[i].file].path, (long long)p->broken[i].line);
    if (s->broken > p->n_broken_shown) fprintf(f, ", ...");
    fprintf(f, "%s\n", p->n_broken_shown ? ")" : "");
    if (s->turns || s->records[PREP_KIND_CONVERSATIONS] || s->records[PREP_KIND_MESSAGES] ||
        s->records[PREP_KIND_ALPACA] || s->records[PREP_KIND_MAP])
        fprintf(f, "prepare:   turns %lld (empty %lld; conversations ending with a user turn %lld)\n",
                (long long)s->turns, (long long)s->empty_turns, (long long)s->unanswered);
    int64_t nt = s->docs - s->untokenized; /* documents whose tokens are counted */
    fprintf(f, "prepare:   tokens %lld, trained %lld; per document min %lld, mean %.1f, max %lld", (long long)s->tokens,
            (long long)s->trained, (long long)(nt ? s->min_len : 0), nt ? (double)s->tokens / (double)nt : 0.0,
            (long long)(nt ? s->max_len : 0));
    if (s->untokenized)
        fprintf(f, "; %lld text and chat records not tokenized (no --tokenizer)", (long long)s->untokenized);
    fprintf(f, "\n");
    fprintf(f, "prepare:   length histogram (tokens per document: documents):");
    for (int b = 0; b < PREP_HIST_BINS; b++) {
        if (!s->hist[b]) continue;
        long long lo = b ? 1ll << (b - 1) : 0, hi = b ? (1ll << b) - 1 : 0;
        fprintf(f, " %lld-%lld: %lld", lo, hi, (long long)s->hist[b]);
    }
    fprintf(f, "\n");
    fprintf(f, "prepare:   exact duplicates: %lld record%s repeat%s %lld content%s (within train %lld, within valid "
               "%lld, across train/valid %lld)%s",
            (long long)dup->dup_records, dup->dup_records == 1 ? "" : "s", dup->dup_records == 1 ? "s" : "",
            (long long)dup->dup_contents, dup->dup_contents == 1 ? "" : "s", (long long)dup->dup_train,
            (long long)dup->dup_valid, (long long)dup->cross, o->dedup ? "" : "\n");
    if (o->dedup) fprintf(f, "; --dedup dropped %lld\n", (long long)dup->dropped);
    if (o->valid_fraction > 0)
        fprintf(f, "prepare:   split by content hash (seed %llu, fraction %g): train %lld documents (%lld tokens), valid "
                   "%lld (%lld tokens)%s\n",
                (unsigned long long)o->seed, o->valid_fraction, (long long)dup->train_docs, (long long)dup->train_tokens,
                (long long)dup->valid_docs, (long long)dup->valid_tokens,
                dup->valid_disabled  ? "; too few distinct records: no validation file"
                : dup->valid_forced ? "; no record fell under the fraction: the lowest hash went to valid"
                                    : "");
    int64_t L = o->max_len > 0 ? o->max_len : o->seq_len;
    const char *lname = o->max_len > 0 ? "--max-len" : "--seq-len";
    if (L > 0 && s->untokenized) {
        fprintf(f, "prepare:   %s %lld: not computed (text and chat records were not tokenized: pass --tokenizer)\n",
                lname, (long long)L);
    } else if (L > 0) {
        static const char *const how[] = {"cut after the last assistant turn that fits", "cut to their first tokens",
                                          "cut to their last tokens", "dropped"};
        fprintf(f, "prepare:   %s %lld: %lld record%s longer: %lld %s", lname, (long long)L,
                (long long)(s->truncated + s->dropped_long + s->over_seq_len),
                s->truncated + s->dropped_long + s->over_seq_len == 1 ? "" : "s",
                (long long)(o->truncate == PREP_TRUNC_DROP ? s->dropped_long : s->truncated), how[o->truncate]);
        if (s->cut_in_answer)
            fprintf(f, " (%lld inside the first answer, none fitting whole)", (long long)s->cut_in_answer);
        fprintf(f, " (%lld tokens removed), %lld left whole (plain text and pre-tokenized records: split across rows "
                   "by the packing)\n", (long long)s->truncated_tokens, (long long)s->over_seq_len);
    }
    if (o->seq_len > 0 && !s->untokenized) {
        int64_t T = o->seq_len, rows = (dup->train_tokens + T - 1) / T;
        double pad = rows ? 1.0 - (double)dup->train_tokens / ((double)rows * (double)T) : 0.0;
        fprintf(f, "prepare:   --seq-len %lld: train packs into %lld rows, padding %.2f%%\n", (long long)T,
                (long long)rows, 100 * pad);
    }
    fprintf(f, "prepare:   %.2f s, %.2f MB/s, %.0f tokens/s\n", seconds,
            seconds > 0 ? prep_mb(plan->total_bytes) / seconds : 0.0, seconds > 0 ? (double)s->tokens / seconds : 0.0);
    fflush(f);
}

void prep_progress_start(prep_progress *pr, const prep_opts *o, int64_t total_bytes) {
    memset(pr, 0, sizeof *pr);
    pr->on = o->rank == 0 && isatty(STDERR_FILENO);
    pr->t0 = pr->last = qf_now();
    pr->total = total_bytes;
}

void prep_progress_update(prep_progress *pr, int64_t bytes, int64_t records) {
    if (!pr->on) return;
    double now = qf_now();
    if (now - pr->last < PREP_PROGRESS_EVERY_S) return;
    pr->last = now;
    double dt = now - pr->t0, frac = pr->total > 0 ? (double)bytes / (double)pr->total : 0.0;
    double eta = frac > 0 ? dt * (1 - frac) / frac : 0.0;
    fprintf(stderr, "\rprepare: %.1f/%.1f MB (%.0f%%), %lld records, %.0f records/s, %.1f MB/s, ETA %d:%02d   ",
            prep_mb(bytes), prep_mb(pr->total), 100 * frac, (long long)records, (double)records / dt,
            prep_mb(bytes) / dt, (int)(eta / 60), (int)fmod(eta, 60));
    fflush(stderr);
}

void prep_progress_end(prep_progress *pr) {
    if (pr->on && pr->last > pr->t0) fprintf(stderr, "\n");
}
