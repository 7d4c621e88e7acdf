// The hardware tile unit: each of EmuTileUnit's operations (amx_tiles.h) as the one instruction it
// models, compiled for AMX in these functions alone (the rest of the program never runs a tile
// instruction), and called only where amx_status().in_use.
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/check.h"
#include "kernels/cpu/amx_tiles.h"

namespace qwen35::kernels::cpu::amx {

#if defined(__x86_64__)
// The operations are out of line: a caller compiled without AMX may not inline them. Each is
// fenced for the compiler ("memory"), which must not move the buffers' writes past a tile load
// nor their reads before a tile store (some compilers' tile intrinsics do not declare the memory
// they touch). Tile numbers are literals: kTileC = 0, kTileA = 1, kTileB = 2.
#define QWEN35_AMX_FN __attribute__((target("amx-tile,amx-int8"), noinline))
static_assert(kTileC == 0 && kTileA == 1 && kTileB == 2);

class HwTileUnit {
 public:
  QWEN35_AMX_FN void configure(const TileConfig& c) {
    check_config(c);
    __asm__ volatile("" ::"r"(&c) : "memory");
    _tile_loadconfig(&c);
  }
  QWEN35_AMX_FN void load_c(const void* p, int64_t stride) {
    __asm__ volatile("" ::"r"(p) : "memory");
    _tile_loadd(0, p, stride);
  }
  QWEN35_AMX_FN void load_a(const void* p, int64_t stride) {
    __asm__ volatile("" ::"r"(p) : "memory");
    _tile_loadd(1, p, stride);
  }
  QWEN35_AMX_FN void load_b(const void* p, int64_t stride) {
    __asm__ volatile("" ::"r"(p) : "memory");
    _tile_loadd(2, p, stride);
  }
  QWEN35_AMX_FN void dpbusd() { _tile_dpbusd(0, 1, 2); }
  QWEN35_AMX_FN void store_c(void* p, int64_t stride) {
    _tile_stored(0, p, stride);
    __asm__ volatile("" ::"r"(p) : "memory");
  }
  QWEN35_AMX_FN void release() { _tile_release(); }
};
#undef QWEN35_AMX_FN

void tile_range_hw(const Matrix& m, const MatmulScratch& sc, int64_t t0, int64_t t1, int64_t o0, int64_t o1,
                   float* y, MatmulScratch::Share& share) {
  HwTileUnit u;
  tile_range(u, m, sc, t0, t1, o0, o1, y, share);
}
#else
void tile_range_hw(const Matrix&, const MatmulScratch&, int64_t, int64_t, int64_t, int64_t, float*,
                   MatmulScratch::Share&) {
  QWEN35_CHECK_MSG(false, "AMX tiles on a CPU without them");
}
#endif

}  // namespace qwen35::kernels::cpu::amx
