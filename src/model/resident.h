// What of a model's weights a process holds in memory (docs/design.md "Past one machine": a
// pipeline rank's resident weights against its planned share).
//
// A rank binds the whole checkpoint lazily, reading the small vectors of every layer as it
// converts them to fp32 (and the safetensors headers), then lets go of what it does not hold
// (model::keep_share). drop_mapped_pages() takes every page of the mappings out of the process,
// and fault_in_held() maps back exactly the pages of the tensors it still holds, so that the
// process's resident part of the checkpoint is its share, read once at start as one process
// prefaults the whole, and never the pages of other ranks' layers.
#pragma once

#include <cstddef>

#include "model/weights.h"

namespace qwen35::model {

// Bytes of the tensors `w` holds, by where they live.
struct HeldBytes {
  size_t mapped = 0;         // matrices viewed in the checkpoint's mappings, as stored
  size_t copies = 0;         // fp32 vectors and matrices in memory of their own (converted at load)
  size_t mapped_ranges = 0;  // the arrays `mapped` counts (each maps at most 2 pages beyond it)
};

// Every page of w's file mappings out of this process's page tables (MappedFile::drop_pages).
void drop_mapped_pages(const ModelWeights& w);

// Reads one byte of every page of each tensor `w` holds (the trunk layers bound, the embedding,
// head, final norm and MTP head where bound; not the vision tower, read when an image comes) and
// says how many bytes they are. A matrix bound twice (a tied head) counts once.
HeldBytes fault_in_held(ModelWeights& w);

// This process's resident bytes of w's file mappings: the Rss of their areas in
// /proc/self/smaps (pages mapped into this process, whatever the page cache holds); 0 when it
// cannot be read.
size_t mapped_resident_bytes(const ModelWeights& w);

}  // namespace qwen35::model
