/* run.h — the run context: everything a train or eval run holds, created once from the deck. This is the only
 * "global" state of a run, and it is passed explicitly. */
#ifndef QF_RUN_H
#define QF_RUN_H
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include "store/checkpoint.h"
#include "parallel/comm.h"
#include "dataset.h"
#include "deck/deck.h"
#include "model/loader.h"
#include "model/model.h"
#include "signals.h"
#include "util/tensorboard.h"
#include "parallel/topology.h"
#include "zero/zero.h"
#include "store/ckpt_lock.h"
#include "monitor.h"
#include "hf_files.h"
#include "plan/plan.h"

/* A train run started again after its first step ran out of memory under an "auto" plan (train.c): what the
 * runs before it found, for the next plan's choice and the run header */
typedef struct qf_replan {
    int falls;                  /* fallbacks so far, this one included */
    int64_t device_need;        /* the failed plan's predicted device bytes per rank: the next plan needs less */
    char line[768];             /* what ran out, where (the fallback line without the next plan) */
    char log[4096];             /* the fallback lines before it (qf_run plan_log) */
    char tried[2048];           /* the plans that ran out of memory, and where (qf_run plan_tried) */
} qf_replan;

typedef struct qf_run {
    qf_deck deck;
    char *deck_text;            /* resolved deck (stored in checkpoints) */
    const qf_ops *ops;
    qf_comm comm;
    qf_model model;
    qf_zero zero;
    qf_dataset train_ds, valid_ds;
    int have_train, have_valid;
    qf_loader train_ld, valid_ld;
    qf_rows *rows;              /* [nrows] micro-batches of this rank (gradient_accumulation_steps when training) */
    int nrows;
    qf_train_state st;
    int64_t total_steps, steps_per_epoch;
    char source[QF_PATH_MAX + 64]; /* where the parameters came from */
    int resumed;
    qf_ckpt_lock lock;          /* train: checkpoint.dir held for the whole run (src/store/ckpt_lock.h) */
    FILE *metrics;              /* rank 0 */
    qf_tb *tb;                  /* rank 0 with log.tensorboard: TensorBoard events in log.dir */
    qf_signals *sig;            /* train: SIGUSR1/SIGTERM/SIGINT and max_hours (installed by qf_train_command) */
    qf_topology topo;           /* nodes, GPUs, P2P, InfiniBand (docs/hpc.md) */
    char nccl_line[512];        /* what the NCCL environment policy did (run header) */
    double flops_per_token, peak_flops; /* peak_flops 0: no peak known (MFU n/a) */
    char backend_info[512];     /* which op table, which GPU, which attention path */
    char grads_why[256];        /* why offload_optimizer.gradients is what it is (plan/grads_home.c) */
    int planned;                /* the layout came from the planner ("auto" keys; run_plan.c) */
    char *plan_text;            /* rank 0: the chosen layout and the runner-ups, for the run header (or NULL) */
    qf_plan *plans;             /* planned: the ranking (fitting plans first), on every rank */
    int nplans, plan_at;        /* how many; the one that runs */
    int plan_falls;             /* fallbacks taken (a plan that ran out of memory in the engine's set-up) */
    char *plan_log;             /* planned: one line per fallback, for the run header */
    qf_plan_machine plan_mc;    /* rank 0: the machine planned for */
    char plan_rates[256];       /* rank 0: where the rates came from */
    qf_grads_home plan_grads;   /* the deck's offload_optimizer.gradients before any plan was applied */
    qf_mem_trial trial;         /* the engine's set-up under a plan (model/mem_trial.h; run.c) */
    size_t trial_base;          /* the backend's bytes before the set-up (CUDA; 0 on CPU ranks) */
    char plan_tried[2048];      /* the plans that ran out of memory, and where */
    char oom_hint[384];         /* planned: what an out-of-memory error in a step adds (the next plan; zero.h) */
    int64_t rss_base;           /* resident bytes before the model state and activations were allocated */
    /* fault injection for the failure tests (QWENFT_INJECT_FAULT="rank:step:nan|fail", docs/testing.md) */
    int fault_rank;
    int64_t fault_step;
    char fault_kind[8];
    /* QWENFT_INJECT_FAULT="rank:K:oom" (-1: every rank): the first K layouts' set-up runs out of memory (run.c);
     * "rank:K:oomstep": the first K layouts' first step does, after its first micro-batch (train.c) */
    int oom_rank, oom_plans, oomstep_rank, oomstep_plans;
    /* the first step under a plan: an allocation that fails in it falls back to the next plan (train.c) */
    const qf_replan *replan;    /* this run is the fallback of one whose first step ran out of memory, or NULL */
    int oom_armed;              /* the first step of a planned run runs: its out-of-memory hook acts (train.c) */
    jmp_buf *oom_jmp;           /* one rank: where it leaves the step by longjmp, else NULL */
    int oom_rescued;            /* several ranks: this rank's step went on in rescue memory */
    pthread_t oom_thread;       /* the thread whose failures the hook takes */
    int first_step;             /* 1 until this process's first step has ended */
    char oom_what[96];          /* what ran out in the first step (the first failure), the bytes asked, the rank */
    size_t oom_bytes;
    int oom_at_rank;
    uint64_t alloc_mark;        /* the backend's allocation mark before the set-up (qf_backend_free_since) */
    qf_profile prof;            /* log.wall_clock_breakdown (profile.h) */
    qf_monitor mon;             /* train: the per-step monitoring figures (monitor.h) */
    int64_t best_step;          /* the step of the last evaluation that improved valid_loss (-1: none yet) */
    qf_hf_files carry;          /* tokenizer files + generation_config.json carried into checkpoints (run_carry.c) */
} qf_run;

