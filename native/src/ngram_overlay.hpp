// The N-gram counts of a bounded set of token sequences held in memory next to a read-only store (issue 67's
// session memory: a racer's earlier answers). Sequences are counted as a store counts its corpus
// (docs/formats.md: every slice t[s : s+N] adds 1 to each of its prefixes and to the root), so a store's counts
// plus an overlay's are the counts of one store built from both sets of sequences, and every answer below is the
// store's own rule applied to those summed counts. The counts live on a SuffixTree of depth N (suffix_tree.hpp),
// which keeps exactly these counts, exact through additions and removals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ngram_store.hpp"
#include "suffix_tree.hpp"

namespace dart {

class NgramOverlay {
 public:
  explicit NgramOverlay(uint32_t order);  // 1..kMaxOrder, as a store's

  uint32_t order() const { return order_; }
  // Counts a sequence under `id`; throws std::invalid_argument when the id is already held.
  void add(int64_t id, const int32_t* tokens, size_t n);
  // Uncounts a sequence; false when the id is not held.
  bool remove(int64_t id) { return trie_.remove(id); }
  bool contains(int64_t id) const { return trie_.contains(id); }
  size_t sequences() const { return trie_.sequences(); }
  uint64_t tokens() const { return static_cast<uint64_t>(trie_.node_count(0)); }  // the root's count
  size_t nodes() const { return trie_.nodes(); }
  bool empty() const { return tokens() == 0; }  // counts nothing (sequences held may all be empty)
  // Count of a token string of length 0..order (0 = the root), as NgramStore::count.
  uint64_t count(const int32_t* ngram, size_t len) const;
  // The count of the context's last L tokens (0 when never counted), and of that suffix followed by each of k
  // tokens (0 when unseen).
  uint64_t suffix_counts(const int32_t* context, size_t m, size_t L, const int32_t* tokens, size_t k,
                         uint64_t* child_counts) const;
  // Same suffix: returns its count, appends its continuations to `out` as (token id, count).
  uint64_t suffix_children(const int32_t* context, size_t m, size_t L,
                           std::vector<std::pair<int32_t, uint64_t>>& out) const;
  // Recounts every sequence and compares with the trie (tests); throws std::logic_error on a mismatch.
  void check() const { trie_.check(); }

 private:
  uint32_t order_;
  SuffixTree trie_;
};

// docs/formats.md's `probability` over summed counts: for L from min(N-1, m) down to 1, with c the context's last
// L tokens and S(.) = the store's count + the overlay's, a candidate x with S(c + x) > 0 gets
// float(S(c + x)) * (1.0f / float(S(c))) and matched length L; no match: 0 and 0. `store` may be null (the overlay
// alone); otherwise the orders must agree (std::invalid_argument). The ranked form takes the candidates' store
// ranks as NgramStore::probability_sorted does, and `scratch` of 2k values.
void summed_probability(const NgramStore* store, const NgramOverlay& overlay, const int32_t* context, size_t m,
                        const int32_t* tokens, size_t k, float* probs, int32_t* matched);
void summed_probability_ranked(const NgramStore* store, const NgramOverlay& overlay, const int32_t* context,
                               size_t m, const int32_t* tokens, const int64_t* ranks, const uint32_t* order,
                               size_t n_valid, size_t k, float* probs, int32_t* matched, uint64_t* scratch);

// NgramStore::continuations over summed counts: the continuations of the longest context suffix (up to N-1 tokens,
// at least 1) that has any in either, at most k, by summed count descending (ties: smaller token id first), with
// probability float(S(c + x)) * (1.0f / float(S(c))). Returns how many were written.
size_t summed_continuations(const NgramStore* store, const NgramOverlay& overlay, const int32_t* context, size_t m,
                            size_t k, int32_t* tokens, float* probs);

}  // namespace dart
