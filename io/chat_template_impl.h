/* chat_template_impl.h — the inside of io/chat_template.c, shared by its parts (not for callers):
 *   chat_template.c         names, recognition, init, the dispatch, the qwen1 path, text -> ids + mask
 *   chat_template_render.c  the text of chatml, qwen2.5 and qwen3 with a mask per byte
 *   chat_template_text.c    that text's buffer (qf_tb)
 *   chat_template_json.c    transformers' tojson (Python's json.dumps)
 * Calls go one way: chat_template.c -> chat_template_render.c -> chat_template_text.c, chat_template_json.c. */
#ifndef QF_CHAT_TEMPLATE_IMPL_H
#define QF_CHAT_TEMPLATE_IMPL_H
#include "chat_template.h"

/* mask bits per byte of the rendered text */
#define QF_TB_A 1 /* a target under QF_CHAT_MASK_ASSISTANT */
#define QF_TB_Q 2 /* a target under QF_CHAT_MASK_QWEN */

/* The rendered text: s[n] with m[n] mask bits and the byte offsets after each assistant turn. */
typedef struct qf_tb {
    char *s;
    uint8_t *m;
    size_t n, cap;
    size_t *ends;
    size_t n_ends, cap_ends;
    const qf_tokenizer *tok; /* content is normalized as it normalizes */
} qf_tb;

/* template literal text */
void qf_tb_put(qf_tb *b, const char *s, size_t n, uint8_t m);
void qf_tb_lit(qf_tb *b, const char *s, uint8_t m);
/* content (normalized as the tokenizer does) */
void qf_tb_content(qf_tb *b, const char *s, size_t n, uint8_t m);
void qf_tb_turn_end(qf_tb *b);
void qf_tb_free(qf_tb *b);

/* The text of c under id (QF_TMPL_CHATML, QWEN25, QWEN3) into b; 0, or -1 with why[cap]. */
int qf_tmpl_text(qf_tmpl_id id, const qf_chat_conv *c, int add_generation_prompt, qf_tb *b, char *why, size_t cap);

#endif
