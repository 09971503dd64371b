#include "ngram_builder.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "common.hpp"
#include "ngram_format.hpp"

namespace dart {

namespace {

// A d-gram of token ranks packed big-end first, so integer order is
// lexicographic order. U128 serves vocabularies too wide for 64-bit keys.
struct U128 {
  uint64_t hi = 0, lo = 0;
  bool operator<(const U128& o) const { return hi != o.hi ? hi < o.hi : lo < o.lo; }
  bool operator==(const U128& o) const { return hi == o.hi && lo == o.lo; }
};

inline uint64_t shl_or(uint64_t k, unsigned bits, uint64_t r) { return (k << bits) | r; }
inline U128 shl_or(U128 k, unsigned bits, uint64_t r) {
  U128 o;
  o.hi = (k.hi << bits) | (bits ? k.lo >> (64 - bits) : 0);
  o.lo = (k.lo << bits) | r;
  return o;
}
inline uint64_t low_bits(uint64_t k, uint64_t mask) { return k & mask; }
inline uint64_t low_bits(U128 k, uint64_t mask) { return k.lo & mask; }
inline uint64_t shr(uint64_t k, unsigned bits) { return k >> bits; }
inline U128 shr(U128 k, unsigned bits) {
  U128 o;
  o.lo = (k.lo >> bits) | (k.hi << (64 - bits));
  o.hi = k.hi >> bits;
  return o;
}

// LSD radix sort on 16-bit digits over the low `key_bits` bits.
void radix_sort(std::vector<uint64_t>& keys, unsigned key_bits) {
  std::vector<uint64_t> tmp(keys.size());
  std::vector<uint64_t> hist(1 << 16);
  for (unsigned shift = 0; shift < key_bits; shift += 16) {
    std::fill(hist.begin(), hist.end(), 0);
    for (uint64_t k : keys) ++hist[(k >> shift) & 0xffff];
    uint64_t sum = 0;
    for (auto& h : hist) {
      const uint64_t c = h;
      h = sum;
      sum += c;
    }
    for (uint64_t k : keys) tmp[hist[(k >> shift) & 0xffff]++] = k;
    keys.swap(tmp);
  }
}
void sort_keys(std::vector<uint64_t>& keys, unsigned key_bits) { radix_sort(keys, key_bits); }
void sort_keys(std::vector<U128>& keys, unsigned) { std::sort(keys.begin(), keys.end()); }

template <class Key>
void count_levels(uint32_t order, uint64_t min_count, unsigned bits, const std::vector<uint32_t>& ranks,
                  const std::vector<uint64_t>& seq_ends, std::vector<std::vector<LevelRecord>>& levels) {
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  std::vector<Key> pos_key(ranks.size());  // key of the d-gram starting at each position
  std::vector<Key> prev_unique, unique;
  std::vector<Key> keys;
  for (uint32_t d = 1; d <= order; ++d) {
    keys.clear();
    uint64_t begin = 0;
    for (uint64_t end : seq_ends) {
      for (uint64_t s = begin; s + d <= end; ++s) {
        pos_key[s] = shl_or(pos_key[s], bits, ranks[s + d - 1]);
        keys.push_back(pos_key[s]);
      }
      begin = end;
    }
    sort_keys(keys, d * bits);
    unique.clear();
    std::vector<LevelRecord>& recs = levels[d - 1];
    recs.clear();
    size_t parent = 0;
    for (size_t i = 0; i < keys.size();) {
      size_t j = i + 1;
      while (j < keys.size() && keys[j] == keys[i]) ++j;
      if (d > 1 && j - i < min_count) {  // pruned; its prefix may be kept, its extensions are not
        i = j;
        continue;
      }
      LevelRecord r{};
      r.count = j - i;
      r.rank = static_cast<uint32_t>(low_bits(keys[i], mask));
      if (d > 1) {
        const Key pk = shr(keys[i], bits);
        while (prev_unique[parent] < pk) ++parent;  // the prefix is always present
        r.parent = parent;
      }
      recs.push_back(r);
      unique.push_back(keys[i]);
      i = j;
    }
    prev_unique.swap(unique);
  }
}

}  // namespace

NgramBuilder::NgramBuilder(uint32_t order, uint64_t min_count) : order_(order), min_count_(min_count) {
  if (order < 1 || order > kMaxOrder)
    throw std::invalid_argument("n-gram order must be in 1.." + std::to_string(kMaxOrder) + ", got " +
                                std::to_string(order));
}

void NgramBuilder::add(const int32_t* tokens, size_t n) {
  if (n == 0) return;
  tokens_.insert(tokens_.end(), tokens, tokens + n);
  seq_ends_.push_back(tokens_.size());
}

void NgramBuilder::write(Sink& sink) const {
  // Vocabulary (sorted distinct ids) and each position's rank.
  std::vector<int32_t> vocab;
  std::vector<uint32_t> ranks(tokens_.size());
  if (!tokens_.empty()) {
    const auto [mn, mx] = std::minmax_element(tokens_.begin(), tokens_.end());
    const int64_t lo = *mn;
    const uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(*mx) - lo) + 1;
    if (range <= (uint64_t{1} << 25)) {
      std::vector<int32_t> rank_of(range, -1);
      for (int32_t t : tokens_) rank_of[static_cast<uint64_t>(t - lo)] = 0;
      for (uint64_t i = 0; i < range; ++i)
        if (rank_of[i] == 0) {
          rank_of[i] = static_cast<int32_t>(vocab.size());
          vocab.push_back(static_cast<int32_t>(lo + static_cast<int64_t>(i)));
        }
      for (size_t i = 0; i < tokens_.size(); ++i) ranks[i] = static_cast<uint32_t>(rank_of[static_cast<uint64_t>(tokens_[i] - lo)]);
    } else {
      vocab = tokens_;
      std::sort(vocab.begin(), vocab.end());
      vocab.erase(std::unique(vocab.begin(), vocab.end()), vocab.end());
      for (size_t i = 0; i < tokens_.size(); ++i)
        ranks[i] = static_cast<uint32_t>(std::lower_bound(vocab.begin(), vocab.end(), tokens_[i]) - vocab.begin());
    }
  }
  const unsigned bits = bits_for(vocab.empty() ? 0 : vocab.size() - 1);
  std::vector<std::vector<LevelRecord>> levels(order_);
  if (order_ * bits <= 64) {
    count_levels<uint64_t>(order_, min_count_, bits, ranks, seq_ends_, levels);
  } else if (order_ * bits <= 128) {
    count_levels<U128>(order_, min_count_, bits, ranks, seq_ends_, levels);
  } else {
    throw std::invalid_argument("order " + std::to_string(order_) + " with a vocabulary of " +
                                std::to_string(vocab.size()) + " tokens needs keys wider than 128 bits");
  }
  std::vector<LevelVectorSource> sources;
  sources.reserve(order_);
  for (auto& l : levels) sources.emplace_back(std::move(l));
  std::vector<LevelSource*> ptrs;
  for (auto& s : sources) ptrs.push_back(&s);
  write_store(sink, order_, tokens_.size(), vocab, ptrs);
}

}  // namespace dart
