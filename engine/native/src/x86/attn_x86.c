/* ai.amber.Attention's SIMD primitives: AVX2+FMA+F16C (8 floats) and AVX-512 (16 floats).
 * Compiled without -m flags: each function carries its own target attribute, and attn.c routes
 * here only when dispatch.c's ISA says the CPU has it. float16 converts with F16C (vcvtph2ps /
 * vcvtps2ph, round to nearest even, as the scalar path). */
#include "attn.h"

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define T2 __attribute__((target("avx2,fma,f16c")))
#define T5 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw")))

/* exp(x) for x <= 0 (clamped at -87): 2^n * p(r), |r| <= ln2/2, p Taylor to r^6 (rel. err ~2e-7). */
#define EXP_BODY(V, set1, max, mul, fmadd, fnmadd, round, cvt, add_i, slli, cast_f)                  \
    x = max(x, set1(-87.0f));                                                                  \
    V nf = round(mul(x, set1(1.44269504f)));                                                   \
    V r = fnmadd(nf, set1(0.693145752f), x);                                                   \
    r = fnmadd(nf, set1(1.42860677e-6f), r);                                                   \
    V p = set1(1.0f / 720);                                                                    \
    p = fmadd(p, r, set1(1.0f / 120));                                                         \
    p = fmadd(p, r, set1(1.0f / 24));                                                          \
    p = fmadd(p, r, set1(1.0f / 6));                                                           \
    p = fmadd(p, r, set1(0.5f));                                                               \
    p = fmadd(p, r, set1(1.0f));                                                               \
    p = fmadd(p, r, set1(1.0f));                                                               \
    return mul(p, cast_f(slli(add_i(cvt(nf), 127), 23)));

static float exp1(float x) { return expf(x); }

/* ---------------- AVX2 ---------------- */

static inline T2 __m256 exp8(__m256 x) {
#define R8(v) _mm256_round_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define ADD8(i, c) _mm256_add_epi32((i), _mm256_set1_epi32(c))
    EXP_BODY(__m256, _mm256_set1_ps, _mm256_max_ps, _mm256_mul_ps, _mm256_fmadd_ps, _mm256_fnmadd_ps, R8,
             _mm256_cvtps_epi32, ADD8, _mm256_slli_epi32, _mm256_castsi256_ps)
#undef R8
#undef ADD8
}

static inline T2 __m128 hsum4x8(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
    __m256 c = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
    return _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
}

static T2 void to_float8(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = _cvtsh_ss(src[i]);
}

static T2 void to_half8(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

static inline T2 float dot8(const float *q, const float *k, int64_t d) {
    __m256 s = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= d; i += 8)
        s = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), s);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_hadd_ps(h, h);
    float r = _mm_cvtss_f32(_mm_hadd_ps(h, h));
    for (; i < d; i++)
        r += q[i] * k[i];
    return r;
}

static T2 void dots8(const float *q, const float *k, int64_t n, int64_t d, float *out) {
    int64_t j = 0;
    if (d % 8 == 0)
        for (; j + 4 <= n; j += 4) {
            const float *k0 = k + j * d;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t i = 0; i < d; i += 8) {
                __m256 x = _mm256_loadu_ps(q + i);
                a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k0 + i), a0);
                a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k0 + d + i), a1);
                a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k0 + 2 * d + i), a2);
                a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k0 + 3 * d + i), a3);
            }
            _mm_storeu_ps(out + j, hsum4x8(a0, a1, a2, a3));
        }
    for (; j < n; j++)
        out[j] = dot8(q, k + j * d, d);
}

static T2 void accum8(float *acc, float c, const float *p, const float *v, int64_t n, int64_t d) {
    int64_t i = 0;
    __m256 cv = _mm256_set1_ps(c);
    for (; i + 32 <= d; i += 32) {   /* 4 registers of the accumulator across all n keys */
        __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc + i), cv), a1 = _mm256_mul_ps(_mm256_loadu_ps(acc + i + 8), cv);
        __m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(acc + i + 16), cv);
        __m256 a3 = _mm256_mul_ps(_mm256_loadu_ps(acc + i + 24), cv);
        for (int64_t j = 0; j < n; j++) {
            __m256 pj = _mm256_set1_ps(p[j]);
            const float *vj = v + j * d + i;
            a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj), a0);
            a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8), a1);
            a2 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 16), a2);
            a3 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 24), a3);
        }
        _mm256_storeu_ps(acc + i, a0);
        _mm256_storeu_ps(acc + i + 8, a1);
        _mm256_storeu_ps(acc + i + 16, a2);
        _mm256_storeu_ps(acc + i + 24, a3);
    }
    for (; i + 8 <= d; i += 8) {
        __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc + i), cv);
        for (int64_t j = 0; j < n; j++)
            a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(v + j * d + i), a0);
        _mm256_storeu_ps(acc + i, a0);
    }
    for (; i < d; i++) {
        float a = acc[i] * c;
        for (int64_t j = 0; j < n; j++)
            a += p[j] * v[j * d + i];
        acc[i] = a;
    }
}

