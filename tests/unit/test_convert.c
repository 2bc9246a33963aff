/* test_convert.c — kernels/base/util.h's bf16 and fp16 conversions against an
 * independent reference written in double arithmetic (a value's nearest 16-bit
 * neighbour by rint, which rounds to nearest even): every fp16 value widened,
 * every bf16 value widened, and floats narrowed over a stride through all 2^32
 * bit patterns plus every rounding boundary of both formats (each midpoint and
 * its neighbours one float ulp away), infinities, NaNs and subnormals. Then the
 * host loops of kernels/cpu/host_act_cpu.c that use them (the offload engine's
 * host gradient shard: qf_cpu_act_add in each instruction-set slice this CPU
 * runs, qf_cpu_act_sumsq) against the same reference, element by element. */
#include "cpu/cpu_impl.h"
#include "ops.h"
#include "qf_test.h"
#include "util.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float f_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t u_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* reference widening: the value the format's bits stand for */
static double ref_f16_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0    ? ldexp(m, -24)
             : e == 31 ? (m ? NAN : INFINITY)
                       : ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

/* reference narrowing: nearest representable, ties to even (rint in double,
 * exact: v and its scaled form fit) */
static uint16_t ref_to_f16(float f) {
  const uint16_t sign = (u_of(f) >> 16) & 0x8000u;
  if (isnan(f))
    return sign | 0x7e00u;
  const double a = fabs((double)f);
  if (a >= 65520.0)
    return sign | 0x7c00u; /* 65504 + half an ulp (16): rounds up to infinity */
  int ex;
  frexp(a, &ex); /* a = m 2^ex, m in [0.5, 1): exponent ex - 1 */
  const int E = a == 0 ? -15 : ex - 1;
  if (E < -14)
    return sign |
           (uint16_t)rint(
               a / ldexp(1, -24)); /* subnormal (1024 = the smallest normal) */
  const double k = rint(a / ldexp(1, E - 10)); /* 1024..2048 */
  return sign |
         (uint16_t)(((E + 15) << 10) +
                    ((int)k - 1024)); /* 2048 carries into the exponent */
}
static uint16_t ref_to_bf16(float f) {
  const uint32_t u = u_of(f);
  if (isnan(f))
    return (uint16_t)((u >> 16) | 0x40u);
  const uint16_t sign = (u >> 16) & 0x8000u;
  const double a = fabs((double)f);
  if (isinf(f))
    return sign | 0x7f80u;
  int ex;
  frexp(a, &ex);
  const int E = a == 0 ? -127 : ex - 1;
  const int Ec =
      E < -126 ? -126 : E; /* subnormals share the smallest exponent's step */
  const double k = rint(
      a / ldexp(1, Ec - 7)); /* in units of the bf16 step at this exponent */
  const double r =
      k * ldexp(1, Ec - 7); /* the rounded value (may be 2^128: infinity) */
  if (r >= ldexp(1, 128))
    return sign | 0x7f80u;
  return (uint16_t)(sign | (u_of((float)r) >> 16));
}

static void test_widen(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    const float got = qf_f16_to_f32((uint16_t)h);
    const double want = ref_f16_value((uint16_t)h);
    const int ok =
        isnan(want)
            ? isnan(got) && (u_of(got) >> 13 & 0x3ffu) == (h & 0x3ffu) &&
                  (u_of(got) >> 31) == (h >> 15)
            : (double)got == want && !!signbit(got) == !!signbit(want);
    if (!ok && bad++ < 5)
      CHECK(0, "fp16 %04x widened to %08x", h, u_of(got));
    const float b = qf_bf16_to_f32((uint16_t)h);
    if (u_of(b) != h << 16 && bad++ < 5)
      CHECK(0, "bf16 %04x widened to %08x", h, u_of(b));
  }
  CHECK(bad == 0, "%d widenings differ from the reference", bad);
}

static int narrow_one(uint32_t u, int *bad) {
  const float f = f_of(u);
  const uint16_t h = qf_f32_to_f16(f), hr = ref_to_f16(f),
                 b = qf_f32_to_bf16(f), br = ref_to_bf16(f);
  if (h != hr && (*bad)++ < 5)
    CHECK(0, "float %08x to fp16: %04x, reference %04x", u, h, hr);
  if (b != br && (*bad)++ < 5)
    CHECK(0, "float %08x to bf16: %04x, reference %04x", u, b, br);
  return 1;
}

