// AMX detection and Linux's permission for tile data (amx.h).
#include "kernels/cpu/amx.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace qwen35::kernels::cpu {
namespace {

#if defined(__x86_64__)
uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}
#endif

// What the hardware and the OS allow, asked once.
AmxStatus detect() {
  AmxStatus s;
#if !defined(__x86_64__)
  s.why_not = "no AMX on this architecture";
#else
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) {
    s.why_not = "no AMX-INT8 on this CPU (no CPUID leaf 7)";
    return s;
  }
  const bool tile = (d >> 24) & 1, int8 = (d >> 25) & 1;
  s.cpu_bf16 = (d >> 22) & 1;
  if (!tile || !int8) {
    s.why_not = "no AMX-INT8 on this CPU";
    return s;
  }
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  // XGETBV faults unless the OS has set CR4.OSXSAVE (CPUID.1:ECX bit 27).
  if (__get_cpuid(1, &a1, &b1, &c1, &d1) == 0 || ((c1 >> 27) & 1) == 0) {
    s.why_not = "the OS does not enable extended state (no OSXSAVE)";
    return s;
  }
  const uint64_t xcr0 = read_xcr0();
  if (((xcr0 >> 17) & 3) != 3) {
    s.why_not = "the OS does not enable tile state (XCR0 bits 17-18)";
    return s;
  }
#if defined(__linux__)
  // Linux (5.16+) gives tile data only to processes that ask for it; without the grant the first
  // tile instruction faults. The grant is for the whole process, all threads.
  constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    s.why_not = std::string("the kernel refused tile data: ") + std::strerror(errno);
    return s;
  }
  unsigned long perm = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) != 0 || ((perm >> kXfeatureXtiledata) & 1) == 0) {
    s.why_not = "the kernel refused tile data: not in the granted features";
    return s;
  }
  s.in_use = true;
#else
  s.why_not = "AMX is used on Linux only (tile data needs the kernel's grant)";
#endif
#endif
  return s;
}

std::once_flag g_once;
AmxStatus g_detected;
std::atomic<bool> g_off{false};
// -1: not chosen yet (the first amx_unit() call decides from amx_status()); else an AmxUnit.
std::atomic<int> g_unit{-1};

const AmxStatus& detected() {
  std::call_once(g_once, [] {
    g_detected = detect();
    const char* env = std::getenv("QWEN35_NO_AMX");
    if (env != nullptr && std::strcmp(env, "1") == 0) g_off = true;
  });
  return g_detected;
}

}  // namespace

AmxStatus amx_status() {
  AmxStatus s = detected();
  if (s.in_use && g_off.load()) {
    s.in_use = false;
    const char* env = std::getenv("QWEN35_NO_AMX");
    s.why_not = env != nullptr && std::strcmp(env, "1") == 0 ? "turned off by QWEN35_NO_AMX=1" : "turned off by --no-amx";
  }
  return s;
}

void amx_turn_off() {
  detected();
  g_off = true;
  g_unit = int(AmxUnit::kNone);
}

AmxUnit amx_unit() {
  int u = g_unit.load(std::memory_order_acquire);
  if (u < 0) {
    const int chosen = int(amx_status().in_use ? AmxUnit::kHardware : AmxUnit::kNone);
    g_unit.compare_exchange_strong(u, chosen);
    u = g_unit.load(std::memory_order_acquire);
  }
  return AmxUnit(u);
}

bool amx_use_for_tests(AmxUnit unit) {
  if (unit == AmxUnit::kHardware && !amx_status().in_use) return false;
  g_unit = int(unit);
  return true;
}

}  // namespace qwen35::kernels::cpu
