/* Amber's own minimal declarations of the ONNX Runtime C ABI that ort_op.c uses.
 *
 * ONNX Runtime's header is not shipped by any package Amber installs, so this file declares only
 * what the custom op needs, written from the documented ABI:
 *   - OrtApiBase: two function pointers, GetApi(version) then GetVersionString().
 *   - OrtApi: a table of function pointers that only ever grows at its end (ORT keeps every slot
 *     of an older version where it was). We read it as an array of function pointers and index
 *     the slots below.
 *     Slot numbers are those of ORT API version 17 (ONNX Runtime 1.17), the lowest version with
 *     everything used here: KernelContext_ParallelFor is "since 1.17"; CreateKernelV2 /
 *     KernelComputeV2 (error statuses from the kernel) since 16. Requesting 17 works with every
 *     runtime from 1.17 on (Amber's pins: 1.31.1 on Linux/Windows, 1.23.2 on Intel macOS).
 *   - OrtCustomOp: the struct a library hands to ORT, its fields up to version 17; ORT reads only
 *     the fields of the version the struct declares.
 * Opaque ORT types are incomplete structs: this code only passes their pointers back to ORT.
 */
#ifndef AMBER_ORT_ABI_H
#define AMBER_ORT_ABI_H
#include <stddef.h>
#include <stdint.h>

#ifdef _WIN32
#define ORT_CALL __stdcall   /* ignored on x64, but it is the declared convention */
#else
#define ORT_CALL
#endif

#define AMBER_ORT_API_VERSION 17u

typedef struct OrtStatus OrtStatus;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtValue OrtValue;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtShapeInferContext OrtShapeInferContext;

/* ONNX TensorProto element types (the values ORT uses) that this op names. */
enum { ORT_ELEM_UNDEFINED = 0, ORT_ELEM_FLOAT = 1, ORT_ELEM_UINT8 = 2, ORT_ELEM_FLOAT16 = 10 };
/* OrtErrorCode values used here. */
enum { ORT_CODE_FAIL = 1, ORT_CODE_INVALID_ARGUMENT = 2, ORT_CODE_INVALID_GRAPH = 10 };
/* OrtCustomOpInputOutputCharacteristic: 0 required, 1 optional, 2 variadic. */
enum { ORT_IO_REQUIRED = 0 };
/* OrtMemType: 0 is the execution provider's default memory. */
enum { ORT_MEM_DEFAULT = 0 };

typedef struct OrtApiBase {
    const void *(ORT_CALL *GetApi)(uint32_t version);   /* an OrtApi table, or NULL */
    const char *(ORT_CALL *GetVersionString)(void);
} OrtApiBase;

/* Slot indices into the OrtApi table (pointer-sized entries, version 17 layout). */
enum {
    ORT_SLOT_CreateStatus = 0,
    ORT_SLOT_GetErrorMessage = 2,
    ORT_SLOT_CreateCustomOpDomain = 26,
    ORT_SLOT_CustomOpDomain_Add = 27,
    ORT_SLOT_AddCustomOpDomain = 28,
    ORT_SLOT_GetTensorMutableData = 51,
    ORT_SLOT_GetTensorElementType = 60,
    ORT_SLOT_GetDimensionsCount = 61,
    ORT_SLOT_GetDimensions = 62,
    ORT_SLOT_GetTensorShapeElementCount = 64,
    ORT_SLOT_GetTensorTypeAndShape = 65,
    ORT_SLOT_KernelInfoGetAttribute_int64 = 86,
    ORT_SLOT_KernelContext_GetInputCount = 88,
    ORT_SLOT_KernelContext_GetInput = 90,
    ORT_SLOT_KernelContext_GetOutput = 91,
    ORT_SLOT_ReleaseStatus = 93,
    ORT_SLOT_ReleaseTensorTypeAndShapeInfo = 99,
    ORT_SLOT_KernelInfoGetConstantInput_tensor = 249,
    ORT_SLOT_KernelContext_ParallelFor = 274,
};

/* The signatures of those slots. */
typedef OrtStatus *(ORT_CALL *ort_CreateStatus_fn)(int code, const char *msg);
typedef const char *(ORT_CALL *ort_GetErrorMessage_fn)(const OrtStatus *status);
typedef OrtStatus *(ORT_CALL *ort_CreateCustomOpDomain_fn)(const char *domain, OrtCustomOpDomain **out);
typedef OrtStatus *(ORT_CALL *ort_CustomOpDomain_Add_fn)(OrtCustomOpDomain *domain, const void *op);
typedef OrtStatus *(ORT_CALL *ort_AddCustomOpDomain_fn)(OrtSessionOptions *so, OrtCustomOpDomain *domain);
typedef OrtStatus *(ORT_CALL *ort_GetTensorMutableData_fn)(OrtValue *value, void **out);
typedef OrtStatus *(ORT_CALL *ort_GetTensorElementType_fn)(const OrtTensorTypeAndShapeInfo *info, int *out);
typedef OrtStatus *(ORT_CALL *ort_GetDimensionsCount_fn)(const OrtTensorTypeAndShapeInfo *info, size_t *out);
typedef OrtStatus *(ORT_CALL *ort_GetDimensions_fn)(const OrtTensorTypeAndShapeInfo *info, int64_t *dims,
                                                    size_t count);
