/* chatml.h — a conversation as ChatML token ids with a training mask, built as Qwen's finetune.py `preprocess`
 * builds it (QwenLM/Qwen, finetune.py): every piece is tokenized on its own and the ids are concatenated.
 *
 *   system block:  <|im_start|> tok("system") nl tok(SYSTEM) <|im_end|> nl
 *   each turn:     tok("<|im_start|>user" or "<|im_start|>assistant") nl tok(VALUE) <|im_end|> nl
 *                  (the role string is one piece: <|im_start|> followed by the role word's tokens)
 *   nl = tok("\n")
 * finetune.py drops the first turn when it is not a user turn; qf_chatml_render does the same with a leading
 * assistant turn (system turns are taken out by the caller and passed as `system`).
 *
 * Masks (1 = the token is a training target, the packed dataset's loss_mask):
 *   QF_CHAT_MASK_QWEN       exactly the labels finetune.py keeps (does not set to IGNORE_TOKEN_ID): the
 *                           <|im_start|> of every block (system included), every <|im_end|> and the nl after it,
 *                           and the assistant's VALUE tokens; "system"/role words, the nl after them, the system
 *                           text and user text are not targets.
 *   QF_CHAT_MASK_ASSISTANT  only the assistant's VALUE tokens and the <|im_end|> that closes them. */
#ifndef QF_CHATML_H
#define QF_CHATML_H
#include <stddef.h>
#include <stdint.h>
#include "util.h"
#include "tokenizer.h"

typedef enum { QF_CHAT_USER, QF_CHAT_ASSISTANT } qf_chat_role;
typedef enum { QF_CHAT_MASK_QWEN, QF_CHAT_MASK_ASSISTANT } qf_chat_mask;

typedef struct qf_chat_turn {
    qf_chat_role role;
    const char *text; /* UTF-8, len bytes */
    size_t len;
} qf_chat_turn;

/* The pieces every conversation shares, tokenized once by qf_chatml_init. */
typedef struct qf_chatml {
    int32_t im_start, im_end;
    qf_ids nl;        /* tok("\n") */
    qf_ids system;    /* tok("system") */
    qf_ids role[2];   /* tok("<|im_start|>user"), tok("<|im_start|>assistant") */
} qf_chatml;

/* A rendered conversation: ids.v[i] with mask[i] (ids.n entries each; the caller frees with qf_chat_doc_free), and
 * turn_end[n_turn_end]: the token index after each assistant turn (after its <|im_end|> and newline), the cut
 * points of prepare's default length policy. */
typedef struct qf_chat_doc {
    qf_ids ids;
    uint8_t *mask;
    size_t mask_cap;
    size_t *turn_end;
    size_t n_turn_end, cap_turn_end;
} qf_chat_doc;
/* records token index `at` of d as the end of an assistant turn */
void qf_chat_doc_turn_end(qf_chat_doc *d, size_t at);

/* Exit code 2 when the tokenizer lacks <|im_start|> or <|im_end|>, or does not read "<|im_start|>" inside a text
 * as that special token. */
int qf_chatml_init(qf_chatml *c, const qf_tokenizer *t, qf_err *e);
void qf_chatml_free(qf_chatml *c);

/* Appends (after resetting d to empty) the ChatML of system[sys_len] and turns[n] to d. Error (exit 2) when no
 * turn is left after the leading-assistant rule, or on text the tokenizer rejects. */
int qf_chatml_render(const qf_chatml *c, const qf_tokenizer *t, const char *system, size_t sys_len,
                     const qf_chat_turn *turns, size_t n, qf_chat_mask mode, qf_chat_doc *d, qf_err *e);
void qf_chat_doc_free(qf_chat_doc *d);

#endif