static void test_narrow(void) {
  int bad = 0;
  long n = 0;
  for (uint64_t u = 0; u < ((uint64_t)1 << 32); u += 1021)
    n += narrow_one((uint32_t)u, &bad);
  /* every fp16 rounding boundary: the midpoint between neighbours h and h + 1
   * (exact in float) and a float ulp either side, both signs; the same for bf16
   * (its midpoints: the float with the lower 16 bits 0x8000) */
  for (uint32_t h = 0; h < 0x7c00u; h++) {
    const float mid = (float)((ref_f16_value((uint16_t)h) +
                               ref_f16_value((uint16_t)(h + 1))) /
                              2);
    for (int d = -1; d <= 1; d++)
      for (int s = 0; s < 2; s++)
        n += narrow_one((u_of(mid) + (uint32_t)d) | (uint32_t)s << 31, &bad);
  }
  for (uint32_t b = 0; b < 0x7f80u; b++)
    for (int d = -1; d <= 1; d++)
      for (int s = 0; s < 2; s++)
        n += narrow_one(((b << 16) + 0x8000u + (uint32_t)d) | (uint32_t)s << 31,
                        &bad);
  const uint32_t special[] = {
      0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
      0x7fffffffu, 0x00000001u, 0x80000001u, 0x33000000u, 0x33000001u,
      0x477fe000u, 0x477fefffu, 0x477ff000u, 0x47800000u, 0x38800000u,
      0x387fffffu, 0x7f7fffffu, 0x00000000u};
  for (size_t i = 0; i < sizeof special / sizeof *special; i++)
    n += narrow_one(special[i], &bad);
  CHECK(bad == 0, "%d of %ld narrowings differ from the reference", bad, n);
}

/* the host loops: y += x elementwise in fp32 and rounded, against the
 * reference; the sum of squares (over finite values) against a double sum of
 * the reference values */
static void test_host_loops(void) {
  const size_t n = 100003; /* not a multiple of any vector width or chunk */
  uint16_t *x = malloc(n * 2), *y = malloc(n * 2), *y0 = malloc(n * 2);
  uint64_t r = 12345;
  for (int dt = QF_DT_BF16; dt <= QF_DT_F16; dt++) {
    for (size_t i = 0; i < n; i++) { /* every bit pattern class: random bits,
                                        then some small and special */
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      x[i] = (uint16_t)(r >> 33), y0[i] = (uint16_t)(r >> 17);
      if (i % 7 == 0)
        x[i] &= 0x83ffu; /* subnormals of fp16, tiny bf16 */
    }
    /* the default (this CPU's widest slice), then each slice this CPU can run
     * (baseline, AVX2 + F16C, AVX-512F) */
    const int best = cpu_have_f16c() ? cpu_adamw_best_isa() : 0;
    for (int isa = -1; isa <= best; isa++) {
          memcpy(y, y0, n * 2);
          if (isa < 0)
            qf_cpu_act_add(y, x, dt, n, 3);
          else
            cpu_act_add_variant(isa, y, x, dt, n, 3);
          int bad = 0;
          for (size_t i = 0; i < n; i++) {
            const double a = dt == QF_DT_F16 ? ref_f16_value(y0[i])
                                             : (double)f_of((uint32_t)y0[i] << 16);
            const double b = dt == QF_DT_F16 ? ref_f16_value(x[i])
                                             : (double)f_of((uint32_t)x[i] << 16);
            const float s =
                (float)a + (float)b; /* the fp32 sum, then one rounding */
            const uint16_t want = dt == QF_DT_F16 ? ref_to_f16(s) : ref_to_bf16(s);
            const int nan = dt == QF_DT_F16
                                ? (want & 0x7c00u) == 0x7c00u && (want & 0x3ffu)
                                : (want & 0x7f80u) == 0x7f80u && (want & 0x7fu);
            /* a NaN's payload is the FPU's choice: any NaN will do there */
            const int got_nan = dt == QF_DT_F16
                                    ? (y[i] & 0x7c00u) == 0x7c00u && (y[i] & 0x3ffu)
                                    : (y[i] & 0x7f80u) == 0x7f80u && (y[i] & 0x7fu);
            if (nan ? !got_nan : y[i] != want) {
              if (bad++ < 5)
                CHECK(
                    0,
                    "dtype %d slice %d element %zu: %04x + %04x = %04x, want %04x",
                    dt, isa, i, y0[i], x[i], y[i], want);
            }
          }
          CHECK(bad == 0, "dtype %d, slice %d: %d of %zu sums differ", dt, isa, bad,
            n);
    }
    if (dt == QF_DT_F16)
      printf("fp16 and bf16 adds checked in slices up to %d (0 baseline, 1 "
             "AVX2, 2 AVX-512F)\n",
             best);
    /* the sum of squares over finite values (NaN and infinity excluded from the
     * buffer first) */
    for (size_t i = 0; i < n; i++) {
      const int special = dt == QF_DT_F16 ? (y0[i] & 0x7c00u) == 0x7c00u
                                          : (y0[i] & 0x7f80u) == 0x7f80u;
      if (special)
        y0[i] = 0;
    }
    double ref = 0;
    for (size_t i = 0; i < n; i++) {
      const double a = dt == QF_DT_F16 ? ref_f16_value(y0[i])
                                       : (double)f_of((uint32_t)y0[i] << 16);
      ref += a * a;
    }
    const double got = qf_cpu_act_sumsq(y0, dt, n, 3);
    CHECK(fabs(got - ref) <= 1e-12 * ref,
          "dtype %d sum of squares %.17g, reference %.17g", dt, got, ref);
  }
  free(x), free(y), free(y0);
}

int main(void) {
  test_widen();
  test_narrow();
  test_host_loops();
  return qf_test_end("test_convert", NULL);
}
