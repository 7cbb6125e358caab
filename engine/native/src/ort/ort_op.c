/* The ONNX Runtime custom op ai.amber.GgufMatMul: Y = X @ dequant(W).T over a GGUF's own blocks.
 *
 * X float32 [..., K]; W uint8, N rows of amber_row_bytes(ggml_type, K) bytes (the GGUF's bytes);
 * attributes ggml_type, K, N; Y float32 [..., N]. X's rows are quantized once per call into a
 * scratch buffer, then [0, rows) x [0, N) is cut into tiles that ORT's intra-op thread pool runs.
 * Tile sizes depend only on the shapes, never on the thread count, and every output element is
 * written by exactly one tile: results are the same bits with 1 thread or many.
 * Optional attribute epilogue (int, default 0 = none): 1 = SwiGLU. Then W holds the gate's F rows
 * then the up's F rows (N = 2F, even) and Y is [..., F] = (g * logistic(g)) * u with g = X @ Wg.T,
 * u = X @ Wu.T and ONNX Runtime's own logistic (swiglu.c): the same bits as the split graph
 * (GgufMatMul N = 2F, Split, Sigmoid/Mul, Mul) it replaces. g and u come from exactly the kernel
 * calls the op without the epilogue makes (same X rows, same column bounds; see compute()).
 * Everything a model file says is checked before it is used; a bad node gets an ORT error status
 * with a one-line message, never a read outside W.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amber_kernels.h"
#include "attn.h"
#include "ort_abi.h"
#include "swiglu.h"

#if !defined(_WIN32)
#include <pthread.h>
#define TILE_SCRATCH 1
#endif

#define OP_NAME "GgufMatMul"
#define OP_DOMAIN "ai.amber"
#define MAX_N ((int64_t)1 << 40)
#define MAX_K ((int64_t)1 << 40)   /* dispatch.c accepts no larger K */

typedef struct {
    const void *api;     /* the OrtApi table (version 17) */
    int type;            /* GGML type id */
    int64_t k, n;        /* inputs and outputs of the matmul */
    int64_t row_bytes;   /* bytes of one W row */
    int64_t act_bytes;   /* bytes of one quantized X row */
    int epilogue;        /* EPILOGUE_NONE or EPILOGUE_SWIGLU */
    int64_t n_out;       /* Y's last dimension: n, or n / 2 with SwiGLU */
} kernel_t;

#define EPILOGUE_NONE 0
#define EPILOGUE_SWIGLU 1

static OrtStatus *fail(const void *api, int code, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    int len = snprintf(msg, sizeof msg, "%s: ", OP_NAME);
    vsnprintf(msg + len, sizeof msg - (size_t)len, fmt, ap);
    va_end(ap);
    return ORT_FN(api, CreateStatus)(code, msg);
}

#define SHAPE_INLINE_RANK 8

typedef struct {
    int elem;
    size_t rank;
    int64_t *dims;   /* rank entries: `inline_dims` up to SHAPE_INLINE_RANK, else malloc'd (NULL when rank is 0) */
    size_t count;
    int64_t inline_dims[SHAPE_INLINE_RANK];
} shape_t;

/* A shape's dims when they were malloc'd (rank above SHAPE_INLINE_RANK). */
static void shape_free(shape_t *s) {
    if (s->dims != s->inline_dims)
        free(s->dims);
    s->dims = NULL;
}

/* Per-call scratch of a decode step (the quantized X row, SwiGLU's gate|up outputs) lives on the
 * stack up to this size, so a step's ~120 nodes make no malloc/free pairs of their own (no
 * step-time change measurable on a shared 2-core VM: docs/benchmarks/decode.md). 72 KiB
 * covers m = 1 up to F = 8960 (the 1.5B shape's 2F floats + its quantized row). */
#define STACK_SCRATCH_BYTES (72 << 10)

static OrtStatus *shape_of(const void *api, const OrtValue *v, shape_t *s);
static OrtStatus *check_w(const void *api, const OrtValue *wv, int type, int64_t k, int64_t n, int64_t rb);

/* ---- kernel creation: the attributes, checked once per node ---- */

