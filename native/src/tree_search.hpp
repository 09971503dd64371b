// N-gram-guided beam search that turns per-level top-k candidates into a draft
// tree (specs/tree-search.md). Single-threaded, no per-node heap allocation:
// a TreeSearcher keeps its scratch buffers between calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ngram_store.hpp"

namespace dart {

struct TreeSearchParams {
  size_t beam_width = 20;
  size_t max_nodes = 60;        // nodes below the root
  float ngram_weight = 0.5f;    // 0 disables the N-gram term
  bool has_eos = false;
  int32_t eos_token_id = 0;
  const float* level_weights = nullptr;  // [levels]; nullptr = (l+1)^-0.7
  const float* logit_weights = nullptr;  // [levels]; nullptr = 0.9^l
};

struct DraftTreeOut {
  std::vector<int32_t> tokens;   // [0] = root
  std::vector<int32_t> parents;  // [0] = -1, parents[i] < i
  std::vector<float> scores;     // [0] = 0
};

class TreeSearcher {
 public:
  // tok/prob: [levels, k] row-major; context: m >= 1 tokens, the last is the root.
  // store may be null (no N-gram term). Throws std::invalid_argument on bad input.
  void search(const int32_t* tok, const float* prob, size_t levels, size_t k, const int32_t* context, size_t m,
              const NgramStore* store, const TreeSearchParams& params, DraftTreeOut& out);
};

}  // namespace dart