static T2 float exp_sum8(float *s, int64_t n, float m) {
    __m256 mv = _mm256_set1_ps(m), tot = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
        _mm256_storeu_ps(s + j, e);
        tot = _mm256_add_ps(tot, e);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(tot), _mm256_extractf128_ps(tot, 1));
    h = _mm_hadd_ps(h, h);
    float r = _mm_cvtss_f32(_mm_hadd_ps(h, h));
    for (; j < n; j++) {
        s[j] = exp1(s[j] - m);
        r += s[j];
    }
    return r;
}

static inline T2 float hmax8(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
}

/* The online-softmax update of one row (as softmax_row below, 8 lanes at a time). */
static inline T2 float softmax_row8(const attn_block *b, int64_t r, float *pr) {
    const int64_t a0 = b->a0[r], a1 = b->a1[r];
    if (a1 <= a0) {
        memset(pr, 0, KB_T * sizeof *pr);
        return 1.0f;
    }
    const __m256 iota = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), ninf = _mm256_set1_ps(-INFINITY);
    const __m256 lo = _mm256_set1_ps((float)a0), hi = _mm256_set1_ps((float)a1);
    __m256 mx = ninf, valid[8];
    for (int c = 0; c < 8; c++) {
        const __m256 j = _mm256_add_ps(iota, _mm256_set1_ps((float)(8 * c)));
        valid[c] = _mm256_and_ps(_mm256_cmp_ps(j, lo, _CMP_GE_OQ), _mm256_cmp_ps(j, hi, _CMP_LT_OQ));
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, _mm256_load_ps(pr + 8 * c), valid[c]));
    }
    const float bm = hmax8(mx);
    const float nm = bm > b->mx[r] ? bm : b->mx[r];
    const float corr = b->mx[r] == -INFINITY ? 0.0f : exp1(b->mx[r] - nm);
    const __m256 mv = _mm256_set1_ps(nm);
    __m256 tot = _mm256_setzero_ps();
    for (int c = 0; c < 8; c++) {
        const __m256 e = _mm256_and_ps(valid[c], exp8(_mm256_sub_ps(_mm256_load_ps(pr + 8 * c), mv)));
        _mm256_store_ps(pr + 8 * c, e);
        tot = _mm256_add_ps(tot, e);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(tot), _mm256_extractf128_ps(tot, 1));
    h = _mm_hadd_ps(h, h);
    b->sum[r] = b->sum[r] * corr + _mm_cvtss_f32(_mm_hadd_ps(h, h));
    b->mx[r] = nm;
    return corr;
}

/* The block update at AVX2 width (16 registers): two query vectors per pass; scores 32 keys at a
 * time (8 accumulators), weighted values 32 dims at a time, both rows sharing each load. */
