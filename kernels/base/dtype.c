/* dtype.c — see dtype.h. */
#include "dtype.h"
#include <string.h>

int qf_dtype_parse(const char *s, qf_dtype *out) {
    if (!s) return -1;
    if (strcmp(s, "bf16") == 0) *out = QF_DT_BF16;
    else if (strcmp(s, "fp16") == 0) *out = QF_DT_F16;
    else if (strcmp(s, "fp32") == 0) *out = QF_DT_F32;
    else return -1;
    return 0;
}

const char *qf_dtype_name(qf_dtype t) {
    switch (t) {
    case QF_DT_BF16: return "bf16";
    case QF_DT_F16: return "fp16";
    case QF_DT_F32: return "fp32";
    }
    return "?";
}

size_t qf_dtype_size(qf_dtype t) { return t == QF_DT_F32 ? 4 : 2; }
