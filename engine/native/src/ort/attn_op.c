/* The ONNX Runtime custom op ai.amber.Attention: com.microsoft.GroupQueryAttention's contract as
 * Amber's graphs use it, over float16 KV (attn.c has the computation).
 *
 * Inputs: query float32 [B, S, Hq*D] (or packed Q|K|V [B, S, (Hq + 2 Hkv) * D] with key and value
 * absent), key, value float32 [B, S, Hkv*D], past_key, past_value float16 [B, Hkv, P, D],
 * seqlens_k int32 [B] (valid positions after the step - 1), total_sequence_length int32 [1],
 * cos_cache, sin_cache float32 [rows, rot/2]. Attributes num_heads, kv_num_heads, do_rotary,
 * rotary_interleaved (0 only), scale (0: 1/sqrt(D)), local_window_size, softcap. Outputs: float32
 * [B, S, Hq*D], present_key, present_value float16 [B, Hkv, max(P, total_sequence_length), D]:
 * the past's own buffers when ORT binds them as the outputs (only the new positions are written),
 * else new ones with the valid past copied. Every shape, length and attribute is checked before
 * any memory is touched; a bad node gets an ORT error with a one-line message.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "ort_abi.h"

#define OP_NAME "Attention"
#define MAX_HEADS 4096
#define MAX_D 1024
#define MAX_POS ((int64_t)1 << 24)

enum { SLOT_KernelInfoGetAttribute_float = 85, SLOT_GetTensorData = 51 };
typedef OrtStatus *(ORT_CALL *get_float_fn)(const OrtKernelInfo *info, const char *name, float *out);
enum { ORT_ELEM_INT32 = 6, ORT_IO_OPTIONAL = 1 };

typedef struct {
    const void *api;
    int64_t hq, hkv, rotary, window;
    float scale, softcap;
} attn_kernel;

static OrtStatus *fail(const void *api, int code, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    int len = snprintf(msg, sizeof msg, "%s: ", OP_NAME);
    vsnprintf(msg + len, sizeof msg - (size_t)len, fmt, ap);
    va_end(ap);
    return ORT_FN(api, CreateStatus)(code, msg);
}

/* An optional int attribute (def when absent). */
static int64_t int_attr(const void *api, const OrtKernelInfo *info, const char *name, int64_t def, int *found) {
    int64_t v = def;
    OrtStatus *st = ORT_FN(api, KernelInfoGetAttribute_int64)(info, name, &v);
    if (st != NULL) {
        ORT_FN(api, ReleaseStatus)(st);
        v = def;
        if (found)
            *found = 0;
    } else if (found) {
        *found = 1;
    }
    return v;
}

static float float_attr(const void *api, const OrtKernelInfo *info, const char *name, float def) {
    float v = def;
    get_float_fn get = (get_float_fn)((const ort_any_fn *)api)[SLOT_KernelInfoGetAttribute_float];
    OrtStatus *st = get(info, name, &v);
    if (st != NULL) {
        ORT_FN(api, ReleaseStatus)(st);
        v = def;
    }
    return v;
}

