// Intel AMX (Advanced Matrix Extensions) for the fast mode's prefill matmuls: whether this process
// may use the tile unit, and which tile unit the matmul dispatch uses (docs/design.md "AMX").
//
// AMX is in use when the CPU reports AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25), the
// OS enables tile state in XCR0 (bits 17 and 18), Linux grants this process the tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA, asked once per process), and neither
// --no-amx nor QWEN35_NO_AMX=1 turned it off. The tile kernels give the VNNI path's bits, so the
// choice changes speed only.
#pragma once

#include <string>

namespace qwen35::kernels::cpu {

struct AmxStatus {
  bool in_use = false;
  std::string why_not;  // one line when !in_use: "no AMX-INT8 on this CPU", ...
  bool cpu_bf16 = false;  // the CPU reports AMX-BF16 (not used by any kernel yet)
};

// Detection and the permission request run on the first call (std::call_once); later calls
// return the same answer unless amx_turn_off has run since.
AmxStatus amx_status();

// Turns AMX off for the process (--no-amx): the fast mode's matmuls stay on the VNNI/AVX2 path.
void amx_turn_off();

// The tile unit the fast prefill matmuls use: none (the VNNI/AVX2 tile kernels), the hardware
// (where amx_status().in_use), or the scalar model of the four tile instructions (tests only: it
// proves the tile kernel's logic on machines without AMX, and is far slower than either).
enum class AmxUnit { kNone, kHardware, kEmulated };
AmxUnit amx_unit();

// Tests: chooses the unit for the process. kHardware where amx_status().in_use only (false, and
// no change, otherwise).
bool amx_use_for_tests(AmxUnit unit);

}  // namespace qwen35::kernels::cpu
