#include "ngram_overlay.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "ngram_format.hpp"

namespace dart {

namespace {

void check_orders(const NgramStore* store, const NgramOverlay& overlay) {
  if (store != nullptr && store->order() != overlay.order())
    throw std::invalid_argument("n-gram overlay of order " + std::to_string(overlay.order()) +
                                " cannot add to a store of order " + std::to_string(store->order()));
}

uint64_t summed(uint64_t a, uint64_t b) {
  if (a > UINT64_MAX - b) throw std::overflow_error("n-gram counts overflow 64 bits when summed");
  return a + b;
}

uint32_t checked_order(uint32_t order) {
  if (order < 1 || order > kMaxOrder)
    throw std::invalid_argument("n-gram overlay order " + std::to_string(order) + " out of range 1.." +
                                std::to_string(kMaxOrder));
  return order;
}

}  // namespace

NgramOverlay::NgramOverlay(uint32_t order) : order_(checked_order(order)), trie_(static_cast<int32_t>(order)) {}

void NgramOverlay::add(int64_t id, const int32_t* tokens, size_t n) {
  if (trie_.contains(id)) throw std::invalid_argument("n-gram overlay already holds a sequence " + std::to_string(id));
  if (n > 0 && tokens == nullptr) throw std::invalid_argument("n-gram overlay: null tokens");
  trie_.extend(id, tokens, n);
}

uint64_t NgramOverlay::count(const int32_t* ngram, size_t len) const {
  if (len > order_) return 0;
  const int32_t node = trie_.node_of(ngram, len);
  return node < 0 ? 0 : static_cast<uint64_t>(trie_.node_count(node));
}

uint64_t NgramOverlay::suffix_counts(const int32_t* context, size_t m, size_t L, const int32_t* tokens, size_t k,
                                     uint64_t* child_counts) const {
  if (L > m) throw std::invalid_argument("n-gram overlay: suffix longer than the context");
  std::fill_n(child_counts, k, uint64_t{0});
  const int32_t node = L < order_ ? trie_.node_of(context + (m - L), L) : -1;
  if (node < 0) return 0;
  for (size_t j = 0; j < k; ++j) {
    const int32_t c = trie_.child_of(node, tokens[j]);
    if (c >= 0) child_counts[j] = static_cast<uint64_t>(trie_.node_count(c));
  }
  return static_cast<uint64_t>(trie_.node_count(node));
}

uint64_t NgramOverlay::suffix_children(const int32_t* context, size_t m, size_t L,
                                       std::vector<std::pair<int32_t, uint64_t>>& out) const {
  if (L > m) throw std::invalid_argument("n-gram overlay: suffix longer than the context");
  const int32_t node = L < order_ ? trie_.node_of(context + (m - L), L) : -1;
  if (node < 0) return 0;
  trie_.for_each_child(node, [&](int32_t token, int64_t c) { out.emplace_back(token, static_cast<uint64_t>(c)); });
  return static_cast<uint64_t>(trie_.node_count(node));
}

void summed_probability_ranked(const NgramStore* store, const NgramOverlay& overlay, const int32_t* context,
                               size_t m, const int32_t* tokens, const int64_t* ranks, const uint32_t* order,
                               size_t n_valid, size_t k, float* probs, int32_t* matched, uint64_t* scratch) {
  check_orders(store, overlay);
  std::fill_n(probs, k, 0.0f);
  std::fill_n(matched, k, 0);
  if (m == 0 || overlay.order() < 2) return;
  uint64_t* own = scratch + k;  // the overlay's child counts; scratch[0..k) the store's
  const size_t lmax = std::min<size_t>(overlay.order() - 1, m);
  size_t unmatched = k;
  for (size_t L = lmax; L >= 1 && unmatched > 0; --L) {
    const uint64_t c_overlay = overlay.suffix_counts(context, m, L, tokens, k, own);
    uint64_t c_store = 0;
    if (store != nullptr) c_store = store->suffix_counts(context, m, L, ranks, order, n_valid, k, scratch);
    else std::fill_n(scratch, k, uint64_t{0});
    const uint64_t total = summed(c_store, c_overlay);
    if (total == 0) continue;
    const float inv = 1.0f / static_cast<float>(total);
    for (size_t j = 0; j < k; ++j) {
      if (matched[j]) continue;
      const uint64_t n = summed(scratch[j], own[j]);
      if (n == 0) continue;
      probs[j] = static_cast<float>(n) * inv;
      matched[j] = static_cast<int32_t>(L);
      --unmatched;
    }
  }
}

void summed_probability(const NgramStore* store, const NgramOverlay& overlay, const int32_t* context, size_t m,
                        const int32_t* tokens, size_t k, float* probs, int32_t* matched) {
  std::vector<int64_t> ranks(k, -1);
  std::vector<uint32_t> order(k);
  std::vector<uint64_t> scratch(2 * k);
  size_t n_valid = 0;
  if (store != nullptr) {
    for (size_t j = 0; j < k; ++j) ranks[j] = store->rank_of(tokens[j]);
    n_valid = NgramStore::sort_ranks(ranks.data(), k, order.data());
  }
  summed_probability_ranked(store, overlay, context, m, tokens, ranks.data(), order.data(), n_valid, k, probs,
                            matched, scratch.data());
}

size_t summed_continuations(const NgramStore* store, const NgramOverlay& overlay, const int32_t* context, size_t m,
                            size_t k, int32_t* tokens, float* probs) {
  check_orders(store, overlay);
  if (m == 0 || k == 0 || overlay.order() < 2) return 0;
  const size_t lmax = std::min<size_t>(overlay.order() - 1, m);
  std::vector<std::pair<int32_t, uint64_t>> found;  // (token id, count), then merged by token
  for (size_t L = lmax; L >= 1; --L) {
    found.clear();
    uint64_t total = overlay.suffix_children(context, m, L, found);
    if (store != nullptr) total = summed(total, store->suffix_children(context, m, L, found));
    if (found.empty()) continue;
    std::sort(found.begin(), found.end());
    size_t w = 0;
    for (size_t i = 0; i < found.size(); ++i) {
      if (w > 0 && found[w - 1].first == found[i].first) found[w - 1].second = summed(found[w - 1].second, found[i].second);
      else found[w++] = found[i];
    }
    found.resize(w);
    const size_t n = std::min(k, found.size());
    std::partial_sort(found.begin(), found.begin() + static_cast<std::ptrdiff_t>(n), found.end(),
                      [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second
                                                                                      : a.first < b.first; });
    const float inv = 1.0f / static_cast<float>(total);
    for (size_t i = 0; i < n; ++i) {
      tokens[i] = found[i].first;
      probs[i] = static_cast<float>(found[i].second) * inv;
    }
    return n;
  }
  return 0;
}

}  // namespace dart
