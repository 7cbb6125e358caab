/* ai.amber.Attention's core: the KV write, the flash-style attention, and the scalar primitives.
 * The SIMD primitives are in attn_x86.c; attn_ops_now() picks them by dispatch.c's ISA. */
#include "attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"
#include "kernel_table.h"

/* Keys per block of the online softmax: scores and converted keys/values stay in L1. */
#define KB 64
/* attn_task's scratch up to this many floats lives on the stack (80 KiB: decode at d 128 with 7 query rows a group) */
#define ATTN_STACK_FLOATS 20480
#if KB != KB_T
#error "the block kernel takes KB_T keys"
#endif
/* Query vectors (rows x heads of one KV group) per attention task, at most. */
#define MAX_ROWS 128

/* ---- scalar float16 <-> float32 (IEEE binary16, round to nearest even) ---- */

static float h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {   /* subnormal: normalize */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while ((man & 0x400) == 0);
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t f2h(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)   /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u)   /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) {  /* below the smallest normal: subnormal or zero */
        if (ax < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = ax >> 23, man = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;   /* 14..24 */
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t base = ((ax >> 13) - (112 << 10)) & 0xffff, rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (base & 1)))
        base++;
    return (uint16_t)(sign | base);
}

static void to_float_c(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = h2f(src[i]);
}

static void to_half_c(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = f2h(src[i]);
}

static void dots_c(const float *q, const float *k, int64_t n, int64_t d, float *out) {
    for (int64_t j = 0; j < n; j++) {
        float s = 0.0f;
        for (int64_t i = 0; i < d; i++)
            s += q[i] * k[j * d + i];
        out[j] = s;
    }
}

static void accum_c(float *acc, float c, const float *p, const float *v, int64_t n, int64_t d) {
    for (int64_t i = 0; i < d; i++)
        acc[i] *= c;
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < d; i++)
            acc[i] += p[j] * v[j * d + i];
}

float attn_exp_sum_scalar(float *s, int64_t n, float m) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        s[j] = expf(s[j] - m);
        sum += s[j];
    }
    return sum;
}

static const attn_ops SCALAR = {to_float_c, to_half_c, dots_c, accum_c, attn_exp_sum_scalar, NULL, NULL, NULL};

const attn_ops *attn_ops_scalar(void) { return &SCALAR; }

const attn_ops *attn_ops_now(void) {
    const attn_ops *(*pick)(void) = amber_kernels_now()->attn;
    const attn_ops *ops = pick != NULL ? pick() : NULL;
    return ops != NULL ? ops : &SCALAR;
}

/* ---- phase 1: the new keys (rotated) and values into the present buffers ---- */

int64_t attn_kv_tasks(const attn_args *a) { return a->b * a->hkv; }

static int64_t past_of(const attn_args *a, int64_t b) { return (int64_t)a->seqlens[b] + 1 - a->s; }

/* x[0:rot] rotated by position pos (non-interleaved halves), into y; the rest copied. */
static void rotate(const attn_args *a, const float *x, float *y, int64_t pos) {
    int64_t half = a->rot / 2;
    const float *c = a->cos + pos * half, *sn = a->sin + pos * half;
    for (int64_t i = 0; i < half; i++) {
        float x1 = x[i], x2 = x[i + half];
        y[i] = x1 * c[i] - x2 * sn[i];
        y[i + half] = x2 * c[i] + x1 * sn[i];
    }
    if (a->d > a->rot)
        memcpy(y + a->rot, x + a->rot, (size_t)(a->d - a->rot) * sizeof *y);
}

