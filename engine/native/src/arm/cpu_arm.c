/* Which optional arm64 instructions this CPU runs: SDOT/UDOT (FEAT_DotProd) and SMMLA (FEAT_I8MM).
 * Advanced SIMD (NEON) itself is part of every arm64 CPU. Linux asks the kernel's hwcaps, macOS
 * sysctl; elsewhere neither is assumed. Empty on other architectures. */
#include "cpu_arm.h"

#if AMBER_ARM64
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1UL << 13)
#endif
int arm_has_dotprod(void) { return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0; }
int arm_has_i8mm(void) { return (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0; }
#elif defined(__APPLE__)
#include <sys/sysctl.h>
static int sysctl_flag(const char *name) {
    int v = 0;
    size_t len = sizeof v;
    return sysctlbyname(name, &v, &len, NULL, 0) == 0 && v != 0;
}
int arm_has_dotprod(void) { return sysctl_flag("hw.optional.arm.FEAT_DotProd"); }
int arm_has_i8mm(void) { return sysctl_flag("hw.optional.arm.FEAT_I8MM"); }
#else
int arm_has_dotprod(void) { return 0; }
int arm_has_i8mm(void) { return 0; }
#endif
#else
typedef int amber_cpu_arm_empty;   /* ISO C: a translation unit declares something */
#endif