static OrtStatus *get_attr(const void *api, const OrtKernelInfo *info, const char *name, int64_t *out) {
    OrtStatus *st = ORT_FN(api, KernelInfoGetAttribute_int64)(info, name, out);
    if (st == NULL)
        return NULL;
    ORT_FN(api, ReleaseStatus)(st);
    return fail(api, ORT_CODE_INVALID_GRAPH, "the int attribute '%s' is missing", name);
}

static OrtStatus *ORT_CALL create_kernel(const OrtCustomOpV17 *op, const void *api, const OrtKernelInfo *info,
                                         void **out) {
    (void)op;
    *out = NULL;
    if (api == NULL)
        return NULL;   /* cannot happen: ORT passes the table for the version we declared */
    int64_t type = 0, k = 0, n = 0;
    OrtStatus *st;
    if ((st = get_attr(api, info, "ggml_type", &type)) || (st = get_attr(api, info, "K", &k)) ||
        (st = get_attr(api, info, "N", &n)))
        return st;
    if (type < 0 || type > 1000 || amber_row_bytes((int)type, 256) < 0)
        return fail(api, ORT_CODE_INVALID_GRAPH, "ggml_type %lld is not supported by the kernels",
                    (long long)type);
    if (k <= 0 || k > MAX_K)
        return fail(api, ORT_CODE_INVALID_GRAPH, "K = %lld is out of range (1 .. 2^40)", (long long)k);
    int64_t rb = amber_row_bytes((int)type, k);
    if (rb <= 0)
        return fail(api, ORT_CODE_INVALID_GRAPH, "K = %lld is not a multiple of ggml_type %lld's block",
                    (long long)k, (long long)type);
    if (n <= 0 || n > MAX_N)
        return fail(api, ORT_CODE_INVALID_GRAPH, "N = %lld is out of range (1 .. 2^40)", (long long)n);
    if (n > INT64_MAX / rb)
        return fail(api, ORT_CODE_INVALID_GRAPH, "N = %lld rows of %lld bytes overflow", (long long)n,
                    (long long)rb);
    int64_t epilogue = EPILOGUE_NONE;   /* optional: absent means none (graphs made before it) */
    if ((st = ORT_FN(api, KernelInfoGetAttribute_int64)(info, "epilogue", &epilogue)) != NULL) {
        ORT_FN(api, ReleaseStatus)(st);
        epilogue = EPILOGUE_NONE;
    }
    if (epilogue != EPILOGUE_NONE && epilogue != EPILOGUE_SWIGLU)
        return fail(api, ORT_CODE_INVALID_GRAPH, "epilogue %lld is not supported (0 none, 1 swiglu)",
                    (long long)epilogue);
    if (epilogue == EPILOGUE_SWIGLU && n % 2 != 0)
        return fail(api, ORT_CODE_INVALID_GRAPH, "epilogue swiglu needs an even N (gate rows then up rows), N = %lld",
                    (long long)n);
    /* W is normally an initializer: check it now, so a bad file fails when the session is made */
    int is_constant = 0;
    const OrtValue *wv = NULL;
    st = ORT_FN(api, KernelInfoGetConstantInput_tensor)(info, 1, &is_constant, &wv);
    if (st != NULL)
        ORT_FN(api, ReleaseStatus)(st);   /* not knowable now: checked at every run anyway */
    else if (is_constant && wv != NULL && (st = check_w(api, wv, (int)type, k, n, rb)) != NULL)
        return st;
    kernel_t *kern = malloc(sizeof *kern);
    if (kern == NULL)
        return fail(api, ORT_CODE_FAIL, "out of memory");
    kern->api = api;
    kern->type = (int)type;
    kern->k = k;
    kern->n = n;
    kern->row_bytes = rb;
    kern->act_bytes = amber_act_bytes((int)type, k);
    kern->epilogue = (int)epilogue;
    kern->n_out = epilogue == EPILOGUE_SWIGLU ? n / 2 : n;
    if (kern->act_bytes <= 0) {
        free(kern);
        return fail(api, ORT_CODE_FAIL, "no activation layout for ggml_type %lld", (long long)type);
    }
    *out = kern;
    return NULL;
}

static void ORT_CALL destroy_kernel(void *kernel) { free(kernel); }

