/* Runs one ONNX model through ONNX Runtime's C API with Amber's op library registered, the way
 * SessionOptions.register_custom_ops_library does (OrtApi::RegisterCustomOpsLibrary), so tests can
 * run the Windows onnxruntime.dll and the Windows kernels DLL under wine.
 *
 *   ort_session.exe <ORT DLL> <kernels DLL> <model.onnx> <intra-op threads>
 *
 * stdin: int32 n_inputs, then per input int32 name length, the name, int32 ONNX element type,
 * int32 rank, int64 dims[rank], int64 byte count, the bytes; then int32 n_outputs and per output
 * int32 name length and the name. stdout: per output int32 element type, int32 rank, int64
 * dims[rank], int64 byte count, the bytes. Little-endian. An error prints ORT's message to stderr
 * and exits 1; a malformed request exits 2. Zero-sized inputs (an empty KV cache) are allowed.
 *
 * ORT's declarations come from Amber's own ort_abi.h (the slots the op uses) plus the session
 * slots below, counted in the same OrtApi table (version 17 layout): a wrong slot would call
 * another function, which the tests' comparison with Linux would show. */
#include <fcntl.h>
#include <io.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "ort_abi.h"

typedef struct OrtEnv OrtEnv;
typedef struct OrtSession OrtSession;
typedef struct OrtMemoryInfo OrtMemoryInfo;

enum {
    ORT_SLOT_CreateEnv = 3,
    ORT_SLOT_CreateSession = 7,
    ORT_SLOT_Run = 9,
    ORT_SLOT_CreateSessionOptions = 10,
    ORT_SLOT_SetIntraOpNumThreads = 24,
    ORT_SLOT_RegisterCustomOpsLibrary = 29,
    ORT_SLOT_CreateTensorWithDataAsOrtValue = 49,
    ORT_SLOT_CreateCpuMemoryInfo = 69,
};
typedef OrtStatus *(ORT_CALL *ort_CreateEnv_fn)(int level, const char *logid, OrtEnv **out);
typedef OrtStatus *(ORT_CALL *ort_CreateSession_fn)(const OrtEnv *env, const wchar_t *path,
                                                    const OrtSessionOptions *so, OrtSession **out);
typedef OrtStatus *(ORT_CALL *ort_Run_fn)(OrtSession *s, const void *run_options, const char *const *in_names,
                                          const OrtValue *const *inputs, size_t n_in,
                                          const char *const *out_names, size_t n_out, OrtValue **outputs);
typedef OrtStatus *(ORT_CALL *ort_CreateSessionOptions_fn)(OrtSessionOptions **out);
typedef OrtStatus *(ORT_CALL *ort_SetIntraOpNumThreads_fn)(OrtSessionOptions *so, int n);
typedef OrtStatus *(ORT_CALL *ort_RegisterCustomOpsLibrary_fn)(OrtSessionOptions *so, const char *path,
                                                               void **handle);
typedef OrtStatus *(ORT_CALL *ort_CreateTensorWithDataAsOrtValue_fn)(const OrtMemoryInfo *info, void *data,
                                                                     size_t len, const int64_t *shape,
                                                                     size_t rank, int type, OrtValue **out);
typedef OrtStatus *(ORT_CALL *ort_CreateCpuMemoryInfo_fn)(int allocator, int mem_type, OrtMemoryInfo **out);

#define MAX_IO 64
#define MAX_RANK 8
#define ORT_LOGGING_WARNING 2
#define ORT_ARENA_ALLOCATOR 1

static const void *api;

static void die(int code, const char *what, const char *why) {
    fprintf(stderr, "ort_session: %s: %s\n", what, why);
    exit(code);
}

static void check(OrtStatus *st, const char *what) {
    if (st != NULL)
        die(1, what, ORT_FN(api, GetErrorMessage)(st));
}

static void read_exact(void *p, size_t n) {
    if (n > 0 && fread(p, 1, n, stdin) != n)
        die(2, "stdin", "short read");
}

static void write_exact(const void *p, size_t n) {
    if (n > 0 && fwrite(p, 1, n, stdout) != n)
        die(2, "stdout", "short write");
}

static char *read_name(void) {
    int32_t len;
    read_exact(&len, 4);
    if (len < 0 || len > 4096)
        die(2, "stdin", "bad name length");
    char *s = calloc((size_t)len + 1, 1);
    if (s == NULL)
        die(2, "stdin", "out of memory");
    read_exact(s, (size_t)len);
    return s;
}

static size_t elem_size(int type) {
    switch (type) {
    case 1: case 6: return 4;     /* float, int32 */
    case 7: case 11: return 8;    /* int64, double */
    case 10: return 2;            /* float16 */
    case 2: case 3: case 9: return 1;
    default: return 0;
    }
}

