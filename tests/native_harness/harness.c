/* Runs the native kernels on requests read from stdin and writes their results to stdout, so
 * tests can drive a library built for another architecture under an emulator (qemu-aarch64).
 * Compiled together with every C source of engine/native/src into one static executable.
 *
 * Request: int32 op, int32 nargs, int64 args[nargs], int32 nbufs, then per buffer int64 length
 * and its bytes. Reply: int32 rc, int32 nbufs, then per buffer int64 length and its bytes.
 * All little-endian (the host's order). Ops:
 *   1 set_isa       bufs: name                   rc: amber_set_isa
 *   2 isa           -                            bufs: the current ISA's name
 *   3 quantize      args: type, m, k; bufs: x    bufs: m rows of amber_act_bytes(type, k)
 *   4 gemm          args: type, m, k, n0, n1, ldy; bufs: act, w, y   rc; bufs: y after the call
 *   5 silu_mul      bufs: g, u                   bufs: y
 *   6 silu_path     -                            bufs: the current path's name
 *   7 attention     args: b, s, hq, hkv, d, cap, rot, window, float32 bits of scale and softcap;
 *                   bufs: q [b,s,hq*d], k, v [b,s,hkv*d] float32, cos, sin [rows][rot/2] float32,
 *                   seqlens [b] int32, past_k, past_v [b,hkv,cap,d] float16
 *                   rc: 0 or attn_task's -1; bufs: out [b,s,hq*d] float32, present k, v float16
 *   8 set_silu_path bufs: name                   rc: amber_set_silu_path
 * A malformed request ends the program with exit status 2. On Windows it is linked against the
 * kernels DLL instead (tests run it under wine), its stdin and stdout switched to binary; the DLL
 * exports only amber_kernels.h, so op 7 (attn.h's internals) is left out there (AMBER_HARNESS_DLL). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amber_kernels.h"
#include "attn.h"

#ifdef _WIN32
#include <fcntl.h>
#include <io.h>
#endif

#define MAX_ARGS 16
#define MAX_BUFS 8

typedef struct {
    int64_t len;
    uint8_t *data;
} buf;

static void die(const char *why) {
    fprintf(stderr, "harness: %s\n", why);
    exit(2);
}

static void read_exact(void *p, size_t n) {
    if (n > 0 && fread(p, 1, n, stdin) != n)
        die("short read");
}

static void write_exact(const void *p, size_t n) {
    if (n > 0 && fwrite(p, 1, n, stdout) != n)
        die("short write");
}

static void reply(int32_t rc, int32_t nbufs, const buf *bufs) {
    write_exact(&rc, 4);
    write_exact(&nbufs, 4);
    for (int i = 0; i < nbufs; i++) {
        write_exact(&bufs[i].len, 8);
        write_exact(bufs[i].data, (size_t)bufs[i].len);
    }
}

static void reply_str(const char *s) {
    buf b = {(int64_t)strlen(s), (uint8_t *)(uintptr_t)s};
    reply(0, 1, &b);
}

static char *cstr(const buf *b) {
    char *s = malloc((size_t)b->len + 1);
    if (s == NULL)
        die("out of memory");
    memcpy(s, b->data, (size_t)b->len);
    s[b->len] = 0;
    return s;
}

static void need(int nargs, int want_args, int nbufs, int want_bufs) {
    if (nargs != want_args || nbufs != want_bufs)
        die("wrong argument count");
}

int main(void) {
#ifdef _WIN32
    if (_setmode(_fileno(stdin), _O_BINARY) == -1 || _setmode(_fileno(stdout), _O_BINARY) == -1)
        die("cannot switch stdin/stdout to binary");
#endif
    int32_t op;
    while (fread(&op, 1, 4, stdin) == 4) {
        int32_t nargs, nbufs;
        int64_t a[MAX_ARGS];
        buf b[MAX_BUFS];
        read_exact(&nargs, 4);
        if (nargs < 0 || nargs > MAX_ARGS)
            die("too many arguments");
        read_exact(a, (size_t)nargs * 8);
        read_exact(&nbufs, 4);
        if (nbufs < 0 || nbufs > MAX_BUFS)
            die("too many buffers");
        for (int i = 0; i < nbufs; i++) {
            read_exact(&b[i].len, 8);
            if (b[i].len < 0 || b[i].len > ((int64_t)1 << 32))
                die("bad buffer length");
            b[i].data = malloc((size_t)b[i].len + 1);
            if (b[i].data == NULL)
                die("out of memory");
            read_exact(b[i].data, (size_t)b[i].len);
        }
        switch (op) {
        case 1: {
            need(nargs, 0, nbufs, 1);
            char *name = cstr(&b[0]);
            reply(amber_set_isa(name), 0, NULL);
            free(name);
            break;
        }
        case 2: need(nargs, 0, nbufs, 0); reply_str(amber_isa()); break;
        case 3: {
            need(nargs, 3, nbufs, 1);
            int type = (int)a[0];
            int64_t m = a[1], k = a[2], ab = amber_act_bytes(type, k);
            if (ab < 0 || m < 0 || b[0].len != m * k * 4)
                die("quantize: bad shape");
            buf out = {m * ab, calloc((size_t)(m * ab) + 1, 1)};
            int32_t rc = 0;
            for (int64_t i = 0; i < m && rc == 0; i++)
                rc = amber_quantize_act(type, (const float *)(void *)b[0].data + i * k, k, out.data + i * ab);
            reply(rc, 1, &out);
            free(out.data);
            break;
        }
        case 4: {
            need(nargs, 6, nbufs, 3);
            int type = (int)a[0];
            int64_t m = a[1], k = a[2], n0 = a[3], n1 = a[4], ldy = a[5];
            int64_t ab = amber_act_bytes(type, k), rb = amber_row_bytes(type, k);
            if (ab < 0 || m < 0 || n1 < n0 || n0 < 0 || b[0].len < m * ab || b[1].len < n1 * rb ||
                (m > 0 && b[2].len < ((m - 1) * ldy + n1) * 4))
                die("gemm: buffers too small");
            int32_t rc = amber_gemm_rows(type, b[0].data, m, b[1].data, k, n0, n1,
                                         (float *)(void *)b[2].data, ldy);
            reply(rc, 1, &b[2]);
            break;
        }
        case 5: {
            need(nargs, 0, nbufs, 2);
            if (b[0].len != b[1].len || b[0].len % 4 != 0)
                die("silu_mul: g and u differ in size");
            buf out = {b[0].len, malloc((size_t)b[0].len + 1)};
            amber_silu_mul((const float *)(void *)b[0].data, (const float *)(void *)b[1].data,
                           (float *)(void *)out.data, b[0].len / 4);
            reply(0, 1, &out);
            free(out.data);
            break;
        }
        case 6: need(nargs, 0, nbufs, 0); reply_str(amber_silu_path()); break;
        case 7: {
#ifdef AMBER_HARNESS_DLL
            die("attention: not in a harness linked against the DLL");
#else
            need(nargs, 10, nbufs, 8);
            attn_args t;
            memset(&t, 0, sizeof t);
            t.b = a[0], t.s = a[1], t.hq = a[2], t.hkv = a[3], t.d = a[4], t.cap = a[5];
            t.past_cap = t.cap, t.rot = a[6], t.window = a[7];
            uint32_t sb = (uint32_t)a[8], cb = (uint32_t)a[9];
            memcpy(&t.scale, &sb, 4);
            memcpy(&t.softcap, &cb, 4);
            t.q_stride = t.hq * t.d, t.kv_stride = t.hkv * t.d;
            int64_t kv = t.b * t.hkv * t.cap * t.d, o = t.b * t.s * t.hq * t.d;
            if (t.b < 1 || t.s < 1 || t.hkv < 1 || t.hq % t.hkv != 0 || t.d < 1 ||
                b[0].len != o * 4 || b[1].len != t.b * t.s * t.kv_stride * 4 || b[2].len != b[1].len ||
                b[3].len != b[4].len || b[5].len != t.b * 4 || b[6].len != kv * 2 || b[7].len != kv * 2)
                die("attention: bad shapes");
            t.cos_rows = t.rot > 0 ? b[3].len / (t.rot / 2 * 4) : 0;
            t.q = (const float *)(void *)b[0].data, t.k = (const float *)(void *)b[1].data;
            t.v = (const float *)(void *)b[2].data;
            t.cos = (const float *)(void *)b[3].data, t.sin = (const float *)(void *)b[4].data;
            t.seqlens = (const int32_t *)(void *)b[5].data;
            t.past_k = (const uint16_t *)(void *)b[6].data, t.past_v = (const uint16_t *)(void *)b[7].data;
            buf out[3] = {{o * 4, calloc((size_t)o + 1, 4)}, {kv * 2, calloc((size_t)kv + 1, 2)},
                          {kv * 2, calloc((size_t)kv + 1, 2)}};
            t.out = (float *)(void *)out[0].data;
            t.k_out = (uint16_t *)(void *)out[1].data, t.v_out = (uint16_t *)(void *)out[2].data;
            for (int64_t i = 0; i < attn_kv_tasks(&t); i++)
                attn_kv_task(&t, i);
            int32_t rc = 0;
            for (int64_t i = 0; i < attn_tasks(&t) && rc == 0; i++)
                rc = attn_task(&t, i);
            reply(rc, 3, out);
            for (int i = 0; i < 3; i++)
                free(out[i].data);
#endif
            break;
        }
        case 8: {
            need(nargs, 0, nbufs, 1);
            char *name = cstr(&b[0]);
            reply(amber_set_silu_path(name), 0, NULL);
            free(name);
            break;
        }
        default: die("unknown op");
        }
        for (int i = 0; i < nbufs; i++)
            free(b[i].data);
        fflush(stdout);
    }
    return 0;
}