/* ---- compute ---- */

typedef struct {
    const kernel_t *kern;
    const float *x;
    uint8_t *act;
    const uint8_t *w;
    float *y;
    float *both;               /* SwiGLU: the m x 2F gate|up outputs (NULL without the epilogue) */
    int64_t m;                 /* rows of X */
    int64_t m_blk, n_blk;      /* a tile: m_blk rows of X by n_blk rows of W */
    int64_t n_tiles;           /* tiles across N */
    volatile int failed;       /* a kernel call returned -1 (written by any thread, read after) */
} work_t;

/* Quantizes X rows [t * m_blk, ...) into act. */
static void quantize_block(void *user, size_t t) {
    work_t *w = user;
    int64_t i0 = (int64_t)t * w->m_blk, i1 = i0 + w->m_blk < w->m ? i0 + w->m_blk : w->m;
    for (int64_t i = i0; i < i1; i++)
        if (amber_quantize_act(w->kern->type, w->x + i * w->kern->k, w->kern->k,
                               w->act + i * w->kern->act_bytes) != 0)
            w->failed = 1;
}

/* One output tile: rows [i0, i1) of X against rows [n0, n1) of W. */
static void gemm_tile(void *user, size_t t) {
    work_t *w = user;
    const kernel_t *kn = w->kern;
    int64_t mi = (int64_t)t / w->n_tiles, ni = (int64_t)t % w->n_tiles;
    int64_t i0 = mi * w->m_blk, i1 = i0 + w->m_blk < w->m ? i0 + w->m_blk : w->m;
    int64_t n0 = ni * w->n_blk, n1 = n0 + w->n_blk < kn->n ? n0 + w->n_blk : kn->n;
    if (amber_gemm_rows(kn->type, w->act + i0 * kn->act_bytes, i1 - i0, w->w, kn->k, n0, n1, w->y + i0 * kn->n,
                        kn->n) != 0)
        w->failed = 1;
}

#ifdef TILE_SCRATCH
/* A thread's own scratch for SwiGLU tiles, kept for the thread's life (freed at its exit) and grown
 * as needed: at most 256 x 128 floats (128 KiB). A prompt's m x 2F buffer per call instead (32 MiB
 * for 512 rows at F = 8192) came from a fresh mmap every call, above glibc's mmap threshold, so
 * each call faulted its pages in again: ~0.5 M page faults in a 2048-token prefill at the 1B shape.
 * The first 64 bytes hold the capacity in floats. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_ok;

static void scratch_init(void) { scratch_ok = pthread_key_create(&scratch_key, free) == 0; }

static float *tile_scratch(size_t floats) {
    pthread_once(&scratch_once, scratch_init);
    if (!scratch_ok)
        return NULL;
    char *p = pthread_getspecific(scratch_key);
    if (p == NULL || *(size_t *)p < floats) {
        free(p);
        p = malloc(64 + floats * sizeof(float));
        if (p != NULL)
            *(size_t *)p = floats;
        if (pthread_setspecific(scratch_key, p) != 0) {
            free(p);
            return NULL;
        }
        if (p == NULL)
            return NULL;
    }
    return (float *)(p + 64);
}
#endif

/* SwiGLU tile: output columns [n0, n1) of F = n_out; gate rows [n0, n1) and up rows [F + n0, F + n1)
 * go into the thread's scratch (without one: the call's m x 2F buffer), then y = silu(gate) * up.
 * compute() runs these tiles only when F is a multiple of the plain op's tile width, so both calls
 * are tiles the plain op makes too: the same dot products bit for bit; the tiling depends only on
 * the shapes (thread-count independent). */
