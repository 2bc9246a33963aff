/* cmd_import.c — `qwen-ft import --from HF_DIR --out M.h5 [--dtype bf16|fp16|fp32]`: an HF Qwen directory
 * (config.json + safetensors) to the HDF5 model format, written atomically. Rank 0 does the work. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "../io/hf.h"
#include "commands.h"
#include "util.h"

static void import_usage(FILE *fp) {
    fprintf(fp,
            "usage: qwen-ft import --from HF_DIR --out MODEL.h5 [--dtype bf16|fp16|fp32]\n"
            "  --from DIR    HF model directory: config.json + model.safetensors (or a sharded set with\n"
            "                model.safetensors.index.json); Qwen v1, Qwen1.5/2/2.5 and Qwen3 checkpoints\n"
            "  --out FILE    HDF5 model to write (atomically: FILE.tmp, then renamed)\n"
            "  --dtype T     storage dtype of the parameters (default: the checkpoint's own)\n"
            "  --help        this text\n");
}

int qf_cmd_import(int argc, char **argv) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *from = NULL, *out = NULL, *dtype = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        const char *name = a;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            if (rank == 0) import_usage(stdout);
            return 0;
        }
        size_t nl = strcspn(a, "=");
        if (strncmp(a, "--from", nl) == 0 && nl == 6) dst = &from;
        else if (strncmp(a, "--out", nl) == 0 && nl == 5) dst = &out;
        else if (strncmp(a, "--dtype", nl) == 0 && nl == 7) dst = &dtype;
        if (!dst) {
            if (rank == 0) {
                fprintf(stderr, "qwen-ft import: unknown option %s\n", name);
                import_usage(stderr);
            }
            return QF_EXIT_INPUT;
        }
        if (a[nl] == '=') *dst = a + nl + 1;
        else if (i + 1 < argc) *dst = argv[++i];
        else {
            if (rank == 0) {
                fprintf(stderr, "qwen-ft import: %s needs an argument\n", a);
                import_usage(stderr);
            }
            return QF_EXIT_INPUT;
        }
    }
    if (!from || !out || !from[0] || !out[0]) {
        if (rank == 0) {
            fprintf(stderr, "qwen-ft import: %s is required\n", !from || !from[0] ? "--from" : "--out");
            import_usage(stderr);
        }
        return QF_EXIT_INPUT;
    }
    if (dtype && strcmp(dtype, "bf16") && strcmp(dtype, "fp16") && strcmp(dtype, "fp32")) {
        if (rank == 0) {
            fprintf(stderr, "qwen-ft import: --dtype %s: expected bf16, fp16 or fp32\n", dtype);
            import_usage(stderr);
        }
        return QF_EXIT_INPUT;
    }
    if (rank != 0) return 0;
    qf_err e = {0};
    if (qf_hf_import(from, out, dtype, &e)) {
        fprintf(stderr, "qwen-ft import: %s\n", e.msg);
        return e.code;
    }
    printf("import: wrote %s\n", out);
    return 0;
}