int main(int argc, char **argv) {
    if (argc != 5)
        die(2, "usage", "ort_session.exe <ORT DLL> <kernels DLL> <model.onnx> <threads>");
    if (_setmode(_fileno(stdin), _O_BINARY) == -1 || _setmode(_fileno(stdout), _O_BINARY) == -1)
        die(2, "stdio", "cannot switch to binary");
    HMODULE ort = LoadLibraryA(argv[1]);
    if (ort == NULL)
        die(1, argv[1], "LoadLibrary failed");
    typedef const OrtApiBase *(ORT_CALL *get_base_fn)(void);
    get_base_fn get_base = (get_base_fn)(void (*)(void))GetProcAddress(ort, "OrtGetApiBase");
    if (get_base == NULL)
        die(1, argv[1], "no OrtGetApiBase");
    api = get_base()->GetApi(AMBER_ORT_API_VERSION);
    if (api == NULL)
        die(1, argv[1], "no OrtApi of version 17");

    OrtEnv *env;
    OrtSessionOptions *so;
    OrtSession *session;
    OrtMemoryInfo *cpu;
    void *lib_handle;
    check(ORT_FN(api, CreateEnv)(ORT_LOGGING_WARNING, "amber", &env), "CreateEnv");
    check(ORT_FN(api, CreateSessionOptions)(&so), "CreateSessionOptions");
    check(ORT_FN(api, SetIntraOpNumThreads)(so, atoi(argv[4])), "SetIntraOpNumThreads");
    check(ORT_FN(api, RegisterCustomOpsLibrary)(so, argv[2], &lib_handle), "RegisterCustomOpsLibrary");
    wchar_t model[MAX_PATH];   /* by path, so ORT finds the model's external data beside it */
    if (MultiByteToWideChar(CP_UTF8, 0, argv[3], -1, model, MAX_PATH) == 0)
        die(2, argv[3], "path too long");
    check(ORT_FN(api, CreateSession)(env, model, so, &session), "CreateSession");
    check(ORT_FN(api, CreateCpuMemoryInfo)(ORT_ARENA_ALLOCATOR, ORT_MEM_DEFAULT, &cpu), "CreateCpuMemoryInfo");

    int32_t n_in, n_out;
    read_exact(&n_in, 4);
    if (n_in < 0 || n_in > MAX_IO)
        die(2, "stdin", "bad input count");
    const char *in_names[MAX_IO];
    OrtValue *inputs[MAX_IO];
    for (int i = 0; i < n_in; i++) {
        int32_t type, rank;
        int64_t dims[MAX_RANK], nbytes, count = 1;
        in_names[i] = read_name();
        read_exact(&type, 4);
        read_exact(&rank, 4);
        if (rank < 0 || rank > MAX_RANK || elem_size(type) == 0)
            die(2, in_names[i], "bad type or rank");
        read_exact(dims, (size_t)rank * 8);
        read_exact(&nbytes, 8);
        for (int d = 0; d < rank; d++) {
            if (dims[d] < 0 || dims[d] > ((int64_t)1 << 32))
                die(2, in_names[i], "bad dimension");
            count *= dims[d];
        }
        if (nbytes != count * (int64_t)elem_size(type))
            die(2, in_names[i], "byte count does not match the shape");
        void *data = malloc((size_t)nbytes + 1);
        if (data == NULL)
            die(2, in_names[i], "out of memory");
        read_exact(data, (size_t)nbytes);
        check(ORT_FN(api, CreateTensorWithDataAsOrtValue)(cpu, data, (size_t)nbytes, dims, (size_t)rank, type,
                                                           &inputs[i]), in_names[i]);
    }
    read_exact(&n_out, 4);
    if (n_out < 0 || n_out > MAX_IO)
        die(2, "stdin", "bad output count");
    const char *out_names[MAX_IO];
    OrtValue *outputs[MAX_IO] = {0};
    for (int i = 0; i < n_out; i++)
        out_names[i] = read_name();
    check(ORT_FN(api, Run)(session, NULL, in_names, (const OrtValue *const *)inputs, (size_t)n_in, out_names,
                           (size_t)n_out, outputs), "Run");

    for (int i = 0; i < n_out; i++) {
        OrtTensorTypeAndShapeInfo *info;
        int type;
        size_t rank, count;
        int64_t dims[MAX_RANK];
        void *data;
        check(ORT_FN(api, GetTensorTypeAndShape)(outputs[i], &info), out_names[i]);
        check(ORT_FN(api, GetTensorElementType)(info, &type), out_names[i]);
        check(ORT_FN(api, GetDimensionsCount)(info, &rank), out_names[i]);
        if (rank > MAX_RANK || elem_size(type) == 0)
            die(1, out_names[i], "output type or rank not handled");
        check(ORT_FN(api, GetDimensions)(info, dims, rank), out_names[i]);
        check(ORT_FN(api, GetTensorShapeElementCount)(info, &count), out_names[i]);
        ORT_FN(api, ReleaseTensorTypeAndShapeInfo)(info);
        check(ORT_FN(api, GetTensorMutableData)(outputs[i], &data), out_names[i]);
        int32_t t32 = type, r32 = (int32_t)rank;
        int64_t nbytes = (int64_t)(count * elem_size(type));
        write_exact(&t32, 4);
        write_exact(&r32, 4);
        write_exact(dims, rank * 8);
        write_exact(&nbytes, 8);
        write_exact(data, (size_t)nbytes);
    }
    fflush(stdout);
    return 0;
}