static void swiglu_tile(void *user, size_t t) {
    work_t *w = user;
    const kernel_t *kn = w->kern;
    int64_t f = kn->n_out, ld = kn->n;
    int64_t mi = (int64_t)t / w->n_tiles, ni = (int64_t)t % w->n_tiles;
    int64_t i0 = mi * w->m_blk, i1 = i0 + w->m_blk < w->m ? i0 + w->m_blk : w->m;
    int64_t n0 = ni * w->n_blk, n1 = n0 + w->n_blk < f ? n0 + w->n_blk : f;
    int64_t rows = i1 - i0, cols = n1 - n0;
    const uint8_t *act = w->act + i0 * kn->act_bytes;
#ifdef TILE_SCRATCH
    if (w->both == NULL) {   /* the thread's scratch: gate [rows][0, cols) | up [rows][cols, 2 cols) */
        float *buf = tile_scratch((size_t)(rows * 2 * cols));
        /* the kernels write y[i * ldy + n] for absolute n: the bases are shifted by the first column */
        if (buf == NULL ||
            amber_gemm_rows(kn->type, act, rows, w->w, kn->k, n0, n1, buf - n0, 2 * cols) != 0 ||
            amber_gemm_rows(kn->type, act, rows, w->w, kn->k, f + n0, f + n1, buf + cols - (f + n0), 2 * cols) != 0) {
            w->failed = 1;
            return;
        }
        for (int64_t i = 0; i < rows; i++)
            amber_silu_mul(buf + i * 2 * cols, buf + i * 2 * cols + cols, w->y + (i0 + i) * f + n0, cols);
        return;
    }
#endif
    /* the tile's gate columns [n0, n1) and up columns [F + n0, F + n1) land in their places of the
     * call's m x 2F buffer (the kernels write y[i * ldy + n] for absolute n), then silu * up goes to
     * Y: tiles of any height (tile_rows_of_x), no scratch of their own */
    float *both = w->both + i0 * ld;
    if (amber_gemm_rows(kn->type, act, rows, w->w, kn->k, n0, n1, both, ld) != 0 ||
        amber_gemm_rows(kn->type, act, rows, w->w, kn->k, f + n0, f + n1, both, ld) != 0) {
        w->failed = 1;
        return;
    }
    for (int64_t i = 0; i < rows; i++)
        amber_silu_mul(both + i * ld + n0, both + i * ld + f + n0, w->y + (i0 + i) * f + n0, cols);
}

/* Rows of W per tile: for few X rows (decode) 16..64 rows so both threads stay busy on small
 * layers; for many X rows 64 rows (64 weight rows and 64 activation rows stay in L2). A multiple
 * of 8, so kernels that take rows 4 or 8 at a time get whole groups. */
static int64_t tile_rows_of_w(int64_t m, int64_t n) {
    if (m > 8)
        return 64;
    int64_t c = n / 32;
    c = c < 16 ? 16 : (c > 64 ? 64 : c);
    return (c + 7) / 8 * 8;
}

/* Rows of X per tile: 64, and for a prompt (m > 64) up to 256 while a tile's quantized rows stay
 * within ~2 MiB (about the L2). The packed prefill kernels decode each weight row once per tile,
 * so taller tiles spread that cost over more rows (measured 1.2-1.4x at K = 896 and 2048 on an
 * AVX-512 VNNI Xeon). A multiple of 64: every tile starts at a multiple of 16, so the bits are
 * those of 64-row tiles (q32_gemm_rows, qk_gemm_rows). */
static int64_t tile_rows_of_x(int64_t m, int64_t act_bytes) {
    if (m <= 64)
        return 64;
    int64_t r = ((int64_t)2 << 20) / act_bytes / 64 * 64;
    return r < 64 ? 64 : (r > 256 ? 256 : r);
}

static OrtStatus *run_parallel(const void *api, const OrtKernelContext *ctx, void (*fn)(void *, size_t),
                               size_t total, work_t *w) {
    if (total == 1) {
        fn(w, 0);
        return NULL;
    }
    return ORT_FN(api, KernelContext_ParallelFor)(ctx, fn, total, 0, w);
}

static OrtStatus *shape_of(const void *api, const OrtValue *v, shape_t *s) {
    OrtTensorTypeAndShapeInfo *info = NULL;
    memset(s, 0, sizeof *s);
    OrtStatus *st = ORT_FN(api, GetTensorTypeAndShape)(v, &info);
    if (st == NULL)
        st = ORT_FN(api, GetTensorElementType)(info, &s->elem);
    if (st == NULL)
        st = ORT_FN(api, GetDimensionsCount)(info, &s->rank);
    if (st == NULL)
        st = ORT_FN(api, GetTensorShapeElementCount)(info, &s->count);
    if (st == NULL && s->rank > 0) {
        s->dims = s->rank <= SHAPE_INLINE_RANK ? s->inline_dims : malloc(s->rank * sizeof *s->dims);
        if (s->dims == NULL)
            st = fail(api, ORT_CODE_FAIL, "out of memory");
        else
            st = ORT_FN(api, GetDimensions)(info, s->dims, s->rank);
    }
    if (info != NULL)
        ORT_FN(api, ReleaseTensorTypeAndShapeInfo)(info);
    return st;
}

