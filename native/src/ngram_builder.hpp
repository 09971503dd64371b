// Builds a store from token sequences by sort-and-count over packed n-gram
// keys (radix sort), not one hash map per node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ngram_writer.hpp"

namespace dart {

class NgramBuilder {
 public:
  // min_count > 1 prunes n-grams of length >= 2 counted fewer times (their
  // extensions go too, as they count no more); unigrams are always kept, so
  // the root still counts every token and count(p) >= sum of children holds.
  explicit NgramBuilder(uint32_t order, uint64_t min_count = 1);
  // Appends one sequence ("conversation"); empty sequences add nothing.
  void add(const int32_t* tokens, size_t n);
  uint64_t num_tokens() const { return tokens_.size(); }
  // Counts every level and writes the store.
  void write(Sink& sink) const;

 private:
  uint32_t order_;
  uint64_t min_count_;
  std::vector<int32_t> tokens_;
  std::vector<uint64_t> seq_ends_;  // exclusive end of each sequence in tokens_
};

}  // namespace dart
