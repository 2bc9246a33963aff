/* export_tokenizer.h — what `qwen-ft export` writes beside the weights so that the HF directory is complete for
 * transformers and vLLM: the model's tokenizer files and generation_config.json.
 *
 * Which tokenizer: --tokenizer T when given; otherwise the one the source records: an HDF5 model made by
 * `qwen-ft import` records its HF directory's tokenizer (root attributes `tokenizer` = identity, `tokenizer_dir`);
 * a checkpoint follows its deck (/state attribute `deck`) to model.from (an HF directory, or an HDF5 model /
 * checkpoint, followed in turn). Identity: the tokenizer found must have the identity recorded by the model
 * (import) and by the training data (data.train's `tokenizer` attribute, made by `prepare --tokenizer`); a
 * mismatch is exit 2 naming both. Identity = "hf-tokenizer.json sha256:<hex>" or "qwen.tiktoken sha256:<hex>"
 * (io/tokenizer.h).
 * Files carried inside the HDF5 files (io/hf_files.h: import, prepare --tokenizer, checkpoints) come first at each
 * step of the chain, so an export needs no directory outside the model, its checkpoints and its data. A source
 * that records a tokenizer whose files nothing carries any more is exit 2 (pass --tokenizer). */
#ifndef QF_EXPORT_TOKENIZER_H
#define QF_EXPORT_TOKENIZER_H
#include "chat_template.h"
#include "tokenizer.h"
#include "deck/deck.h" /* QF_PATH_MAX */
#include "model_config.h"
#include "util.h"

typedef struct qf_export_tok {
    qf_tokenizer *tok;          /* NULL: none known */
    char dir[QF_PATH_MAX];      /* the directory the tokenizer files are copied from */
    char file[QF_PATH_MAX + 32];   /* tokenizer.json or qwen.tiktoken in it */
    char origin[2 * QF_PATH_MAX + 160]; /* where it was found, for the summary line */
    char tmpdir[64];            /* files carried by an HDF5 source, written out here (removed by qf_export_tok_free) */
    int tmp_slot;               /* tmpdir's slot in the temporaries' tracker (kernels/base/out_file.h) */
    char gencfg[QF_PATH_MAX + 32]; /* the model's generation_config.json (carried, or its HF directory's); "" none */
    char *tmpl;                 /* the chat template the training data was rendered with (its chat_template.jinja,
                                 * io/hf_files.h), found through the checkpoint's deck; NULL: none recorded */
    size_t tmpl_len;
    char tmpl_name[32];         /* the training data's attribute chat_template ("" none) */
    char tmpl_from[QF_PATH_MAX + 32]; /* "the training data PATH" */
} qf_export_tok;

/* Finds and checks the tokenizer of src (a resolved HDF5 model or checkpoint file); tok_arg: --tokenizer or NULL.
 * No tokenizer known is not an error (t->tok stays NULL, origin says why). */
int qf_export_tok_find(const char *src, const char *tok_arg, qf_export_tok *t, qf_err *e);
/* Copies the tokenizer file and its companions (tokenizer_config.json, special_tokens_map.json, vocab.json,
 * merges.txt, added_tokens.json) into out_dir; writes a tokenizer_config.json (Qwen2Tokenizer, eos/pad,
 * model_max_length) when the source has none. Its "chat_template" is the one the training data was rendered with
 * (t->tmpl), else the tokenizer's own (chat_template.jinja first, as transformers reads them; a source's carried
 * chat_template.jinja is the training data's, src/train/run_carry.c), else qwen-ft's ChatML; no
 * chat_template.jinja is written (transformers would prefer it over the config's). A qwen.tiktoken (Qwen v1, whose own
 * tokenizer class is remote code) is copied and also written as an equivalent tokenizer.json (io/tok_export.c),
 * with that tokenizer_config.json, so transformers loads it as Qwen2TokenizerFast. */
int qf_export_tok_write(const qf_export_tok *t, const char *out_dir, const qf_model_config *c, qf_err *e);
/* generation_config.json: the model's own (t->gencfg: carried from import, or the HF directory's) as it is;
 * otherwise one made: bos, eos (the model's eos, <|im_end|> and <|endoftext|>: transformers stops at any of
 * them, so a ChatML reply ends at <|im_end|>), pad (the model's, else <|endoftext|>). t may be NULL. */
int qf_export_gencfg_write(const char *out_dir, const qf_model_config *c, const qf_export_tok *t, qf_err *e);
void qf_export_tok_free(qf_export_tok *t);

#endif