/* W: uint8 holding exactly N rows of rb bytes. */
static OrtStatus *check_w(const void *api, const OrtValue *wv, int type, int64_t k, int64_t n, int64_t rb) {
    shape_t ws;
    OrtStatus *st = shape_of(api, wv, &ws);
    shape_free(&ws);
    if (st != NULL)
        return st;
    if (ws.elem != ORT_ELEM_UINT8)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "W must be uint8 (element type %d given)", ws.elem);
    if ((uint64_t)ws.count != (uint64_t)(n * rb))
        return fail(api, ORT_CODE_INVALID_ARGUMENT,
                    "W holds %llu bytes, but N = %lld rows of ggml_type %d with K = %lld need %lld",
                    (unsigned long long)ws.count,
                    (long long)n, type, (long long)k, (long long)(n * rb));
    return NULL;
}

static OrtStatus *compute(const kernel_t *kn, OrtKernelContext *ctx) {
    const void *api = kn->api;
    const OrtValue *xv = NULL, *wv = NULL;
    size_t n_inputs = 0;
    OrtStatus *st = ORT_FN(api, KernelContext_GetInputCount)(ctx, &n_inputs);
    if (st != NULL)
        return st;
    if (n_inputs != 2)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "expects 2 inputs (X, W), got %llu",
                    (unsigned long long)n_inputs);   /* %llu, not %zu: old Windows C runtimes */
    if ((st = ORT_FN(api, KernelContext_GetInput)(ctx, 0, &xv)) ||
        (st = ORT_FN(api, KernelContext_GetInput)(ctx, 1, &wv)))
        return st;
    if (xv == NULL || wv == NULL)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "an input is missing");

    shape_t xs;
    if ((st = check_w(api, wv, kn->type, kn->k, kn->n, kn->row_bytes)) != NULL)
        return st;
    if ((st = shape_of(api, xv, &xs)) != NULL) {
        shape_free(&xs);
        return st;
    }
    OrtStatus *bad = NULL;
    if (xs.elem != ORT_ELEM_FLOAT)
        bad = fail(api, ORT_CODE_INVALID_ARGUMENT, "X must be float32 (element type %d given)", xs.elem);
    else if (xs.rank < 1)
        bad = fail(api, ORT_CODE_INVALID_ARGUMENT, "X must have rank >= 1");
    else if (xs.dims[xs.rank - 1] != kn->k)
        bad = fail(api, ORT_CODE_INVALID_ARGUMENT, "X's last dimension is %lld, K is %lld",
                   (long long)xs.dims[xs.rank - 1], (long long)kn->k);
    if (bad != NULL) {
        shape_free(&xs);
        return bad;
    }
    int64_t m = (int64_t)(xs.count / (size_t)kn->k);   /* rows of X: the element count is ORT's, exact */
    xs.dims[xs.rank - 1] = kn->n_out;                  /* Y's shape: X's with N (F with SwiGLU) last */
    OrtValue *yv = NULL;
    float *y = NULL;
    void *xdata = NULL, *wdata = NULL;
    st = ORT_FN(api, KernelContext_GetOutput)(ctx, 0, xs.dims, xs.rank, &yv);
    shape_free(&xs);
    if (st != NULL)
        return st;
    if (m == 0)
        return NULL;
    if ((st = ORT_FN(api, GetTensorMutableData)(yv, (void **)&y)) ||
        (st = ORT_FN(api, GetTensorMutableData)((OrtValue *)xv, &xdata)) ||
        (st = ORT_FN(api, GetTensorMutableData)((OrtValue *)wv, &wdata)))
        return st;

    work_t w = {0};
    w.kern = kn;
    w.x = xdata;
    w.w = wdata;
    w.y = y;
    w.m = m;
    w.m_blk = tile_rows_of_x(m, kn->act_bytes);
    /* SwiGLU: per-tile gate|up pairs only where each pair is two tiles of the plain op's own tiling
     * (F a multiple of its tile width): the kernels' arithmetic for a column depends on the call's
     * bounds (the packed paths take whole groups of 8 or 16 columns from n0), so other bounds would
     * give other bits than the split graph. Otherwise, and with few X rows (decode: per-tile pairs
     * read W as two short streams, ~1-2 % slower at m = 1 with W out of cache), the plain tiling over
     * all 2F rows into a buffer of m x 2F floats (39 KB at m = 1, F = 4864), then one silu pass. */
    int64_t plain_blk = tile_rows_of_w(m, kn->n);
    int whole = kn->epilogue == EPILOGUE_SWIGLU &&
                (m <= 8 || kn->n_out % plain_blk != 0 || tile_rows_of_w(m, kn->n_out) != plain_blk);
    int64_t tiled_n = whole ? kn->n : kn->n_out;
    w.n_blk = plain_blk;   /* tiled_n's own width too: `whole` unless F tiles exactly as 2F does */
    w.n_tiles = (tiled_n + w.n_blk - 1) / w.n_blk;
    float *both = NULL;
    size_t both_bytes = 0;
    int tile_pairs = 0;   /* per-tile pairs into each thread's own scratch: no m x 2F buffer */