static T2 void block8(const attn_block *b) {
    const int64_t d = b->d, n = b->n;
    float p[2][KB_T] __attribute__((aligned(32)));
    for (int64_t r0 = 0; r0 < b->nr; r0 += 2) {
        const int64_t rows = r0 + 1 < b->nr ? 2 : 1, r1 = r0 + rows - 1;
        const float *q0 = b->qs + r0 * d, *q1 = b->qs + r1 * d;
        for (int64_t h = 0; h < KB_T; h += 32) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, e0 = a0, e1 = a0, e2 = a0, e3 = a0;
            for (int64_t i = 0; i < d; i++) {
                const float *k = b->kt + i * KB_T + h;
                const __m256 x0 = _mm256_set1_ps(q0[i]), x1 = _mm256_set1_ps(q1[i]);
                const __m256 k0 = _mm256_loadu_ps(k), k1 = _mm256_loadu_ps(k + 8);
                const __m256 k2 = _mm256_loadu_ps(k + 16), k3 = _mm256_loadu_ps(k + 24);
                a0 = _mm256_fmadd_ps(x0, k0, a0);
                a1 = _mm256_fmadd_ps(x0, k1, a1);
                a2 = _mm256_fmadd_ps(x0, k2, a2);
                a3 = _mm256_fmadd_ps(x0, k3, a3);
                e0 = _mm256_fmadd_ps(x1, k0, e0);
                e1 = _mm256_fmadd_ps(x1, k1, e1);
                e2 = _mm256_fmadd_ps(x1, k2, e2);
                e3 = _mm256_fmadd_ps(x1, k3, e3);
            }
            _mm256_store_ps(p[0] + h, a0);
            _mm256_store_ps(p[0] + h + 8, a1);
            _mm256_store_ps(p[0] + h + 16, a2);
            _mm256_store_ps(p[0] + h + 24, a3);
            _mm256_store_ps(p[1] + h, e0);
            _mm256_store_ps(p[1] + h + 8, e1);
            _mm256_store_ps(p[1] + h + 16, e2);
            _mm256_store_ps(p[1] + h + 24, e3);
        }
        const float c0s = softmax_row8(b, r0, p[0]);
        const float c1s = rows == 2 ? softmax_row8(b, r1, p[1]) : c0s;
        const float *p1 = p[rows - 1];
        float *acc0 = b->acc + r0 * d, *acc1 = b->acc + r1 * d;
        const __m256 c0 = _mm256_set1_ps(c0s), c1 = _mm256_set1_ps(c1s);
        int64_t i0 = 0;
        for (; i0 + 32 <= d; i0 += 32) {
            __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc0 + i0), c0), a1 = _mm256_mul_ps(_mm256_loadu_ps(acc0 + i0 + 8), c0);
            __m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(acc0 + i0 + 16), c0);
            __m256 a3 = _mm256_mul_ps(_mm256_loadu_ps(acc0 + i0 + 24), c0);
            __m256 e0 = _mm256_mul_ps(_mm256_loadu_ps(acc1 + i0), c1), e1 = _mm256_mul_ps(_mm256_loadu_ps(acc1 + i0 + 8), c1);
            __m256 e2 = _mm256_mul_ps(_mm256_loadu_ps(acc1 + i0 + 16), c1);
            __m256 e3 = _mm256_mul_ps(_mm256_loadu_ps(acc1 + i0 + 24), c1);
            for (int64_t j = 0; j < n; j++) {
                const float *vj = b->vf + j * d + i0;
                const __m256 w0 = _mm256_set1_ps(p[0][j]), w1 = _mm256_set1_ps(p1[j]);
                const __m256 v0 = _mm256_loadu_ps(vj), v1 = _mm256_loadu_ps(vj + 8);
                const __m256 v2 = _mm256_loadu_ps(vj + 16), v3 = _mm256_loadu_ps(vj + 24);
                a0 = _mm256_fmadd_ps(w0, v0, a0);
                a1 = _mm256_fmadd_ps(w0, v1, a1);
                a2 = _mm256_fmadd_ps(w0, v2, a2);
                a3 = _mm256_fmadd_ps(w0, v3, a3);
                e0 = _mm256_fmadd_ps(w1, v0, e0);
                e1 = _mm256_fmadd_ps(w1, v1, e1);
                e2 = _mm256_fmadd_ps(w1, v2, e2);
                e3 = _mm256_fmadd_ps(w1, v3, e3);
            }
            if (rows == 2) {   /* acc1 is acc0 for a lone last row */
                _mm256_storeu_ps(acc1 + i0, e0);
                _mm256_storeu_ps(acc1 + i0 + 8, e1);
                _mm256_storeu_ps(acc1 + i0 + 16, e2);
                _mm256_storeu_ps(acc1 + i0 + 24, e3);
            }
            _mm256_storeu_ps(acc0 + i0, a0);
            _mm256_storeu_ps(acc0 + i0 + 8, a1);
            _mm256_storeu_ps(acc0 + i0 + 16, a2);
            _mm256_storeu_ps(acc0 + i0 + 24, a3);
        }
        for (; i0 < d; i0 += 8) {   /* d % 32 of 8, 16 or 24 (d is a multiple of 16 here) */
            __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc0 + i0), c0), e0 = _mm256_mul_ps(_mm256_loadu_ps(acc1 + i0), c1);
            for (int64_t j = 0; j < n; j++) {
                const __m256 v0 = _mm256_loadu_ps(b->vf + j * d + i0);
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[0][j]), v0, a0);
                e0 = _mm256_fmadd_ps(_mm256_set1_ps(p1[j]), v0, e0);
            }
            if (rows == 2)
                _mm256_storeu_ps(acc1 + i0, e0);
            _mm256_storeu_ps(acc0 + i0, a0);
        }
    }
}

/* ---------------- AVX2, decode: the query rows of one KV group share one key range ---------------- */

/* dot8 on one float16 key (converted in a register: the same floats as to_float8's). */
static inline T2 float dot8h8(const float *q, const uint16_t *k, int64_t d) {
    __m256 s = _mm256_setzero_ps();
    for (int64_t i = 0; i < d; i += 8)
        s = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))), s);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

/* NR (<= 3) query rows against m keys/values read as float16 (kh, vh: [m][d], d % 16 == 0): per row
 * what attn.c's row loop does with dots8, its max, exp_sum8 and accum8, in the same order, so the
 * same bits; each key and value is converted once for the NR rows, in registers (the row loop
 * converts the block into memory, then reads it back once a row). Three rows by four keys fill the
 * 16 registers (12 sums, 4 keys; the query is an FMA's memory operand). */
