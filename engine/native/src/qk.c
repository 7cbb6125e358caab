/* Q4_K Q5_K Q6_K (super-blocks of 256). PLACEHOLDER: handles nothing until the family lands. */
#include "family.h"

int qk_handles(int type) { (void)type; return 0; }
int64_t qk_row_bytes(int type, int64_t k) { (void)type; (void)k; return -1; }
int64_t qk_act_bytes(int type, int64_t k) { (void)type; (void)k; return -1; }
void qk_quantize_act(int type, const float *x, int64_t k, void *out) { (void)type; (void)x; (void)k; (void)out; }
void qk_gemm_rows(int type, const void *act, int64_t m, const uint8_t *w, int64_t k,
                  int64_t n0, int64_t n1, float *y, int64_t ldy) {
    (void)type; (void)act; (void)m; (void)w; (void)k; (void)n0; (void)n1; (void)y; (void)ldy;
}
