/* Amber's attention over float16 KV (the core of ai.amber.Attention; attn_op.c is its ORT glue).
 *
 * Semantics of com.microsoft.GroupQueryAttention as Amber's graphs use it: per sequence b,
 * total_b = seqlens_k[b] + 1 valid positions after this step, past_b = total_b - S before it;
 * the S new keys/values (rotated keys) are written at [past_b, total_b) of the float16 present
 * buffers (which may be the past buffers themselves), then each new query at position
 * p = past_b + s attends keys [lo, p] (lo = p - window + 1 with a sliding window, as ORT's GQA; else 0).
 * Flash-style: an online softmax over blocks of keys, no score matrix. Not part of the public API.
 */
#ifndef AMBER_ATTN_H
#define AMBER_ATTN_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t b, s;            /* batch, new tokens per sequence */
    int64_t hq, hkv, d;      /* query heads, KV heads, head size */
    int64_t cap;             /* positions the present buffers hold */
    int64_t past_cap;        /* positions the past buffers hold (copied when not shared) */
    int64_t rot;             /* rotated dims (0: no rotary), even, <= d */
    int64_t cos_rows;        /* rows of cos/sin (rot / 2 columns each) */
    int64_t window;          /* -1: full causal attention */
    float scale, softcap;    /* softcap 0: none */
    const float *q, *k, *v;  /* q [b, s, q_stride], k/v [b, s, kv_stride] at their offsets */
    int64_t q_stride, kv_stride;
    const float *cos, *sin;
    const int32_t *seqlens;  /* [b], validated: 0 <= past_b, total_b <= cap */
    const uint16_t *past_k, *past_v;   /* [b, hkv, past_cap, d] */
    uint16_t *k_out, *v_out;           /* [b, hkv, cap, d] */
    float *out;                        /* [b, s, hq * d] */
    /* A decode step's key windows as tasks of their own (attn_splits; 0 or 1: one task a KV head
     * does every window): each writes its window's softmax state into part (attn_part_floats),
     * and attn_combine_task folds them. The bits are the same either way. */
    int64_t splits;
    float *part;
} attn_args;

/* Work items of each phase (ORT's thread pool runs them in any order, in parallel). */
int64_t attn_kv_tasks(const attn_args *a);
void attn_kv_task(const attn_args *a, int64_t t);        /* writes the new keys/values */
int64_t attn_q_block(const attn_args *a);                /* query rows per attention task */
int64_t attn_tasks(const attn_args *a);
int attn_task(const attn_args *a, int64_t t);            /* 0, or -1 when out of memory */
/* Keys are taken in windows of ATTN_WINDOW positions (at multiples of it): a row's online softmax
 * restarts in each window and the windows' states are folded in order, so a decode step can give
 * each window a task of its own (a long context on more threads than KV heads) with the bits of
 * a prompt's row, whose task folds them one after the other. */
#define ATTN_WINDOW 512
int64_t attn_splits(const attn_args *a);                 /* windows of the longest sequence (decode), else 1 */
size_t attn_part_floats(const attn_args *a);             /* floats `part` needs for a->splits */
int64_t attn_combine_tasks(const attn_args *a);          /* 0 unless a->splits > 1 with part */
void attn_combine_task(const attn_args *a, int64_t t);

/* One key block against many query vectors (prefill), all in float32: for each row r < nr with
 * keys [a0[r], a1[r]) of the block valid (none when a1 <= a0), scores = q_r . k_j (kt is the
 * block's keys transposed, [d][KB_T]), then the online softmax update of mx[r], sum[r] and
 * acc[r][0:d] with the block's values vf [n][d]. */
#define KB_T 64
typedef struct {
    const float *qs;
    float *acc, *mx, *sum;
    int64_t nr, d, n;
    const float *kt, *vf;
    const int64_t *a0, *a1;
} attn_block;

/* The SIMD primitives per ISA (attn.c has the scalar ones). */
typedef struct {
    void (*to_float)(const uint16_t *src, float *dst, int64_t n);
    void (*to_half)(const float *src, uint16_t *dst, int64_t n);
    /* out[j] = dot(q, k + j * d) for j < n */
    void (*dots)(const float *q, const float *k, int64_t n, int64_t d, float *out);
    /* acc[0:d] = acc * c + sum_j p[j] * v[j * d : (j + 1) * d] */
    void (*accum)(float *acc, float c, const float *p, const float *v, int64_t n, int64_t d);
    /* s[j] = exp(s[j] - m) for j < n; returns their sum */
    float (*exp_sum)(float *s, int64_t n, float m);
    /* the whole block update for d % 16 == 0, no softcap (NULL: not at this ISA) */
    void (*block)(const attn_block *b);
    /* nr query rows (qs, acc [nr][d]; mx, sum [nr]) that all see the same m float16 keys and
     * values (kh, vh [m][d]): per row the same update as dots, the max, exp_sum and accum, without
     * converting the block into memory; sc holds 4 rows of KB_T scores. d % 16 == 0, no softcap
     * (NULL: not at this ISA) */
    void (*group)(const uint16_t *kh, const uint16_t *vh, int64_t m, int64_t d, int64_t nr,
                  const float *qs, float *acc, float *mx, float *sum, float *sc);
    /* the block kernel's keys: n <= KB_T float16 keys kh [n][d] as float32, transposed into
     * kt [d][KB_T], zeros at j >= n; d % 16 == 0 (NULL: attn.c converts, then transposes) */
    void (*keys_t)(const uint16_t *kh, int64_t n, int64_t d, float *kt);
} attn_ops;

const attn_ops *attn_ops_avx2(void);     /* NULL when not compiled for x86-64 */
const attn_ops *attn_ops_avx512(void);
const attn_ops *attn_ops_neon(void);     /* NULL when not compiled for arm64 */
const attn_ops *attn_ops_now(void);      /* the ones for amber_current_isa() */
/* attn.c's exp_sum: s[j] = expf(s[j] - m), their sum in order (paths without a vector exp). */
float attn_exp_sum_scalar(float *s, int64_t n, float m);

/* attn_op.c: the OrtCustomOpV17 of ai.amber.Attention (ort_op.c adds it to the domain). */
const void *amber_attention_op(void);
#endif