typedef OrtStatus *(ORT_CALL *ort_GetTensorShapeElementCount_fn)(const OrtTensorTypeAndShapeInfo *info,
                                                                 size_t *out);
typedef OrtStatus *(ORT_CALL *ort_GetTensorTypeAndShape_fn)(const OrtValue *value,
                                                            OrtTensorTypeAndShapeInfo **out);
typedef OrtStatus *(ORT_CALL *ort_KernelInfoGetAttribute_int64_fn)(const OrtKernelInfo *info, const char *name,
                                                                   int64_t *out);
typedef OrtStatus *(ORT_CALL *ort_KernelContext_GetInputCount_fn)(const OrtKernelContext *ctx, size_t *out);
typedef OrtStatus *(ORT_CALL *ort_KernelContext_GetInput_fn)(const OrtKernelContext *ctx, size_t index,
                                                             const OrtValue **out);
typedef OrtStatus *(ORT_CALL *ort_KernelContext_GetOutput_fn)(OrtKernelContext *ctx, size_t index,
                                                              const int64_t *dims, size_t count, OrtValue **out);
typedef void(ORT_CALL *ort_ReleaseStatus_fn)(OrtStatus *status);
typedef void(ORT_CALL *ort_ReleaseTensorTypeAndShapeInfo_fn)(OrtTensorTypeAndShapeInfo *info);
typedef OrtStatus *(ORT_CALL *ort_KernelInfoGetConstantInput_tensor_fn)(const OrtKernelInfo *info, size_t index,
                                                                        int *is_constant, const OrtValue **out);
typedef OrtStatus *(ORT_CALL *ort_KernelContext_ParallelFor_fn)(const OrtKernelContext *ctx,
                                                                void (*fn)(void *user, size_t i), size_t total,
                                                                size_t num_batch, void *user);

/* A slot of an OrtApi table as a typed function pointer. The table is read as an array of
 * generic function pointers (function-to-function pointer casts are valid C; object-to-function
 * ones are not). */
typedef void (*ort_any_fn)(void);
#define ORT_FN(api, name) ((ort_##name##_fn)((const ort_any_fn *)(api))[ORT_SLOT_##name])

/* The custom op struct ORT reads, fields in ABI order up to version 17. */
typedef struct OrtCustomOpV17 {
    uint32_t version;
    void *(ORT_CALL *CreateKernel)(const struct OrtCustomOpV17 *op, const void *api, const OrtKernelInfo *info);
    const char *(ORT_CALL *GetName)(const struct OrtCustomOpV17 *op);
    const char *(ORT_CALL *GetExecutionProviderType)(const struct OrtCustomOpV17 *op);
    int(ORT_CALL *GetInputType)(const struct OrtCustomOpV17 *op, size_t index);
    size_t(ORT_CALL *GetInputTypeCount)(const struct OrtCustomOpV17 *op);
    int(ORT_CALL *GetOutputType)(const struct OrtCustomOpV17 *op, size_t index);
    size_t(ORT_CALL *GetOutputTypeCount)(const struct OrtCustomOpV17 *op);
    void(ORT_CALL *KernelCompute)(void *kernel, OrtKernelContext *ctx);
    void(ORT_CALL *KernelDestroy)(void *kernel);
    int(ORT_CALL *GetInputCharacteristic)(const struct OrtCustomOpV17 *op, size_t index);    /* since 8 */
    int(ORT_CALL *GetOutputCharacteristic)(const struct OrtCustomOpV17 *op, size_t index);   /* since 8 */
    int(ORT_CALL *GetInputMemoryType)(const struct OrtCustomOpV17 *op, size_t index);        /* since 13 */
    int(ORT_CALL *GetVariadicInputMinArity)(const struct OrtCustomOpV17 *op);                /* since 14 */
    int(ORT_CALL *GetVariadicInputHomogeneity)(const struct OrtCustomOpV17 *op);
    int(ORT_CALL *GetVariadicOutputMinArity)(const struct OrtCustomOpV17 *op);
    int(ORT_CALL *GetVariadicOutputHomogeneity)(const struct OrtCustomOpV17 *op);
    OrtStatus *(ORT_CALL *CreateKernelV2)(const struct OrtCustomOpV17 *op, const void *api,
                                          const OrtKernelInfo *info, void **kernel);         /* since 16 */
    OrtStatus *(ORT_CALL *KernelComputeV2)(void *kernel, OrtKernelContext *ctx);             /* since 16 */
    OrtStatus *(ORT_CALL *InferOutputShapeFn)(const struct OrtCustomOpV17 *op,
                                              OrtShapeInferContext *ctx);                    /* since 17 */
    int(ORT_CALL *GetStartVersion)(const struct OrtCustomOpV17 *op);                         /* since 17 */
    int(ORT_CALL *GetEndVersion)(const struct OrtCustomOpV17 *op);                           /* since 17 */
    /* Fields of later versions (in-place and alias maps): ORT reads them only when `version` says
     * so; kept NULL here so even a reader that looked past version 17 would find nothing. */
    void *later_fields[8];
} OrtCustomOpV17;

#endif