#ifdef TILE_SCRATCH
    tile_pairs = kn->epilogue == EPILOGUE_SWIGLU && !whole;
#endif
    if (kn->epilogue == EPILOGUE_SWIGLU && !tile_pairs) {   /* gate|up outputs of every row: both paths write here */
        if ((uint64_t)m > (uint64_t)(SIZE_MAX / sizeof *both) / (uint64_t)kn->n)
            return fail(api, ORT_CODE_FAIL, "X has too many rows (%lld)", (long long)m);
        both_bytes = (size_t)m * (size_t)kn->n * sizeof *both;
    }
    if ((uint64_t)m > SIZE_MAX / (uint64_t)kn->act_bytes)
        return fail(api, ORT_CODE_FAIL, "X has too many rows (%lld)", (long long)m);
    size_t act_bytes = (size_t)m * (size_t)kn->act_bytes, both_at = (both_bytes + 63) / 64 * 64;
    /* one block for both: gate|up outputs first (64-byte aligned), the quantized rows after them */
    _Alignas(64) unsigned char stack_scratch[STACK_SCRATCH_BYTES];
    unsigned char *scratch = stack_scratch, *heap = NULL;
    if (both_at > SIZE_MAX - act_bytes)
        return fail(api, ORT_CODE_FAIL, "X has too many rows (%lld)", (long long)m);
    if (both_at + act_bytes > sizeof stack_scratch) {
        heap = malloc(both_at + act_bytes);
        if (heap == NULL)
            return fail(api, ORT_CODE_FAIL, "out of memory for %lld rows of X", (long long)m);
        scratch = heap;
    }
    if (both_bytes > 0) {
        both = (float *)(void *)scratch;
        w.both = both;
        if (whole)
            w.y = both;
    }
    w.act = scratch + both_at;
    int64_t m_tiles = (m + w.m_blk - 1) / w.m_blk;
    st = run_parallel(api, ctx, quantize_block, (size_t)m_tiles, &w);
    if (st == NULL && !w.failed)
        st = run_parallel(api, ctx, kn->epilogue == EPILOGUE_SWIGLU && !whole ? swiglu_tile : gemm_tile,
                          (size_t)(m_tiles * w.n_tiles), &w);
    if (whole && st == NULL && !w.failed)
        for (int64_t i = 0; i < m; i++)
            amber_silu_mul(both + i * kn->n, both + i * kn->n + kn->n_out, y + i * kn->n_out, kn->n_out);
    free(heap);
    if (st == NULL && w.failed)
        st = fail(api, ORT_CODE_FAIL, "the kernels rejected ggml_type %d with K = %lld", kn->type, (long long)kn->k);
    return st;
}

