// The k largest logits of a row, one workgroup per row (vulkan/topk.h): the rows whose sampling
// reads only their top k (model::SequenceRows::logits_top_k) send k values and ids back instead
// of a whole vocabulary row.
//
// Ranking: by value, then by id (the lower first), as the sampler and the pipeline's top-k
// message rank them (dist/pipeline.cc): -0 and +0 are equal values, NaN ranks below every
// number. The SET is what matters to the host, which scatters the pairs into a row of -inf; the
// order inside it is fixed anyway (the values above the k-th in increasing id, then the k-th's
// ties in increasing id), so the output's bytes do not depend on the device or the lanes.
//
// How: each value maps to a 32-bit key that orders as the values do; four passes of an 8-bit
// radix select (histograms in shared memory, counts exact whatever the order of the atomic adds)
// find the k-th largest key T and how many of the keys equal to T are taken. Then each lane
// takes a contiguous run of ids, the lanes' counts are prefix-summed in id order, and each lane
// writes its values above T, and its ties to T while the ties' quota lasts.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer L { float logits[]; };  // the run's rows [n, vocab]
layout(std430, binding = 1) readonly buffer T { uint task[]; };     // per row: k, output offset
layout(std430, binding = 2) writeonly buffer O { uint outw[]; };    // per row: k values, k ids

layout(push_constant) uniform Push {
  uint base;  // first row of this dispatch
  uint n, vocab;
} P;

#include "common.glsl"

shared uint hist[256];
shared uint gt_count[WG], eq_count[WG];
shared uint sel_prefix, sel_mask, sel_left;

// Larger value, larger key; -0 as +0; NaN the smallest key.
uint key_of(float v) {
  if (isnan(v)) return 0u;
  if (v == 0.0) v = 0.0;
  const uint u = floatBitsToUint(v);
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

void main() {
  const uint t = P.base + gl_WorkGroupID.x, l = gl_LocalInvocationID.x;
  if (t >= P.n) return;  // uniform over the workgroup
  const uint row0 = t * P.vocab;
  const uint k = min(task[2u * t], P.vocab), off = task[2u * t + 1u];
  if (k == 0u) return;
  if (l == 0u) {
    sel_prefix = 0u;
    sel_mask = 0u;
    sel_left = k;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (uint b = l; b < 256u; b += WG) hist[b] = 0u;
    barrier();
    const uint prefix = sel_prefix, mask = sel_mask;
    for (uint i = l; i < P.vocab; i += WG) {
      const uint key = key_of(logits[row0 + i]);
      if ((key & mask) == prefix) atomicAdd(hist[(key >> uint(shift)) & 255u], 1u);
    }
    barrier();
    if (l == 0u) {
      // The bin, from the top, where the count of larger keys reaches what is left to take.
      uint left = sel_left, b = 255u;
      for (;; --b) {
        if (hist[b] >= left || b == 0u) break;
        left -= hist[b];
      }
      sel_left = left;  // keys of this bin (and the bins below it) still to take
      sel_prefix = prefix | (b << uint(shift));
      sel_mask = mask | (255u << uint(shift));
    }
    barrier();
  }
  // sel_prefix is the k-th largest key T; sel_left of the keys equal to T are taken.
  const uint kth = sel_prefix, ties = sel_left;
  const uint chunk = (P.vocab + WG - 1u) / WG;
  const uint lo = min(l * chunk, P.vocab), hi = min(lo + chunk, P.vocab);
  uint gt = 0u, eq = 0u;
  for (uint i = lo; i < hi; ++i) {
    const uint key = key_of(logits[row0 + i]);
    gt += key > kth ? 1u : 0u;
    eq += key == kth ? 1u : 0u;
  }
  gt_count[l] = gt;
  eq_count[l] = eq;
  barrier();
  uint at_gt = 0u, at_eq = 0u;
  for (uint j = 0u; j < l; ++j) {
    at_gt += gt_count[j];
    at_eq += eq_count[j];
  }
  const uint above = k - ties;  // values above T: they come first
  for (uint i = lo; i < hi; ++i) {
    const float v = logits[row0 + i];
    const uint key = key_of(v);
    uint slot = k;
    if (key > kth) slot = at_gt++;
    else if (key == kth && at_eq < ties) slot = above + at_eq++;
    if (slot < k) {
      outw[off + slot] = floatBitsToUint(v);
      outw[off + k + slot] = i;
    }
  }
}