static inline T2 void group8_t(const int NR, const uint16_t *kh, const uint16_t *vh, int64_t m, int64_t d,
                               const float *qs, float *acc, float *mx, float *sum, float *sc) {
    int64_t j = 0;
    for (; j + 4 <= m; j += 4) {   /* dots8's groups of four keys */
        __m256 a[3][4];
        for (int r = 0; r < NR; r++)
            for (int t = 0; t < 4; t++) a[r][t] = _mm256_setzero_ps();
        for (int64_t i = 0; i < d; i += 8) {
            __m256 k[4];
            for (int t = 0; t < 4; t++)
                k[t] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kh + (j + t) * d + i)));
            for (int r = 0; r < NR; r++)
                for (int t = 0; t < 4; t++) a[r][t] = _mm256_fmadd_ps(_mm256_loadu_ps(qs + r * d + i), k[t], a[r][t]);
        }
        for (int r = 0; r < NR; r++)
            _mm_storeu_ps(sc + r * KB_T + j, hsum4x8(a[r][0], a[r][1], a[r][2], a[r][3]));
    }
    for (; j < m; j++)
        for (int r = 0; r < NR; r++) sc[r * KB_T + j] = dot8h8(qs + r * d, kh + j * d, d);
    float corr[3];
    for (int r = 0; r < NR; r++) {
        float *s = sc + r * KB_T;
        float bm = s[0];   /* the row loop's max, as it takes it */
        for (int64_t jj = 1; jj < m; jj++)
            bm = s[jj] > bm ? s[jj] : bm;
        const float nm = bm > mx[r] ? bm : mx[r];
        corr[r] = mx[r] == -INFINITY ? 0.0f : exp1(mx[r] - nm);
        const float ps = exp_sum8(s, m, nm);
        sum[r] = sum[r] * corr[r] + ps;
        mx[r] = nm;
    }
    for (int64_t i = 0; i < d; i += 16) {   /* accum8's lanes, 16 dims of every row at a time */
        __m256 a[3][2];
        for (int r = 0; r < NR; r++) {
            const __m256 c = _mm256_set1_ps(corr[r]);
            for (int t = 0; t < 2; t++) a[r][t] = _mm256_mul_ps(_mm256_loadu_ps(acc + r * d + i + 8 * t), c);
        }
        for (int64_t jj = 0; jj < m; jj++) {
            __m256 v[2];
            for (int t = 0; t < 2; t++)
                v[t] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vh + jj * d + i + 8 * t)));
            for (int r = 0; r < NR; r++) {
                const __m256 p = _mm256_set1_ps(sc[r * KB_T + jj]);
                for (int t = 0; t < 2; t++) a[r][t] = _mm256_fmadd_ps(p, v[t], a[r][t]);
            }
        }
        for (int r = 0; r < NR; r++)
            for (int t = 0; t < 2; t++) _mm256_storeu_ps(acc + r * d + i + 8 * t, a[r][t]);
    }
}

static T2 void group8(const uint16_t *kh, const uint16_t *vh, int64_t m, int64_t d, int64_t nr,
                      const float *qs, float *acc, float *mx, float *sum, float *sc) {
    for (int64_t r0 = 0; r0 < nr; r0 += 3) {
        const int64_t o = r0 * d;
        switch (nr - r0 < 3 ? nr - r0 : 3) {
        case 1: group8_t(1, kh, vh, m, d, qs + o, acc + o, mx + r0, sum + r0, sc); break;
        case 2: group8_t(2, kh, vh, m, d, qs + o, acc + o, mx + r0, sum + r0, sc); break;
        default: group8_t(3, kh, vh, m, d, qs + o, acc + o, mx + r0, sum + r0, sc); break;
        }
    }
}

static const attn_ops AVX2 = {to_float8, to_half8, dots8, accum8, exp_sum8, block8, group8, NULL};
const attn_ops *attn_ops_avx2(void) { return &AVX2; }

/* ---------------- AVX-512 ---------------- */

static inline T5 __m512 exp16(__m512 x) {
#define R16(v) _mm512_roundscale_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define ADD16(i, c) _mm512_add_epi32((i), _mm512_set1_epi32(c))
    EXP_BODY(__m512, _mm512_set1_ps, _mm512_max_ps, _mm512_mul_ps, _mm512_fmadd_ps, _mm512_fnmadd_ps, R16,
             _mm512_cvtps_epi32, ADD16, _mm512_slli_epi32, _mm512_castsi512_ps)
#undef R16
#undef ADD16
}

static inline T5 __m256 half512(__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

static T5 void to_float16(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++)
        dst[i] = _cvtsh_ss(src[i]);
}

static T5 void to_half16(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++)
        dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

