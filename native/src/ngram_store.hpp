// Read-only view of an N-gram store in our format over a caller-owned buffer
// (usually a memory map). Opening checks only the header, so it costs the same
// for any file size; `verify()` walks everything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ngram_format.hpp"

namespace dart {

struct StoreInfo {
  uint32_t order = 0;
  uint64_t root_count = 0;
  uint64_t vocab_size = 0;
  uint32_t token_bits = 0;
  uint64_t level_nodes[kMaxOrder] = {0};
  uint32_t count_bits[kMaxOrder] = {0};
  uint32_t offset_bits[kMaxOrder] = {0};
  uint64_t map_len = 0;
  int32_t map_min = 0;
  uint64_t file_size = 0;
  uint64_t num_nodes() const;  // root included
};

class NgramStore {
 public:
  // Checks magic, version, header checksum, sizes and section bounds; throws
  // FormatError naming the problem. `data` must outlive the store.
  NgramStore(const uint8_t* data, uint64_t size);

  const StoreInfo& info() const { return info_; }
  uint32_t order() const { return info_.order; }

  // Rank of a token id in the vocabulary, or -1 when the store never saw it.
  int64_t rank_of(int32_t token) const;

  // docs/formats.md `probability`: for each of k candidates, the probability of
  // the longest matching context suffix (up to order-1 tokens) and its length.
  void probability(const int32_t* context, size_t m, const int32_t* tokens, size_t k, float* probs,
                   int32_t* matched) const;
  // Same, with candidates given as ranks (rank_of); negative rank = unseen.
  void probability_ranked(const int32_t* context, size_t m, const int64_t* ranks, size_t k, float* probs,
                          int32_t* matched) const;
  // Same again, with `order` from sort_ranks: callers that ask about the same
  // candidates under many contexts (the tree search) sort them once.
  void probability_sorted(const int32_t* context, size_t m, const int64_t* ranks, const uint32_t* order,
                          size_t n_valid, size_t k, float* probs, int32_t* matched) const;
  // Writes into order[0..n_valid) the indices of the seen candidates (rank >= 0)
  // by ascending rank; returns n_valid.
  static size_t sort_ranks(const int64_t* ranks, size_t k, uint32_t* order);

  // The continuations of the longest context suffix (up to order-1 tokens, at least 1) that has any: at most k
  // of them, by count descending (ties: smaller token id first), written to tokens / probs (count over the
  // suffix's count, as `probability` gives them). Returns how many were written: 0 when no suffix has one.
  size_t continuations(const int32_t* context, size_t m, size_t k, int32_t* tokens, float* probs) const;

  // The counts a summed query (ngram_overlay.hpp) adds to an overlay's, for the context's last L tokens c
  // (1 <= L <= min(m, order-1)): returns count(c) (0 when never counted) and writes count(c + candidate) into
  // child_counts[0..k) for candidates given by rank as in probability_sorted (0 when unseen).
  uint64_t suffix_counts(const int32_t* context, size_t m, size_t L, const int64_t* ranks, const uint32_t* order,
                         size_t n_valid, size_t k, uint64_t* child_counts) const;
  // Same suffix c: returns count(c) and appends each continuation of c to `out` as (token id, count).
  uint64_t suffix_children(const int32_t* context, size_t m, size_t L,
                           std::vector<std::pair<int32_t, uint64_t>>& out) const;

  // Count of a token string of length 0..order (0 = root); 0 when never counted.
  uint64_t count(const int32_t* ngram, size_t len) const;

  // Full integrity check: section checksums and every structural invariant.
  // Throws FormatError naming the first problem.
  void verify() const;

  // Level d (1-based) accessors, for the writer's tests and the CLI.
  uint64_t node_count_at(uint32_t d, uint64_t i) const;
  uint32_t node_rank_at(uint32_t d, uint64_t i) const;
  int32_t vocab_at(uint64_t rank) const;

 private:
  static constexpr uint64_t kNone = ~uint64_t{0};
  // Children of node i at level d (d = 0: the root) as [begin, end) in level d+1.
  void child_range(uint32_t d, uint64_t i, uint64_t& begin, uint64_t& end) const;
  uint64_t find_child(uint32_t d, uint64_t i, uint64_t rank) const;  // kNone if absent
  // The level-L node of the context's last L tokens (m >= L >= 1), or kNone when the store never saw them.
  uint64_t suffix_node(const int32_t* context, size_t m, size_t L) const;
  // First index in [lo, hi) of level d+1 whose rank is >= rank, searching
  // outward from lo (cheap when the answer is near lo, as for frequent tokens).
  uint64_t gallop(uint32_t d, uint64_t lo, uint64_t hi, uint64_t rank) const;

  const uint8_t* data_;
  StoreInfo info_;
  const uint8_t* vocab_ = nullptr;
  const uint8_t* rank_map_ = nullptr;
  const uint8_t* counts_[kMaxOrder] = {nullptr};
  const uint8_t* tokens_[kMaxOrder] = {nullptr};
  const uint8_t* offsets_[kMaxOrder] = {nullptr};
  uint64_t sec_off_[kNumSections] = {0};
  uint64_t sec_size_[kNumSections] = {0};
  uint64_t sec_sum_[kNumSections] = {0};
  bool level1_dense_ = false;
};

// True when the buffer starts with our magic.
bool has_store_magic(const uint8_t* data, uint64_t size);

}  // namespace dart
