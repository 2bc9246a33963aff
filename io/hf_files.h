/* hf_files.h — the small files of an HF model directory that a served model needs beside its weights (tokenizer
 * files, generation_config.json), carried inside qwen-ft's HDF5 files: the model (`import`), the dataset
 * (`prepare --tokenizer`) and every checkpoint, as 1-D uint8 datasets /hf_files/NAME (docs/formats.md), so that
 * `export` and `checkpoint.export_hf` write a directory transformers loads whole, wherever the original went. */
#ifndef QF_HF_FILES_H
#define QF_HF_FILES_H
#include <stddef.h>
#include "h5io.h"
#include "util.h"

#define QF_HF_FILES_MAX 12
#define QF_HF_FILES_GROUP "hf_files"
#define QF_HF_FILE_LIMIT ((size_t)64 << 20) /* larger files are not carried (a tokenizer.json is ~7 MB) */

typedef struct qf_hf_files {
    int n;
    char name[QF_HF_FILES_MAX][64];
    unsigned char *data[QF_HF_FILES_MAX];
    size_t size[QF_HF_FILES_MAX];
} qf_hf_files;

/* The names carried, in order: tokenizer.json, qwen.tiktoken, tokenizer_config.json, vocab.json, merges.txt,
 * special_tokens_map.json, added_tokens.json, chat_template.jinja, generation_config.json. NULL-terminated.
 * In a dataset (and so in the checkpoints trained on it) chat_template.jinja is the template its conversations
 * were rendered with (prepare writes it; docs/formats.md), which every export writes as the chat template. */
const char *const *qf_hf_files_names(void);
/* Reads those of dir that exist (dir may also name a tokenizer.json or qwen.tiktoken file: its directory is read,
 * without generation_config.json). Returns 0 (none found is not an error), or QF_EXIT_INPUT naming the file. */
int qf_hf_files_from_dir(const char *dir, qf_hf_files *hf, qf_err *e);
/* Writes hf into the open file f: collective over f's communicator (every rank passes the same hf); rank 0 writes
 * the bytes. Nothing when hf is empty. */
int qf_hf_files_write(qf_h5 *f, const qf_hf_files *hf, qf_err *e);
/* Reads the carried files of f (none: hf->n = 0). */
int qf_hf_files_read(qf_h5 *f, qf_hf_files *hf, qf_err *e);
/* Same, opening path on this process alone; a file that is not HDF5 or unreadable gives hf->n = 0 and 0. */
int qf_hf_files_read_path(const char *path, qf_hf_files *hf);
/* Adds the carried files to the HDF5 file at path (opened for writing on this process alone). */
int qf_hf_files_add_to_path(const char *path, const qf_hf_files *hf, qf_err *e);
/* The bytes of name, or NULL. */
const unsigned char *qf_hf_files_get(const qf_hf_files *hf, const char *name, size_t *n);
/* 1 if hf holds a tokenizer (tokenizer.json or qwen.tiktoken). */
int qf_hf_files_has_tokenizer(const qf_hf_files *hf);
/* Writes each file into dir (skip: a name not to write, or NULL). */
int qf_hf_files_save(const qf_hf_files *hf, const char *dir, const char *skip, qf_err *e);
/* Copies src into dst (deep). */
void qf_hf_files_copy(qf_hf_files *dst, const qf_hf_files *src);
void qf_hf_files_free(qf_hf_files *hf);

#endif