static T5 void dots16(const float *q, const float *k, int64_t n, int64_t d, float *out) {
    if (d % 16 != 0) {
        dots8(q, k, n, d, out);
        return;
    }
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *k0 = k + j * d;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t i = 0; i < d; i += 16) {
            __m512 x = _mm512_loadu_ps(q + i);
            a0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(k0 + i), a0);
            a1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(k0 + d + i), a1);
            a2 = _mm512_fmadd_ps(x, _mm512_loadu_ps(k0 + 2 * d + i), a2);
            a3 = _mm512_fmadd_ps(x, _mm512_loadu_ps(k0 + 3 * d + i), a3);
        }
        _mm_storeu_ps(out + j, hsum4x8(half512(a0), half512(a1), half512(a2), half512(a3)));
    }
    for (; j < n; j++)
        out[j] = dot8(q, k + j * d, d);
}

static T5 void accum16(float *acc, float c, const float *p, const float *v, int64_t n, int64_t d) {
    if (d % 16 != 0) {
        accum8(acc, c, p, v, n, d);
        return;
    }
    int64_t i = 0;
    __m512 cv = _mm512_set1_ps(c);
    for (; i + 64 <= d; i += 64) {
        __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(acc + i), cv), a1 = _mm512_mul_ps(_mm512_loadu_ps(acc + i + 16), cv);
        __m512 a2 = _mm512_mul_ps(_mm512_loadu_ps(acc + i + 32), cv);
        __m512 a3 = _mm512_mul_ps(_mm512_loadu_ps(acc + i + 48), cv);
        for (int64_t j = 0; j < n; j++) {
            __m512 pj = _mm512_set1_ps(p[j]);
            const float *vj = v + j * d + i;
            a0 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj), a0);
            a1 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 16), a1);
            a2 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 32), a2);
            a3 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 48), a3);
        }
        _mm512_storeu_ps(acc + i, a0);
        _mm512_storeu_ps(acc + i + 16, a1);
        _mm512_storeu_ps(acc + i + 32, a2);
        _mm512_storeu_ps(acc + i + 48, a3);
    }
    for (; i + 16 <= d; i += 16) {
        __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(acc + i), cv);
        for (int64_t j = 0; j < n; j++)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_loadu_ps(v + j * d + i), a0);
        _mm512_storeu_ps(acc + i, a0);
    }
}

static T5 float exp_sum16(float *s, int64_t n, float m) {
    __m512 mv = _mm512_set1_ps(m), tot = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv));
        _mm512_storeu_ps(s + j, e);
        tot = _mm512_add_ps(tot, e);
    }
    float r = _mm512_reduce_add_ps(tot);
    if (j < n) {   /* the tail, masked */
        __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), mv));
        _mm512_mask_storeu_ps(s + j, k, e);
        r += _mm512_mask_reduce_add_ps(k, e);
    }
    return r;
}

/* Scores of two query vectors against the block's 64 transposed keys: 8 accumulators, each step
 * 4 loads of kt, 2 broadcasts, 8 FMAs (no horizontal sums). Then per row the masked online-softmax
 * update, and the weighted values 64 dims at a time, both rows sharing every load of vf. */
/* The online-softmax update of one row from its 64 scores in pr (overwritten with the
 * probabilities; zeros outside [a0, a1)); returns the factor the row's accumulator takes. */
