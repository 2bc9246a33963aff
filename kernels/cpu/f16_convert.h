/* f16_convert.h — bf16 and fp16 <-> fp32 over a block of a host buffer, by instruction set, for the CPU kernels'
 * per-ISA slices (adamw_cpu.c: the offload AdamW; host_act_cpu.c: the host gradient add): always inlined into the
 * slice function that calls it, so that the compiler uses that function's instructions. bf16: plain C that
 * vectorises (a shift; nearest even, branch-free, NaN stays a quiet NaN as qf_f32_to_bf16). fp16: the baseline with
 * util.h's qf_f16_to_f32 / qf_f32_to_f16; F16C (8 a time) and AVX-512F (16) widen exactly and narrow to nearest
 * even with subnormals, the same bits (a NaN stays a NaN; its payload is the hardware's). QF_X86: the x86 slices
 * exist (GCC or clang on x86-64). */
#ifndef QF_F16_CONVERT_H
#define QF_F16_CONVERT_H
#include <stddef.h>
#include <stdint.h>
#include "util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define QF_X86 1
#else
#define QF_X86 0
#endif

static inline __attribute__((always_inline)) void bf16_widen(float *restrict dst, const uint16_t *restrict s, size_t n) {
    uint32_t *d = (uint32_t *)dst;
    for (size_t i = 0; i < n; i++) d[i] = (uint32_t)s[i] << 16;
}
static inline __attribute__((always_inline)) void bf16_narrow(uint16_t *restrict d, const float *restrict src,
                                                              size_t n) {
    const uint32_t *s = (const uint32_t *)src;
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = s[i];
        const uint16_t rounded = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        const uint16_t qnan = (uint16_t)((u >> 16) | 0x40u);
        d[i] = (u & 0x7fffffffu) > 0x7f800000u ? qnan : rounded;
    }
}
static inline __attribute__((always_inline)) void f16_widen_c(float *restrict d, const uint16_t *restrict s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = qf_f16_to_f32(s[i]);
}
static inline __attribute__((always_inline)) void f16_narrow_c(uint16_t *restrict d, const float *restrict s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = qf_f32_to_f16(s[i]);
}

#if QF_X86
#define F16C_ATTR __attribute__((target("avx2,f16c"), always_inline)) static inline
F16C_ATTR void f16_widen_f16c(float *restrict d, const uint16_t *restrict s, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++) d[i] = qf_f16_to_f32(s[i]);
}
F16C_ATTR void f16_narrow_f16c(uint16_t *restrict d, const float *restrict s, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) d[i] = qf_f32_to_f16(s[i]);
}
#define AVX512_ATTR __attribute__((target("avx512f,avx2,f16c"), always_inline)) static inline
AVX512_ATTR void f16_widen_avx512(float *restrict d, const uint16_t *restrict s, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
    f16_widen_f16c(d + i, s + i, n - i);
}
AVX512_ATTR void f16_narrow_avx512(uint16_t *restrict d, const float *restrict s, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    f16_narrow_f16c(d + i, s + i, n - i);
}
#endif

#endif
