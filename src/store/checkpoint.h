/* checkpoint.h — training checkpoints (docs/formats.md): one HDF5 file per saved step in checkpoint.dir,
 * per-parameter datasets written collectively (each rank its shard's hyperslabs), so any world size and ZeRO
 * stage resumes any checkpoint. Atomic: step-N.h5.tmp-PID-RANDOM is written and closed, renamed to step-N.h5, then the
 * `latest` file (itself written to latest.tmp-PID-RANDOM and renamed) names it; older checkpoints beyond `keep` go. */
#ifndef QF_CHECKPOINT_H
#define QF_CHECKPOINT_H
#include <stdint.h>
#include "zero/zero.h"

typedef struct qf_train_state {
    int64_t step;            /* optimizer steps completed (skipped ones included) */
    int64_t sched_step;      /* scheduler steps (not advanced on fp16 overflow) */
    int64_t data_epoch;      /* data position: next global batch starts at row data_row of data_epoch */
    int64_t data_row;
    int64_t tokens_seen;     /* trained target tokens so far */
    int64_t skipped;         /* skipped steps so far */
    double loss_scale;       /* fp16 dynamic loss scaler (DeepSpeed's) */
    int64_t ls_cur_iter, ls_last_overflow;
    int64_t ls_hysteresis;
    double best_valid;       /* early stopping */
    int64_t bad_evals;
    uint64_t rng[4];         /* the run's RNG state */
} qf_train_state;

/* Writes checkpoint dir/step-<step>.h5 (collective over z->comm). */
/* The file of the checkpoint of step in dir: DIR/step-%08lld.h5 */
void qf_ckpt_path(const char *dir, int64_t step, char *out, size_t cap);
/* carry: the tokenizer files and generation_config.json stored in it (io/hf_files.h; NULL or empty: none). */
struct qf_hf_files;
int qf_ckpt_save(const char *dir, qf_zero *z, const qf_train_state *s, const char *deck_text, int keep,
                 const struct qf_hf_files *carry, qf_err *e);
/* If dir holds a checkpoint, writes its path into path and returns 1; 0 if none. A `latest` naming a missing
 * file is an error (exit 2). */
int qf_ckpt_find_latest(const char *dir, char *path, size_t cap, qf_err *e);
/* Removes the checkpoints of dir beyond the `keep` newest (never the one `best` names), and pointer updates cut
 * short. */
void qf_ckpt_prune(const char *dir, int keep);
/* checkpoint.keep_best (ckpt_best.c): names the checkpoint of step as dir/best (written atomically by rank 0,
 * collective over c), then prunes with keep (the previous best may go). */
struct qf_comm;
int qf_ckpt_mark_best(const char *dir, int64_t step, int keep, struct qf_comm *c, qf_err *e);
/* The checkpoint file `spec` names in dir: "best" (the `best` pointer), "latest", "step-N" or "N". 0 and path, or
 * QF_EXIT_INPUT with a message naming what is there. */
int qf_ckpt_resolve(const char *dir, const char *spec, char *path, size_t cap, qf_err *e);

/* Loads the model parameters, this rank's shard of master/m/v, and the state. */
int qf_ckpt_load(const char *path, qf_zero *z, qf_train_state *s, qf_err *e);

#endif