static inline T5 float softmax_row(const attn_block *b, int64_t r, float *pr) {
    const int64_t a0 = b->a0[r], a1 = b->a1[r];
    if (a1 <= a0) {   /* no key of this block is visible to the row */
        memset(pr, 0, KB_T * sizeof *pr);
        return 1.0f;
    }
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 lo = _mm512_set1_ps((float)a0), hi = _mm512_set1_ps((float)a1);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    __mmask16 m[4];
    for (int c = 0; c < 4; c++) {
        const __m512 j = _mm512_add_ps(iota, _mm512_set1_ps((float)(16 * c)));
        m[c] = _mm512_cmp_ps_mask(j, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(j, hi, _CMP_LT_OQ);
        mx = _mm512_mask_max_ps(mx, m[c], mx, _mm512_load_ps(pr + 16 * c));
    }
    const float bm = _mm512_reduce_max_ps(mx);
    const float nm = bm > b->mx[r] ? bm : b->mx[r];
    const float corr = b->mx[r] == -INFINITY ? 0.0f : exp1(b->mx[r] - nm);
    const __m512 mv = _mm512_set1_ps(nm);
    __m512 tot = _mm512_setzero_ps();
    for (int c = 0; c < 4; c++) {
        const __m512 e = _mm512_maskz_mov_ps(m[c], exp16(_mm512_sub_ps(_mm512_load_ps(pr + 16 * c), mv)));
        _mm512_store_ps(pr + 16 * c, e);
        tot = _mm512_add_ps(tot, e);
    }
    b->sum[r] = b->sum[r] * corr + _mm512_reduce_add_ps(tot);
    b->mx[r] = nm;
    return corr;
}

/* Four query vectors per pass (the last pass repeats its last row and stores only the real ones):
 * scores against the 64 transposed keys, 16 accumulators, each step 4 loads of kt + 4 broadcasts
 * for 16 FMAs; then the softmax update per row; then the weighted values 64 dims at a time, the
 * 4 rows sharing every load of vf (no horizontal sums anywhere). */
#define FMA4(acc, x, v0, v1, v2, v3)                \
    acc##0 = _mm512_fmadd_ps((x), (v0), acc##0);    \
    acc##1 = _mm512_fmadd_ps((x), (v1), acc##1);    \
    acc##2 = _mm512_fmadd_ps((x), (v2), acc##2);    \
    acc##3 = _mm512_fmadd_ps((x), (v3), acc##3)
#define ZERO4(acc) __m512 acc##0 = _mm512_setzero_ps(), acc##1 = acc##0, acc##2 = acc##0, acc##3 = acc##0
#define STORE4(ptr, acc)                       \
    _mm512_storeu_ps((ptr), acc##0);           \
    _mm512_storeu_ps((ptr) + 16, acc##1);      \
    _mm512_storeu_ps((ptr) + 32, acc##2);      \
    _mm512_storeu_ps((ptr) + 48, acc##3)
#define LOAD4(acc, ptr, c)                                              \
    __m512 acc##0 = _mm512_mul_ps(_mm512_loadu_ps(ptr), (c));           \
    __m512 acc##1 = _mm512_mul_ps(_mm512_loadu_ps((ptr) + 16), (c));    \
    __m512 acc##2 = _mm512_mul_ps(_mm512_loadu_ps((ptr) + 32), (c));    \
    __m512 acc##3 = _mm512_mul_ps(_mm512_loadu_ps((ptr) + 48), (c))

static T5 void block16(const attn_block *b) {
    const int64_t d = b->d, n = b->n;
    float p[4][KB_T] __attribute__((aligned(64)));   /* scores, then probabilities, per row */
    for (int64_t r0 = 0; r0 < b->nr; r0 += 4) {
        const int64_t rows = b->nr - r0 < 4 ? b->nr - r0 : 4;
        int64_t rr[4];
        for (int k = 0; k < 4; k++)
            rr[k] = r0 + (k < rows ? k : rows - 1);
        const float *q0 = b->qs + rr[0] * d, *q1 = b->qs + rr[1] * d, *q2 = b->qs + rr[2] * d,
                    *q3 = b->qs + rr[3] * d;
        ZERO4(sa);
        ZERO4(sb);
        ZERO4(sc);
        ZERO4(sd);
        for (int64_t i = 0; i < d; i++) {
            const float *k = b->kt + i * KB_T;
            const __m512 k0 = _mm512_loadu_ps(k), k1 = _mm512_loadu_ps(k + 16);
            const __m512 k2 = _mm512_loadu_ps(k + 32), k3 = _mm512_loadu_ps(k + 48);
            FMA4(sa, _mm512_set1_ps(q0[i]), k0, k1, k2, k3);
            FMA4(sb, _mm512_set1_ps(q1[i]), k0, k1, k2, k3);
            FMA4(sc, _mm512_set1_ps(q2[i]), k0, k1, k2, k3);
            FMA4(sd, _mm512_set1_ps(q3[i]), k0, k1, k2, k3);
        }
        STORE4(p[0], sa);
        STORE4(p[1], sb);
        STORE4(p[2], sc);
        STORE4(p[3], sd);
        float corr[4];
        for (int k = 0; k < 4; k++)
            corr[k] = k < rows ? softmax_row(b, rr[k], p[k]) : corr[rows - 1];
        float *acc0 = b->acc + rr[0] * d, *acc1 = b->acc + rr[1] * d, *acc2 = b->acc + rr[2] * d,
              *acc3 = b->acc + rr[3] * d;
        const __m512 c0 = _mm512_set1_ps(corr[0]), c1 = _mm512_set1_ps(corr[1]);
        const __m512 c2 = _mm512_set1_ps(corr[2]), c3 = _mm512_set1_ps(corr[3]);
        const float *p0 = p[0], *p1 = p[rows > 1 ? 1 : 0], *p2 = p[rows > 2 ? 2 : rows - 1],
                    *p3 = p[rows > 3 ? 3 : rows - 1];
        int64_t i0 = 0;
        for (; i0 + 64 <= d; i0 += 64) {
            LOAD4(a, acc0 + i0, c0);
            LOAD4(e, acc1 + i0, c1);
            LOAD4(f, acc2 + i0, c2);
            LOAD4(g, acc3 + i0, c3);
            for (int64_t j = 0; j < n; j++) {
                const float *vj = b->vf + j * d + i0;
                const __m512 v0 = _mm512_loadu_ps(vj), v1 = _mm512_loadu_ps(vj + 16);
                const __m512 v2 = _mm512_loadu_ps(vj + 32), v3 = _mm512_loadu_ps(vj + 48);
                FMA4(a, _mm512_set1_ps(p0[j]), v0, v1, v2, v3);
                FMA4(e, _mm512_set1_ps(p1[j]), v0, v1, v2, v3);
                FMA4(f, _mm512_set1_ps(p2[j]), v0, v1, v2, v3);
                FMA4(g, _mm512_set1_ps(p3[j]), v0, v1, v2, v3);
            }
            /* repeated rows alias a real one: store the real rows last-to-first so row rr[k]'s own
             * values are the ones that stay (the repeats hold the same values anyway) */
            STORE4(acc3 + i0, g);
            STORE4(acc2 + i0, f);
            STORE4(acc1 + i0, e);
            STORE4(acc0 + i0, a);
        }
        for (; i0 < d; i0 += 16) {   /* d % 64 of 16, 32 or 48 */
            __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(acc0 + i0), c0);
            __m512 e0 = _mm512_mul_ps(_mm512_loadu_ps(acc1 + i0), c1);
            __m512 f0 = _mm512_mul_ps(_mm512_loadu_ps(acc2 + i0), c2);
            __m512 g0 = _mm512_mul_ps(_mm512_loadu_ps(acc3 + i0), c3);
            for (int64_t j = 0; j < n; j++) {
                const __m512 v0 = _mm512_loadu_ps(b->vf + j * d + i0);
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(p0[j]), v0, a0);
                e0 = _mm512_fmadd_ps(_mm512_set1_ps(p1[j]), v0, e0);
                f0 = _mm512_fmadd_ps(_mm512_set1_ps(p2[j]), v0, f0);
                g0 = _mm512_fmadd_ps(_mm512_set1_ps(p3[j]), v0, g0);
            }
            _mm512_storeu_ps(acc3 + i0, g0);
            _mm512_storeu_ps(acc2 + i0, f0);
            _mm512_storeu_ps(acc1 + i0, e0);
            _mm512_storeu_ps(acc0 + i0, a0);
        }
    }
}

/* ---------------- AVX-512, decode: the query rows of one KV group share one key range ---------------- */

/* dot8 (the tail of dots16) on one float16 key: the same 8-lane FMAs and horizontal sums. */
static inline T5 float dot8h(const float *q, const uint16_t *k, int64_t d) {
    __m256 s = _mm256_setzero_ps();
    for (int64_t i = 0; i < d; i += 8)
        s = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))), s);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