void attn_kv_task(const attn_args *a, int64_t t) {
    const attn_ops *ops = attn_ops_now();
    int64_t b = t / a->hkv, h = t % a->hkv, d = a->d, past = past_of(a, b);
    uint16_t *ko = a->k_out + (b * a->hkv + h) * a->cap * d;
    uint16_t *vo = a->v_out + (b * a->hkv + h) * a->cap * d;
    if (a->past_k != NULL) {   /* separate buffers: the valid past first, then zeros after the new */
        const uint16_t *pk = a->past_k + (b * a->hkv + h) * a->past_cap * d;
        const uint16_t *pv = a->past_v + (b * a->hkv + h) * a->past_cap * d;
        memcpy(ko, pk, (size_t)(past * d) * 2);
        memcpy(vo, pv, (size_t)(past * d) * 2);
        int64_t total = past + a->s;
        memset(ko + total * d, 0, (size_t)((a->cap - total) * d) * 2);
        memset(vo + total * d, 0, (size_t)((a->cap - total) * d) * 2);
    }
    float tmp[1024];   /* d <= 1024 (attn_op.c checks) */
    for (int64_t s = 0; s < a->s; s++) {
        const float *k = a->k + (b * a->s + s) * a->kv_stride + h * d;
        const float *v = a->v + (b * a->s + s) * a->kv_stride + h * d;
        if (a->rot > 0) {
            rotate(a, k, tmp, past + s);
            ops->to_half(tmp, ko + (past + s) * d, d);
        } else {
            ops->to_half(k, ko + (past + s) * d, d);
        }
        ops->to_half(v, vo + (past + s) * d, d);
    }
}

/* ---- phase 2: attention, one task per (sequence, KV head, block of new positions) ---- */

int64_t attn_q_block(const attn_args *a) {
    /* at most MAX_ROWS query vectors a task, the new positions split evenly among the tasks: no
     * short last task, so every row of a chunk takes the block kernel's path (its bits do not
     * depend on which rows share its task), whatever the chunk's length */
    int64_t g = a->hq / a->hkv, rows = MAX_ROWS / g;
    rows = rows < 1 ? 1 : rows;
    int64_t tasks = (a->s + rows - 1) / rows;
    return tasks > 1 ? (a->s + tasks - 1) / tasks : rows;
}

static int split_decode(const attn_args *a) { return a->splits > 1 && a->part != NULL && a->s == 1; }

int64_t attn_splits(const attn_args *a) {
    if (a->s != 1)
        return 1;
    int64_t longest = 0;
    for (int64_t b = 0; b < a->b; b++)
        longest = a->seqlens[b] + 1 > longest ? a->seqlens[b] + 1 : longest;
    int64_t w = (longest + ATTN_WINDOW - 1) / ATTN_WINDOW;
    return w > 1 ? w : 1;
}

size_t attn_part_floats(const attn_args *a) {
    int64_t g = a->hq / a->hkv;
    return (size_t)(a->b * a->hkv * (a->splits > 1 ? a->splits : 1) * g * (a->d + 2));
}

int64_t attn_tasks(const attn_args *a) {
    int64_t qb = attn_q_block(a);
    return a->b * a->hkv * ((a->s + qb - 1) / qb) * (split_decode(a) ? a->splits : 1);
}

/* One window's state of nr rows: mx, sum [nr], acc [nr][d]. */
typedef struct {
    float *mx, *sum, *acc;
} soft_state;

/* Folds a row's window state (m, s, acc) into its running state (M, S, A). A window without keys
 * for the row (s == 0) changes nothing; the first one with keys is taken as it is (so a row whose
 * keys lie in one window has the bits of an unwindowed softmax). The one fold both a prompt's
 * rows and a decode step's combine use: the same operations in the same order (one copy of the
 * code, so no call site is compiled with other contractions). */
__attribute__((noinline)) static void fold(float *M, float *S, float *A, float m, float s, const float *acc,
                                            int64_t d) {
    if (s == 0.0f)
        return;
    if (*S == 0.0f) {
        *M = m;
        *S = s;
        memcpy(A, acc, (size_t)d * sizeof *A);
        return;
    }
    float nm = m > *M ? m : *M;
    float c0 = expf(*M - nm), c1 = expf(m - nm);
    *S = *S * c0 + s * c1;
    *M = nm;
    for (int64_t i = 0; i < d; i++)
        A[i] = A[i] * c0 + acc[i] * c1;
}