static OrtStatus *ORT_CALL create_kernel(const OrtCustomOpV17 *op, const void *api, const OrtKernelInfo *info,
                                         void **out) {
    (void)op;
    *out = NULL;
    if (api == NULL)
        return NULL;
    int has_hq = 0, has_hkv = 0;
    int64_t hq = int_attr(api, info, "num_heads", 0, &has_hq), hkv = int_attr(api, info, "kv_num_heads", 0, &has_hkv);
    int64_t rotary = int_attr(api, info, "do_rotary", 0, NULL);
    int64_t inter = int_attr(api, info, "rotary_interleaved", 0, NULL);
    int64_t window = int_attr(api, info, "local_window_size", -1, NULL);
    float scale = float_attr(api, info, "scale", 0.0f), softcap = float_attr(api, info, "softcap", 0.0f);
    if (!has_hq || !has_hkv)
        return fail(api, ORT_CODE_INVALID_GRAPH, "the int attributes num_heads and kv_num_heads are required");
    if (hq <= 0 || hkv <= 0 || hq > MAX_HEADS || hkv > hq || hq % hkv != 0)
        return fail(api, ORT_CODE_INVALID_GRAPH,
                    "num_heads = %lld and kv_num_heads = %lld: need 1 <= kv_num_heads <= num_heads <= %d, "
                    "num_heads a multiple of kv_num_heads", (long long)hq, (long long)hkv, MAX_HEADS);
    if (rotary != 0 && rotary != 1)
        return fail(api, ORT_CODE_INVALID_GRAPH, "do_rotary = %lld (0 or 1)", (long long)rotary);
    if (inter != 0)
        return fail(api, ORT_CODE_INVALID_GRAPH, "rotary_interleaved = %lld is not supported (0 only)", (long long)inter);
    if (window < -1 || window > MAX_POS)
        return fail(api, ORT_CODE_INVALID_GRAPH, "local_window_size = %lld is out of range", (long long)window);
    if (!isfinite(scale) || scale < 0.0f)
        return fail(api, ORT_CODE_INVALID_GRAPH, "scale = %g is not a finite value >= 0", (double)scale);
    if (!isfinite(softcap) || softcap < 0.0f)
        return fail(api, ORT_CODE_INVALID_GRAPH, "softcap = %g is not a finite value >= 0", (double)softcap);
    attn_kernel *k = malloc(sizeof *k);
    if (k == NULL)
        return fail(api, ORT_CODE_FAIL, "out of memory");
    k->api = api;
    k->hq = hq;
    k->hkv = hkv;
    k->rotary = rotary;
    k->window = window;
    k->scale = scale;
    k->softcap = softcap;
    *out = k;
    return NULL;
}

static void ORT_CALL destroy_kernel(void *kernel) { free(kernel); }

typedef struct {
    int elem;
    size_t rank, count;
    int64_t dims[8];
    void *data;
} tensor_t;

/* Element type, shape (rank <= 8) and data of input i; *present = 0 when it is absent. */
static OrtStatus *input(const void *api, const OrtKernelContext *ctx, size_t i, tensor_t *t, int *present) {
    const OrtValue *v = NULL;
    memset(t, 0, sizeof *t);
    *present = 0;
    OrtStatus *st = ORT_FN(api, KernelContext_GetInput)(ctx, i, &v);
    if (st != NULL || v == NULL)
        return st;
    OrtTensorTypeAndShapeInfo *info = NULL;
    st = ORT_FN(api, GetTensorTypeAndShape)(v, &info);
    if (st == NULL)
        st = ORT_FN(api, GetTensorElementType)(info, &t->elem);
    if (st == NULL)
        st = ORT_FN(api, GetDimensionsCount)(info, &t->rank);
    if (st == NULL && t->rank > 8)
        st = fail(api, ORT_CODE_INVALID_ARGUMENT, "input %d has rank %d (at most 8)", (int)i, (int)t->rank);
    if (st == NULL)
        st = ORT_FN(api, GetDimensions)(info, t->dims, t->rank);
    if (st == NULL)
        st = ORT_FN(api, GetTensorShapeElementCount)(info, &t->count);
    if (info != NULL)
        ORT_FN(api, ReleaseTensorTypeAndShapeInfo)(info);
    if (st == NULL)
        st = ORT_FN(api, GetTensorMutableData)((OrtValue *)v, &t->data);
    if (st == NULL)
        *present = 1;
    return st;
}

static const char *const NAMES[9] = {"query", "key", "value", "past_key", "past_value", "seqlens_k",
                                     "total_sequence_length", "cos_cache", "sin_cache"};

static void kv_fn(void *user, size_t t) { attn_kv_task(user, (int64_t)t); }
static void combine_fn(void *user, size_t t) { attn_combine_task(user, (int64_t)t); }

typedef struct {
    attn_args a;
    volatile int failed;
} run_t;

static void attn_fn(void *user, size_t t) {
    run_t *r = user;
    if (attn_task(&r->a, (int64_t)t) != 0)
        r->failed = 1;
}

static OrtStatus *parallel(const void *api, const OrtKernelContext *ctx, void (*fn)(void *, size_t), size_t n,
                           void *user) {
    if (n == 0)
        return NULL;
    if (n == 1) {
        fn(user, 0);
        return NULL;
    }
    return ORT_FN(api, KernelContext_ParallelFor)(ctx, fn, n, 0, user);
}