/* The scalar loop's max (the first score, then every later one that is greater): NaN when the first
 * is NaN, else the greatest of the others that are not NaN (a zero's sign may differ; exp of the
 * difference does not see it). */
static inline T5 float max_scores(const float *s, int64_t m) {
    if (s[0] != s[0])
        return s[0];
    __m512 mx = _mm512_set1_ps(s[0]);
    int64_t j = 0;
    for (; j + 16 <= m; j += 16) {
        const __m512 v = _mm512_loadu_ps(s + j);
        mx = _mm512_mask_max_ps(mx, _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), mx, v);
    }
    if (j < m) {
        const __mmask16 k = (__mmask16)((1u << (m - j)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(k, s + j);
        mx = _mm512_mask_max_ps(mx, k & _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), mx, v);
    }
    return _mm512_reduce_max_ps(mx);
}

/* NR (<= 4) query rows against m keys/values read as float16 (kh, vh: [m][d], d % 16 == 0): per
 * row what attn.c's row loop does with dots16, the max, exp_sum16 and accum16, in the same order,
 * so the same bits; each key and value is converted once for the NR rows, in registers (the row
 * loop converts the block into memory, then reads it back once a row). */
static inline T5 void group16_t(const int NR, const uint16_t *kh, const uint16_t *vh, int64_t m, int64_t d,
                                const float *qs, float *acc, float *mx, float *sum, float *sc) {
    int64_t j = 0;
    for (; j + 4 <= m; j += 4) {   /* dots16's groups of four keys */
        __m512 a[4][4];
        for (int r = 0; r < NR; r++)
            for (int t = 0; t < 4; t++) a[r][t] = _mm512_setzero_ps();
        for (int64_t i = 0; i < d; i += 16) {
            __m512 k[4];
            for (int t = 0; t < 4; t++)
                k[t] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kh + (j + t) * d + i)));
            for (int r = 0; r < NR; r++) {
                const __m512 x = _mm512_loadu_ps(qs + r * d + i);
                for (int t = 0; t < 4; t++) a[r][t] = _mm512_fmadd_ps(x, k[t], a[r][t]);
            }
        }
        for (int r = 0; r < NR; r++)
            _mm_storeu_ps(sc + r * KB_T + j,
                          hsum4x8(half512(a[r][0]), half512(a[r][1]), half512(a[r][2]), half512(a[r][3])));
    }
    for (; j < m; j++)
        for (int r = 0; r < NR; r++) sc[r * KB_T + j] = dot8h(qs + r * d, kh + j * d, d);
    float corr[4];
    for (int r = 0; r < NR; r++) {
        float *s = sc + r * KB_T;
        const float bm = max_scores(s, m);
        const float nm = bm > mx[r] ? bm : mx[r];
        corr[r] = mx[r] == -INFINITY ? 0.0f : exp1(mx[r] - nm);
        const float ps = exp_sum16(s, m, nm);
        sum[r] = sum[r] * corr[r] + ps;
        mx[r] = nm;
    }
    int64_t i = 0;
    for (; i + 64 <= d; i += 64) {   /* accum16's 64 dims at a time */
        __m512 a[4][4];
        for (int r = 0; r < NR; r++) {
            const __m512 c = _mm512_set1_ps(corr[r]);
            for (int t = 0; t < 4; t++) a[r][t] = _mm512_mul_ps(_mm512_loadu_ps(acc + r * d + i + 16 * t), c);
        }
        for (int64_t jj = 0; jj < m; jj++) {
            __m512 v[4];
            for (int t = 0; t < 4; t++)
                v[t] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vh + jj * d + i + 16 * t)));
            for (int r = 0; r < NR; r++) {
                const __m512 p = _mm512_set1_ps(sc[r * KB_T + jj]);
                for (int t = 0; t < 4; t++) a[r][t] = _mm512_fmadd_ps(p, v[t], a[r][t]);
            }
        }
        for (int r = 0; r < NR; r++)
            for (int t = 0; t < 4; t++) _mm512_storeu_ps(acc + r * d + i + 16 * t, a[r][t]);
    }
    for (; i + 16 <= d; i += 16) {
        __m512 a[4];
        for (int r = 0; r < NR; r++) a[r] = _mm512_mul_ps(_mm512_loadu_ps(acc + r * d + i), _mm512_set1_ps(corr[r]));
        for (int64_t jj = 0; jj < m; jj++) {
            const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vh + jj * d + i)));
            for (int r = 0; r < NR; r++) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(sc[r * KB_T + jj]), v, a[r]);
        }
        for (int r = 0; r < NR; r++) _mm512_storeu_ps(acc + r * d + i, a[r]);
    }
}