/* out[0:d] = acc / sum (zeros for a row without keys). */
static void write_row(float *o, const float *acc, float sum, int64_t d) {
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int64_t i = 0; i < d; i++)
        o[i] = acc[i] * inv;
}

typedef struct {
    const attn_ops *ops;
    const uint16_t *kh, *vh;
    const float *qs;
    float *kf, *vf, *sc, *kt;
    int64_t *ra0, *ra1;
    int64_t past, s0, nr, g, d;
    int blocked, grouped;
} key_pass;

/* The online softmax of the pass's rows over keys [j_lo, j_hi) into st (which it updates). */
static void run_keys(const attn_args *a, const key_pass *kp, int64_t j_lo, int64_t j_hi, soft_state st) {
    const attn_ops *ops = kp->ops;
    int64_t d = kp->d, nr = kp->nr, g = kp->g, past = kp->past, s0 = kp->s0;
    const uint16_t *kh = kp->kh, *vh = kp->vh;
    float *mx = st.mx, *sum = st.sum, *acc = st.acc, *kf = kp->kf, *vf = kp->vf, *sc = kp->sc, *kt = kp->kt;
    for (int64_t j0 = j_lo; j0 < j_hi; j0 += KB) {
        int64_t n = j_hi - j0 < KB ? j_hi - j0 : KB;
        /* the next block's keys and values into L2 while this one is computed: a long context's
         * KV streams from memory (or L3), and the conversions below read it in two bursts */
        if (j0 + KB < j_hi) {
            int64_t nn = j_hi - j0 - KB < KB ? j_hi - j0 - KB : KB;
            const char *pk = (const char *)(kh + (j0 + KB) * d), *pv = (const char *)(vh + (j0 + KB) * d);
            for (int64_t off = 0; off < nn * d * 2; off += 64) {
                __builtin_prefetch(pk + off, 0, 2);
                __builtin_prefetch(pv + off, 0, 2);
            }
        }
        if (kp->grouped) {
            int64_t p = past + s0, lo = a->window >= 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
            int64_t a0 = lo > j0 ? lo - j0 : 0, a1 = p + 1 - j0 < n ? p + 1 - j0 : n;
            if (a1 > a0)
                ops->group(kh + (j0 + a0) * d, vh + (j0 + a0) * d, a1 - a0, d, nr, kp->qs, acc, mx, sum, sc);
            continue;
        }
        ops->to_float(vh + j0 * d, vf, n * d);
        if (kp->blocked && ops->keys_t != NULL) {   /* the same floats as converting, then transposing */
            ops->keys_t(kh + j0 * d, n, d, kt);
        } else {
            ops->to_float(kh + j0 * d, kf, n * d);
            for (int64_t i = 0; i < d && kp->blocked; i++) {   /* the block kernel's keys: kt [d][KB_T] */
                float *row = kt + i * KB_T;
                for (int64_t j = 0; j < n; j++)
                    row[j] = kf[j * d + i];
                for (int64_t j = n; j < KB_T; j++)
                    row[j] = 0.0f;
            }
        }
        if (kp->blocked) {
            for (int64_t r = 0; r < nr; r++) {
                int64_t p = past + s0 + r / g;
                int64_t lo = a->window >= 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
                kp->ra0[r] = lo > j0 ? lo - j0 : 0;
                kp->ra1[r] = p + 1 - j0 < n ? p + 1 - j0 : n;
            }
            attn_block blk = {kp->qs, acc, mx, sum, nr, d, n, kt, vf, kp->ra0, kp->ra1};
            ops->block(&blk);
            continue;
        }
        for (int64_t r = 0; r < nr; r++) {
            int64_t p = past + s0 + r / g;   /* this row's position: keys [lo, p] */
            int64_t lo = a->window >= 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
            int64_t a0 = lo > j0 ? lo - j0 : 0, a1 = p + 1 - j0 < n ? p + 1 - j0 : n;
            if (a1 <= a0)
                continue;
            int64_t m = a1 - a0;
            ops->dots(kp->qs + r * d, kf + a0 * d, m, d, sc);
            if (a->softcap > 0.0f)
                for (int64_t j = 0; j < m; j++)
                    sc[j] = a->softcap * tanhf(sc[j] / a->softcap);
            float bm = sc[0];
            for (int64_t j = 1; j < m; j++)
                bm = sc[j] > bm ? sc[j] : bm;
            float nm = bm > mx[r] ? bm : mx[r];
            float c = mx[r] == -INFINITY ? 0.0f : expf(mx[r] - nm);
            float ps = ops->exp_sum(sc, m, nm);
            sum[r] = sum[r] * c + ps;
            mx[r] = nm;
            ops->accum(acc + r * d, c, sc, vf + a0 * d, m, d);
        }
    }
}