static OrtStatus *ORT_CALL compute_v2(void *kernel, OrtKernelContext *ctx) { return compute(kernel, ctx); }

/* ---- the op's description ---- */

static const char *ORT_CALL op_name(const OrtCustomOpV17 *op) { (void)op; return OP_NAME; }
static const char *ORT_CALL op_provider(const OrtCustomOpV17 *op) { (void)op; return NULL; /* CPU */ }
static int ORT_CALL input_type(const OrtCustomOpV17 *op, size_t i) {
    (void)op;
    return i == 0 ? ORT_ELEM_FLOAT : ORT_ELEM_UINT8;
}
static size_t ORT_CALL input_count(const OrtCustomOpV17 *op) { (void)op; return 2; }
static int ORT_CALL output_type(const OrtCustomOpV17 *op, size_t i) { (void)op; (void)i; return ORT_ELEM_FLOAT; }
static size_t ORT_CALL output_count(const OrtCustomOpV17 *op) { (void)op; return 1; }
static int ORT_CALL io_required(const OrtCustomOpV17 *op, size_t i) { (void)op; (void)i; return ORT_IO_REQUIRED; }
static int ORT_CALL input_memory(const OrtCustomOpV17 *op, size_t i) { (void)op; (void)i; return ORT_MEM_DEFAULT; }
static int ORT_CALL variadic_arity(const OrtCustomOpV17 *op) { (void)op; return 1; }
static int ORT_CALL variadic_homogeneous(const OrtCustomOpV17 *op) { (void)op; return 1; }

static const OrtCustomOpV17 GGUF_MATMUL = {
    .version = AMBER_ORT_API_VERSION,
    .CreateKernel = NULL,   /* ORT uses CreateKernelV2 / KernelComputeV2 from version 16 on */
    .GetName = op_name,
    .GetExecutionProviderType = op_provider,
    .GetInputType = input_type,
    .GetInputTypeCount = input_count,
    .GetOutputType = output_type,
    .GetOutputTypeCount = output_count,
    .KernelCompute = NULL,
    .KernelDestroy = destroy_kernel,
    .GetInputCharacteristic = io_required,
    .GetOutputCharacteristic = io_required,
    .GetInputMemoryType = input_memory,
    .GetVariadicInputMinArity = variadic_arity,
    .GetVariadicInputHomogeneity = variadic_homogeneous,
    .GetVariadicOutputMinArity = variadic_arity,
    .GetVariadicOutputHomogeneity = variadic_homogeneous,
    .CreateKernelV2 = create_kernel,
    .KernelComputeV2 = compute_v2,
    .InferOutputShapeFn = NULL,
    .GetStartVersion = NULL,   /* NULL start and end: since opset 1 of ai.amber */
    .GetEndVersion = NULL,
};

/* The entry point ORT looks up after loading the library (SessionOptions.register_custom_ops_library). */
AMBER_API OrtStatus *ORT_CALL RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *base) {
    if (base == NULL || base->GetApi == NULL)
        return NULL;
    const void *api = base->GetApi(AMBER_ORT_API_VERSION);
    if (api == NULL) {
        /* an ONNX Runtime older than 1.17: version 1's table still has CreateStatus at slot 0 */
        const void *v1 = base->GetApi(1);
        if (v1 == NULL)
            return NULL;
        return ORT_FN(v1, CreateStatus)(ORT_CODE_FAIL, OP_NAME ": needs ONNX Runtime 1.17 or newer");
    }
    /* The domain must outlive every session made from these options; ORT does not own it, and a
     * session may outlive the options, so it is never released (a few hundred bytes per call). */
    OrtCustomOpDomain *domain = NULL;
    OrtStatus *st = ORT_FN(api, CreateCustomOpDomain)(OP_DOMAIN, &domain);
    if (st == NULL)
        st = ORT_FN(api, CustomOpDomain_Add)(domain, &GGUF_MATMUL);
    if (st == NULL)   /* ai.amber.Attention (attn_op.c) */
        st = ORT_FN(api, CustomOpDomain_Add)(domain, amber_attention_op());
    if (st == NULL)
        st = ORT_FN(api, AddCustomOpDomain)(options, domain);
    return st;
}
