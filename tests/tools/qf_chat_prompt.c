/* qf_chat_prompt.c — a test helper: the prompt ids that `qwen-ft generate --chat --prompts FILE` feeds the model,
 * through the same code (src/generate/gen_prompts.c, io/chat_template.c), without a model, so that
 * tests/cli/ref_chat_template.sh can compare them with transformers' apply_chat_template(add_generation_prompt=True):
 *   qf_chat_prompt TOKENIZER TEMPLATE FILE.jsonl [nothink]    one JSON array of ids per prompt, in order
 *   (nothink: as generate --enable-thinking false)
 * TEMPLATE: a name (qwen1, chatml, qwen2.5, qwen2.5-base, qwen3) or auto (the tokenizer directory's). Exit 0, or the error's
 * exit code with its message on stderr. */
#include <stdio.h>
#include <string.h>
#include "chat_template.h"
#include "generate/gen_prompts.h"
#include "tokenizer.h"

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && !strcmp(argv[4], "nothink"))) {
        fprintf(stderr, "usage: qf_chat_prompt TOKENIZER TEMPLATE FILE.jsonl [nothink]\n");
        return 2;
    }
    qf_err e = {0};
    qf_tokenizer *tok;
    if (qf_tok_load(argv[1], &tok, &e)) return fprintf(stderr, "%s\n", e.msg), e.code;
    qf_tmpl_id id = QF_TMPL_QWEN1;
    int found = 0;
    char where[4200];
    if (strcmp(argv[2], "auto") ? qf_tmpl_by_name(argv[2], &id) != 0
                                : qf_tmpl_detect(argv[1], &id, &found, where, sizeof where, &e) != 0)
        return fprintf(stderr, "template %s: %s\n", argv[2], e.msg), 2;
    qf_chat_template tm;
    if (qf_tmpl_init(&tm, id, tok, &e)) return fprintf(stderr, "%s\n", e.msg), e.code;
    qf_gen_src src = {tok, &tm, "", NULL, 1, argc == 5};
    qf_gen_prompts P = {0};
    int rc = qf_gen_prompts_read(argv[3], &src, &P, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    for (int i = 0; i < P.n && !rc; i++) {
        printf("[");
        for (int k = 0; k < P.v[i].n; k++) printf("%s%d", k ? ", " : "", P.v[i].ids[k]);
        printf("]\n");
    }
    qf_gen_prompts_free(&P);
    qf_tmpl_free(&tm);
    qf_tok_free(tok);
    return rc;
}