static T5 void group16(const uint16_t *kh, const uint16_t *vh, int64_t m, int64_t d, int64_t nr,
                       const float *qs, float *acc, float *mx, float *sum, float *sc) {
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
        const int64_t o = r0 * d;
        switch (nr - r0 < 4 ? nr - r0 : 4) {
        case 1: group16_t(1, kh, vh, m, d, qs + o, acc + o, mx + r0, sum + r0, sc); break;
        case 2: group16_t(2, kh, vh, m, d, qs + o, acc + o, mx + r0, sum + r0, sc); break;
        case 3: group16_t(3, kh, vh, m, d, qs + o, acc + o, mx + r0, sum + r0, sc); break;
        default: group16_t(4, kh, vh, m, d, qs + o, acc + o, mx + r0, sum + r0, sc); break;
        }
    }
}

/* 16 x 16 floats transposed in registers: unpack pairs of rows, then 4 x 4 blocks within each
 * 128-bit lane (r[4i + c], lane L: column 4L + c of rows 4i..4i+3), then the lanes gathered. */
static inline T5 void transpose16x16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        const __m512 x = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), y = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
        const __m512 z = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        const __m512 w = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
        t[c] = _mm512_shuffle_f32x4(x, z, 0x88);
        t[4 + c] = _mm512_shuffle_f32x4(y, w, 0x88);
        t[8 + c] = _mm512_shuffle_f32x4(x, z, 0xDD);
        t[12 + c] = _mm512_shuffle_f32x4(y, w, 0xDD);
    }
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

/* The block kernel's keys (attn.h keys_t): 16 keys x 16 dims at a time, converted and transposed
 * in registers instead of element by element through memory. */
static T5 void keys_t16(const uint16_t *kh, int64_t n, int64_t d, float *kt) {
    for (int64_t j0 = 0; j0 < KB_T; j0 += 16)
        for (int64_t i0 = 0; i0 < d; i0 += 16) {
            __m512 r[16];
            for (int64_t jj = 0; jj < 16; jj++)
                r[jj] = j0 + jj < n ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kh + (j0 + jj) * d + i0)))
                                    : _mm512_setzero_ps();
            transpose16x16(r);
            for (int64_t ii = 0; ii < 16; ii++)
                _mm512_storeu_ps(kt + (i0 + ii) * KB_T + j0, r[ii]);
        }
}

static const attn_ops AVX512 = {to_float16, to_half16, dots16, accum16, exp_sum16, block16, group16, keys_t16};
const attn_ops *attn_ops_avx512(void) { return &AVX512; }

#else
const attn_ops *attn_ops_avx2(void) { return 0; }
const attn_ops *attn_ops_avx512(void) { return 0; }
#endif
