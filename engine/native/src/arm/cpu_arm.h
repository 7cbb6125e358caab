/* arm64 feature detection (cpu_arm.c) and the target attributes of the arm64 kernels. Not public
 * API. AMBER_ARM64 is 1 when compiling for arm64 with GCC or clang. */
#ifndef AMBER_CPU_ARM_H
#define AMBER_CPU_ARM_H

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define AMBER_ARM64 1
#else
#define AMBER_ARM64 0
#endif

#if AMBER_ARM64
/* Per-function targets, so one library runs on every arm64 CPU: dispatch.c calls these kernels
 * only where the CPU has the feature. */
#if defined(__clang__)
#define AMBER_TARGET_DOTPROD __attribute__((target("dotprod")))
#define AMBER_TARGET_I8MM __attribute__((target("dotprod,i8mm")))
#else
#define AMBER_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#define AMBER_TARGET_I8MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#endif
int arm_has_dotprod(void);
int arm_has_i8mm(void);
#endif
#endif