static OrtStatus *compute(const attn_kernel *kn, OrtKernelContext *ctx) {
    const void *api = kn->api;
    size_t n_in = 0;
    OrtStatus *st = ORT_FN(api, KernelContext_GetInputCount)(ctx, &n_in);
    if (st != NULL)
        return st;
    if (n_in < 7 || n_in > 9)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "expects 7 to 9 inputs, got %d", (int)n_in);
    tensor_t in[9];
    int has[9] = {0};
    for (size_t i = 0; i < 9; i++) {
        memset(&in[i], 0, sizeof in[i]);
        if (i < n_in && (st = input(api, ctx, i, &in[i], &has[i])) != NULL)
            return st;
    }
    static const int TYPES[9] = {ORT_ELEM_FLOAT, ORT_ELEM_FLOAT, ORT_ELEM_FLOAT, ORT_ELEM_FLOAT16, ORT_ELEM_FLOAT16,
                                 ORT_ELEM_INT32, ORT_ELEM_INT32, ORT_ELEM_FLOAT, ORT_ELEM_FLOAT};
    static const int REQUIRED[9] = {1, 0, 0, 1, 1, 1, 1, 0, 0};
    for (int i = 0; i < 9; i++) {
        if (REQUIRED[i] && !has[i])
            return fail(api, ORT_CODE_INVALID_ARGUMENT, "the input %s is missing", NAMES[i]);
        if (has[i] && in[i].elem != TYPES[i])
            return fail(api, ORT_CODE_INVALID_ARGUMENT, "%s has element type %d, expected %d", NAMES[i], in[i].elem,
                        TYPES[i]);
    }
    const tensor_t *q = &in[0], *pk = &in[3], *pv = &in[4];
    if (pk->rank != 4 || pv->rank != 4 || memcmp(pk->dims, pv->dims, 4 * sizeof pk->dims[0]) != 0)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "past_key and past_value must both be [B, kv_num_heads, P, D]");
    int64_t b = pk->dims[0], hkv = pk->dims[1], pcap = pk->dims[2], d = pk->dims[3], hq = kn->hq;
    if (hkv != kn->hkv)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "past_key has %lld heads, kv_num_heads is %lld", (long long)hkv,
                    (long long)kn->hkv);
    if (d <= 0 || d > MAX_D || b <= 0 || b > 65536 || pcap < 0 || pcap > MAX_POS)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "past_key's shape [%lld, %lld, %lld, %lld] is out of range",
                    (long long)b, (long long)hkv, (long long)pcap, (long long)d);
    if (q->rank != 3 || q->dims[0] != b)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "query must be [B, S, hidden] with B = %lld", (long long)b);
    int64_t s = q->dims[1];
    if (s < 0 || s > MAX_POS)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "query's sequence length %lld is out of range", (long long)s);
    attn_args a;
    memset(&a, 0, sizeof a);
    if (has[1] != has[2])
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "key and value must both be given or both be absent");
    if (!has[1]) {
        if (q->dims[2] != (hq + 2 * hkv) * d)
            return fail(api, ORT_CODE_INVALID_ARGUMENT, "packed query's last dimension is %lld, expected %lld",
                        (long long)q->dims[2], (long long)((hq + 2 * hkv) * d));
        a.q = q->data;
        a.k = (const float *)q->data + hq * d;
        a.v = (const float *)q->data + (hq + hkv) * d;
        a.q_stride = a.kv_stride = (hq + 2 * hkv) * d;
    } else {
        const tensor_t *k = &in[1], *v = &in[2];
        if (q->dims[2] != hq * d)
            return fail(api, ORT_CODE_INVALID_ARGUMENT, "query's last dimension is %lld, expected %lld",
                        (long long)q->dims[2], (long long)(hq * d));
        if (k->rank != 3 || v->rank != 3 || k->dims[0] != b || k->dims[1] != s || k->dims[2] != hkv * d ||
            memcmp(k->dims, v->dims, 3 * sizeof k->dims[0]) != 0)
            return fail(api, ORT_CODE_INVALID_ARGUMENT, "key and value must be [%lld, %lld, %lld]", (long long)b,
                        (long long)s, (long long)(hkv * d));
        a.q = q->data;
        a.k = k->data;
        a.v = v->data;
        a.q_stride = hq * d;
        a.kv_stride = hkv * d;
    }
    if ((int64_t)in[5].count != b)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "seqlens_k holds %lld values, batch is %lld",
                    (long long)in[5].count, (long long)b);
    if (in[6].count != 1)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "total_sequence_length must hold one value");
    int64_t total = *(const int32_t *)in[6].data;
    if (total < 0 || total > MAX_POS)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "total_sequence_length = %lld is out of range", (long long)total);
    int64_t cap = pcap > total ? pcap : total;
    if (kn->rotary) {
        const tensor_t *c = &in[7], *sn = &in[8];
        if (!has[7] || !has[8])
            return fail(api, ORT_CODE_INVALID_ARGUMENT, "do_rotary = 1 needs cos_cache and sin_cache");
        if (c->rank != 2 || sn->rank != 2 || c->dims[0] != sn->dims[0] || c->dims[1] != sn->dims[1] ||
            c->dims[1] <= 0 || 2 * c->dims[1] > d)
            return fail(api, ORT_CODE_INVALID_ARGUMENT, "cos_cache and sin_cache must both be [rows, r] with 2r <= %lld",
                        (long long)d);
        a.rot = 2 * c->dims[1];
        a.cos_rows = c->dims[0];
        a.cos = c->data;
        a.sin = sn->data;
    }
    const int32_t *seq = in[5].data;
    for (int64_t i = 0; i < b; i++) {
        int64_t tb = (int64_t)seq[i] + 1, past = tb - s;
        if (past < 0 || tb > cap)
            return fail(api, ORT_CODE_INVALID_ARGUMENT,
                        "seqlens_k[%lld] = %d does not fit: %lld new tokens, %lld positions in the present KV",
                        (long long)i, seq[i], (long long)s, (long long)cap);
        if (past > pcap)   /* the past is read from past_key: it must hold that many positions */
            return fail(api, ORT_CODE_INVALID_ARGUMENT,
                        "seqlens_k[%lld] = %d means %lld past positions, past_key holds %lld", (long long)i, seq[i],
                        (long long)past, (long long)pcap);
        if (a.rot > 0 && tb > a.cos_rows)
            return fail(api, ORT_CODE_INVALID_ARGUMENT, "position %lld is beyond cos_cache's %lld rows",
                        (long long)(tb - 1), (long long)a.cos_rows);
    }
    int64_t out_dims[3] = {b, s, hq * d}, kv_dims[4] = {b, hkv, cap, d};
    OrtValue *ov = NULL, *okv = NULL, *ovv = NULL;
    if ((st = ORT_FN(api, KernelContext_GetOutput)(ctx, 0, out_dims, 3, &ov)) ||
        (st = ORT_FN(api, KernelContext_GetOutput)(ctx, 1, kv_dims, 4, &okv)) ||
        (st = ORT_FN(api, KernelContext_GetOutput)(ctx, 2, kv_dims, 4, &ovv)))
        return st;
    void *outp = NULL, *kout = NULL, *vout = NULL;
    if ((st = ORT_FN(api, GetTensorMutableData)(ov, &outp)) || (st = ORT_FN(api, GetTensorMutableData)(okv, &kout)) ||
        (st = ORT_FN(api, GetTensorMutableData)(ovv, &vout)))
        return st;
    a.b = b;
    a.s = s;
    a.hq = hq;
    a.hkv = hkv;
    a.d = d;
    a.cap = cap;
    a.past_cap = pcap;
    a.window = kn->window;
    a.scale = kn->scale > 0.0f ? kn->scale : 1.0f / sqrtf((float)d);
    a.softcap = kn->softcap;
    a.seqlens = seq;
    a.k_out = kout;
    a.v_out = vout;
    a.out = outp;
    int shared_k = kout == pk->data, shared_v = vout == pv->data;
    if (shared_k != shared_v)
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "present_key and present_value must both share their past or neither");
    if (!shared_k) {
        a.past_k = pk->data;
        a.past_v = pv->data;
    } else if (cap != pcap) {
        return fail(api, ORT_CODE_INVALID_ARGUMENT, "a shared past/present buffer cannot grow");
    }
    if (s == 0)
        return NULL;
    run_t r;
    r.a = a;
    r.failed = 0;
    if ((st = parallel(api, ctx, kv_fn, (size_t)attn_kv_tasks(&r.a), &r.a)) != NULL)
        return st;
    /* a decode step over a long context: a task per key window too, so every thread works even
     * with fewer KV heads than threads (135M: 3 heads on 2 threads left one idle a third of the time) */
    r.a.splits = attn_splits(&r.a);
    float *part = r.a.splits > 1 ? malloc(attn_part_floats(&r.a) * sizeof(float)) : NULL;
    if (part == NULL)
        r.a.splits = 1;   /* one task a head folds every window itself: the same bits */
    r.a.part = part;
    if ((st = parallel(api, ctx, attn_fn, (size_t)attn_tasks(&r.a), &r)) != NULL ||
        (!r.failed && (st = parallel(api, ctx, combine_fn, (size_t)attn_combine_tasks(&r.a), &r.a)) != NULL)) {
        free(part);
        return st;
    }
    free(part);
    return r.failed ? fail(api, ORT_CODE_FAIL, "out of memory for the attention scratch") : NULL;
}