/* Window w's keys within [lo, hi). */
static int64_t window_lo(int64_t w, int64_t lo) { return w * ATTN_WINDOW > lo ? w * ATTN_WINDOW : lo; }
static int64_t window_hi(int64_t w, int64_t hi) { return (w + 1) * ATTN_WINDOW < hi ? (w + 1) * ATTN_WINDOW : hi; }

static void reset(soft_state st, int64_t nr, int64_t d) {
    for (int64_t r = 0; r < nr; r++) {
        st.mx[r] = -INFINITY;
        st.sum[r] = 0.0f;
    }
    memset(st.acc, 0, (size_t)(nr * d) * sizeof *st.acc);
}

int attn_task(const attn_args *a, int64_t t) {
    const attn_ops *ops = attn_ops_now();
    int64_t splits = split_decode(a) ? a->splits : 1, sp = t % splits;
    t /= splits;
    int64_t qb = attn_q_block(a), nqb = (a->s + qb - 1) / qb, d = a->d, g = a->hq / a->hkv;
    int64_t b = t / (a->hkv * nqb), h = (t / nqb) % a->hkv, s0 = (t % nqb) * qb;
    int64_t s1 = s0 + qb < a->s ? s0 + qb : a->s, rows = s1 - s0, nr = rows * g;
    int64_t past = past_of(a, b);
    int64_t hi_all = past + s1;   /* keys [lo_all, hi_all) cover every row of the block */
    int64_t lo_all = a->window >= 0 && past + s0 - a->window + 1 > 0 ? past + s0 - a->window + 1 : 0;
    int64_t w_first = lo_all / ATTN_WINDOW, w_last = hi_all > 0 ? (hi_all - 1) / ATTN_WINDOW : 0;
    int several = splits == 1 && w_last > w_first;   /* this task folds several windows itself */
    /* scratch: queries and accumulators [nr][d], max and sum [nr], keys and values [KB][d], scores,
     * and the running state [nr][d + 2] when this task folds several windows */
    size_t floats = (size_t)(2 * nr * d + 2 * nr + 2 * KB * d + 4 * KB + (nr >= 8 ? d * KB_T : 0) +
                             (several ? nr * (d + 2) : 0));
    /* a decode task's scratch (35 KiB at d 64 with 3 query rows) on the stack: no malloc/free for
     * each of a 135M step's ~90 tasks */
    _Alignas(64) float stack_buf[ATTN_STACK_FLOATS];
    float *heap = floats > ATTN_STACK_FLOATS ? malloc(floats * sizeof(float)) : NULL;
    float *buf = floats > ATTN_STACK_FLOATS ? heap : stack_buf;
    int64_t *ra = nr >= 8 ? malloc((size_t)(2 * nr) * sizeof *ra) : NULL;
    if (buf == NULL || (nr >= 8 && ra == NULL)) {
        free(heap);
        free(ra);
        return -1;
    }
    float *qs = buf, *acc = qs + nr * d, *mx = acc + nr * d, *sum = mx + nr, *kf = sum + nr, *vf = kf + KB * d;
    float *sc = vf + KB * d, *kt = nr >= 8 ? sc + 4 * KB : NULL;
    float *run = (nr >= 8 ? kt + d * KB_T : sc + 4 * KB);   /* the running state: M, S [nr], A [nr][d] */
    /* row r = (s - s0) * g + head-in-group: its query rotated and scaled */
    for (int64_t s = s0; s < s1; s++)
        for (int64_t j = 0; j < g; j++) {
            int64_t r = (s - s0) * g + j;
            const float *q = a->q + (b * a->s + s) * a->q_stride + (h * g + j) * d;
            float *qr = qs + r * d;
            if (a->rot > 0)
                rotate(a, q, qr, past + s);
            else
                memcpy(qr, q, (size_t)d * sizeof *qr);
            for (int64_t i = 0; i < d; i++)
                qr[i] *= a->scale;
        }
    key_pass kp = {ops, a->k_out + (b * a->hkv + h) * a->cap * d, a->v_out + (b * a->hkv + h) * a->cap * d,
                   qs, kf, vf, sc, kt, ra, ra != NULL ? ra + nr : NULL, past, s0, nr, g, d, 0, 0};
    /* many query vectors: the transposed-keys block kernel (no horizontal sums), where there is one */
    kp.blocked = ops->block != NULL && nr >= 8 && d % 16 == 0 && a->softcap == 0.0f && kt != NULL;
    /* decode: one position, so every row of the group sees the same keys [lo, p] */
    kp.grouped = !kp.blocked && ops->group != NULL && rows == 1 && d % 16 == 0 && a->softcap == 0.0f;
    soft_state st = {mx, sum, acc};
    if (splits > 1) {   /* one window of a decode step: its state into part, for attn_combine_task */
        float *pt = a->part + (((b * a->hkv + h) * splits + sp) * nr) * (d + 2);
        soft_state out = {pt, pt + nr, pt + 2 * nr};
        reset(out, nr, d);
        run_keys(a, &kp, window_lo(sp, lo_all), window_hi(sp, hi_all), out);
        free(heap);
        free(ra);
        return 0;
    }
    soft_state total = st;
    if (several) {
        total = (soft_state){run, run + nr, run + 2 * nr};
        reset(total, nr, d);
    }
    for (int64_t w = w_first; w <= w_last; w++) {   /* one window unless `several` */
        reset(st, nr, d);
        run_keys(a, &kp, window_lo(w, lo_all), window_hi(w, hi_all), st);
        for (int64_t r = 0; r < nr && several; r++)
            fold(&total.mx[r], &total.sum[r], total.acc + r * d, mx[r], sum[r], acc + r * d, d);
    }
    for (int64_t s = s0; s < s1; s++)
        for (int64_t j = 0; j < g; j++) {
            int64_t r = (s - s0) * g + j;
            write_row(a->out + (b * a->s + s) * a->hq * d + (h * g + j) * d, total.acc + r * d, total.sum[r], d);
        }
    free(heap);
    free(ra);
    return 0;
}

int64_t attn_combine_tasks(const attn_args *a) { return split_decode(a) ? a->b * a->hkv : 0; }

void attn_combine_task(const attn_args *a, int64_t t) {
    int64_t g = a->hq / a->hkv, d = a->d, b = t / a->hkv, h = t % a->hkv, nr = g;   /* decode: one row a head */
    for (int64_t r = 0; r < nr; r++) {
        float M = -INFINITY, S = 0.0f;
        float *o = a->out + b * a->hq * d + (h * g + r) * d;   /* the running sum in the output row itself */
        for (int64_t sp = 0; sp < a->splits; sp++) {
            const float *pt = a->part + (((b * a->hkv + h) * a->splits + sp) * nr) * (d + 2);
            fold(&M, &S, o, pt[r], pt[nr + r], pt + 2 * nr + r * d, d);
        }
        if (S == 0.0f)
            memset(o, 0, (size_t)d * sizeof *o);
        write_row(o, o, S, d);
    }
}