#define QF_RUN_HAS_TOPOLOGY 1 /* header.c prints r->topo and r->nccl_line */

/* What a command needs: train (optimizer + data) or eval (parameters + valid data). */
enum { QF_RUN_TRAIN = 1, QF_RUN_EVAL = 2 };

/* The command line of train and eval (cmd_train.c): DECK.cfg [--set key.path=value]... */
typedef struct qf_run_args {
    const char *deck;
    qf_strlist sets;
    int verbose;                /* eval --verbose: the whole run header on stderr */
    const char *resume_from;    /* train --resume-from best|latest|step-N: that checkpoint of checkpoint.dir */
    const qf_replan *replan;    /* train: started again after a plan's first step ran out of memory (train.c) */
} qf_run_args;

/* 0 when value (the deck's key, a path to read) exists or is empty; else exit 2 naming the deck's file and line
 * (run_paths.c). */
int qf_run_check_path(const qf_deck *d, const char *key, const char *value, qf_err *e);

/* The deck's "auto" layout keys (stage, offload, ratio, micro batch, recomputation): rank 0 plans (calibrating
 * when the cache has no rates), every rank applies the choice (run_plan.c). 0 or an exit code. */
int qf_run_plan_layout(qf_run *r, qf_err *e);

/* After a plan ran out of memory in the engine's set-up (run.c): the next plan of the ranking that needs less of
 * the memory that ran out (host: the node's host bytes, else the device's), or -1 (none, or QF_RUN_PLAN_FALLBACKS
 * taken); its description; the bytes
 * the running plan predicts per rank (model state + activations: the fault hook's yardstick); taking plan next
 * (line: what happened, for the run header). */
#define QF_RUN_PLAN_FALLBACKS 4 /* the most fallbacks a run takes (each one's set-up allocates and frees again) */
int qf_run_plan_next(const qf_run *r, int host);
void qf_run_plan_describe(const qf_run *r, int i, char *buf, size_t n);
int64_t qf_run_plan_bytes(const qf_run *r);
int qf_run_plan_fallback(qf_run *r, int next, const char *line);

/* Fills r->carry from the sources of the run (run_carry.c); after the parameters are loaded. */
void qf_run_carry_files(qf_run *r);

/* Loads everything the deck names; 0 or an exit code (message printed by rank 0). */
int qf_run_setup(qf_run *r, const qf_run_args *a, int mode);
void qf_run_free(qf_run *r);

#endif
