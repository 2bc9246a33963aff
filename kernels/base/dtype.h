/* dtype.h — the one element-type enum: what a stored tensor (io/h5io, safetensors) or an activation of an op table
 * (kernels/ops.h, act_dtype) holds. */
#ifndef QF_DTYPE_H
#define QF_DTYPE_H
#include <stddef.h>

typedef enum { QF_DT_F32 = 0, QF_DT_BF16 = 1, QF_DT_F16 = 2 } qf_dtype;

/* "bf16" | "fp16" | "fp32" -> qf_dtype; 0, or -1 on an unknown name (or NULL) */
int qf_dtype_parse(const char *s, qf_dtype *out);
/* "bf16" | "fp16" | "fp32" ("?" for a value outside the enum) */
const char *qf_dtype_name(qf_dtype t);
/* bytes per element: 4 or 2 */
size_t qf_dtype_size(qf_dtype t);

#endif