static OrtStatus *ORT_CALL compute_v2(void *kernel, OrtKernelContext *ctx) { return compute(kernel, ctx); }

static const char *ORT_CALL op_name(const OrtCustomOpV17 *op) { (void)op; return OP_NAME; }
static const char *ORT_CALL op_provider(const OrtCustomOpV17 *op) { (void)op; return NULL; }
static int ORT_CALL input_type(const OrtCustomOpV17 *op, size_t i) {
    (void)op;
    return i == 3 || i == 4 ? ORT_ELEM_FLOAT16 : (i == 5 || i == 6 ? ORT_ELEM_INT32 : ORT_ELEM_FLOAT);
}
static size_t ORT_CALL input_count(const OrtCustomOpV17 *op) { (void)op; return 9; }
static int ORT_CALL output_type(const OrtCustomOpV17 *op, size_t i) {
    (void)op;
    return i == 0 ? ORT_ELEM_FLOAT : ORT_ELEM_FLOAT16;
}
static size_t ORT_CALL output_count(const OrtCustomOpV17 *op) { (void)op; return 3; }
static int ORT_CALL input_char(const OrtCustomOpV17 *op, size_t i) {
    (void)op;
    return i == 1 || i == 2 || i == 7 || i == 8 ? ORT_IO_OPTIONAL : ORT_IO_REQUIRED;
}
static int ORT_CALL output_char(const OrtCustomOpV17 *op, size_t i) { (void)op; (void)i; return ORT_IO_REQUIRED; }
static int ORT_CALL input_memory(const OrtCustomOpV17 *op, size_t i) { (void)op; (void)i; return ORT_MEM_DEFAULT; }
static int ORT_CALL variadic_arity(const OrtCustomOpV17 *op) { (void)op; return 1; }
static int ORT_CALL variadic_homogeneous(const OrtCustomOpV17 *op) { (void)op; return 1; }

static const OrtCustomOpV17 ATTENTION = {
    .version = AMBER_ORT_API_VERSION,
    .GetName = op_name,
    .GetExecutionProviderType = op_provider,
    .GetInputType = input_type,
    .GetInputTypeCount = input_count,
    .GetOutputType = output_type,
    .GetOutputTypeCount = output_count,
    .KernelDestroy = destroy_kernel,
    .GetInputCharacteristic = input_char,
    .GetOutputCharacteristic = output_char,
    .GetInputMemoryType = input_memory,
    .GetVariadicInputMinArity = variadic_arity,
    .GetVariadicInputHomogeneity = variadic_homogeneous,
    .GetVariadicOutputMinArity = variadic_arity,
    .GetVariadicOutputHomogeneity = variadic_homogeneous,
    .CreateKernelV2 = create_kernel,
    .KernelComputeV2 = compute_v2,
};

const void *amber_attention_op(void) { return &ATTENTION; }
