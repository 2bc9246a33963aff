/* model_tok.c — see model_tok.h. */
#include "model_tok.h"
#include <string.h>
#include <sys/stat.h>
#include "h5io.h"
#include "hf.h"
#include "tokenizer.h"

void qf_model_source_tok_identity(const char *from, char *out, size_t cap) {
    out[0] = 0;
    struct stat st;
    if (!from || !from[0] || stat(from, &st) != 0) return;
    qf_err e = {0};
    if (S_ISDIR(st.st_mode)) { /* an HF directory: its tokenizer file's identity; a checkpoint directory: none */
        if (qf_hf_is_dir(from) && qf_tok_file_identity(from, out, cap, &e)) out[0] = 0;
        return;
    }
    if (!S_ISREG(st.st_mode)) return;
    qf_h5 *f = NULL;
    if (qf_h5_open(from, MPI_COMM_SELF, 0, &f, &e)) return;
    if (qf_h5_attr_has(f, "/", "tokenizer") && qf_h5_attr_read_str(f, "/", "tokenizer", out, cap, &e)) out[0] = 0;
    qf_h5_close(f, &e);
}
