// N-gram-guided beam search that turns per-level top-k candidates into a draft
// tree (docs/tree-search.md). Single-threaded, no per-node heap allocation:
// a TreeSearcher keeps its scratch buffers between calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ngram_overlay.hpp"
#include "ngram_store.hpp"

namespace dart {

struct TreeSearchParams {
  size_t beam_width = 20;
  size_t max_nodes = 60;        // nodes below the root
  float ngram_weight = 0.5f;    // 0 disables the N-gram term
  const int32_t* eos_ids = nullptr;  // [n_eos] end-of-text ids, sorted ascending; beams ending in one rank last
  size_t n_eos = 0;
  const float* level_weights = nullptr;  // [levels]; nullptr = (l+1)^-0.7
  const float* logit_weights = nullptr;  // [levels]; nullptr = 0.9^l
  // Counts added to the store's (ngram_overlay.hpp): the N-gram term is the store's rule over the summed counts.
  // Needs a store of the same order; null or empty: the store alone, bit for bit.
  const NgramOverlay* overlay = nullptr;
};

struct DraftTreeOut {
  std::vector<int32_t> tokens;   // [0] = root
  std::vector<int32_t> parents;  // [0] = -1, parents[i] < i
  std::vector<float> scores;     // [0] = 0
};

// The spec's default per-level weights, computed in float32 (powf), so that
// every caller (Python included) uses bit-identical values.
float default_level_weight(size_t level);  // (level+1)^-0.7
float default_logit_weight(size_t level);  // 0.9^level

class TreeSearcher {
 public:
  // tok/prob: [levels, k] row-major; context: m >= 1 tokens, the last is the root.
  // store may be null (no N-gram term). Throws std::invalid_argument on bad input.
  void search(const int32_t* tok, const float* prob, size_t levels, size_t k, const int32_t* context, size_t m,
              const NgramStore* store, const TreeSearchParams& params, DraftTreeOut& out);

 private:
  // One candidate sequence of the global pool: the beam candidate it extends
  // (-1 = the root) plus its last token. Pool index = creation order, so it is
  // also ordered by depth.
  struct Node {
    float score;     // the spec's score
    float key;       // min(score, parent's key): the selection key, equal to score whenever
                     // every term is <= 0 (always, for a consistent store); guarantees prefix closure
    int32_t parent;  // pool index, -1 = root
    int32_t token;
    uint32_t depth;  // 1 = child of the root
    uint32_t out;    // output index once selected
    bool eos;
  };

  std::vector<Node> pool_;
  std::vector<uint64_t> level_keys_;  // (EOS, score desc, creation) keys of one level's extensions
  std::vector<uint32_t> beam_;        // pool indices of the current beam, in beam order
  std::vector<uint64_t> top_;         // max-heap of the best (key desc, creation) keys seen so far
  std::vector<float> lw_, logw_;      // per-level weights
  std::vector<float> logit_term_;     // logf(p + eps) * logw[l] for the current level
  std::vector<int64_t> ranks_;        // store ranks of the current level's tokens
  std::vector<uint32_t> rank_order_;  // those ranks' ascending order (NgramStore::sort_ranks)
  std::vector<int32_t> beam_ctx_;     // [beam, N-1] N-gram contexts of the beam candidates
  std::vector<float> ng_term_;        // [beam, k] logf(ng + eps) * ngram_weight per beam candidate
  std::vector<float> ng_;             // N-gram probabilities for one context
  std::vector<int32_t> matched_;      // matched lengths (unused, required by the store API)
  std::vector<uint64_t> counts_;      // [2k] scratch of a summed query (store's and overlay's counts)
};

}  // namespace dart
