// N-gram-guided tree search, docs/tree-search.md. See tree_search.hpp.
//
// Scores follow the spec's float32 order of operations exactly, so no
// multiply-add may be fused into an FMA (that would change the last bits on
// targets where FMA is part of the base ISA).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "tree_search.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace dart {

namespace {

constexpr float kEps = 1e-10f;
constexpr uint32_t kUnset = std::numeric_limits<uint32_t>::max();

void check_weight(float w, const char* what, size_t level) {
  if (!(std::isfinite(w) && w >= 0.0f))
    throw std::invalid_argument(std::string("tree search: ") + what + "[" + std::to_string(level) +
                                "] = " + std::to_string(w) + " must be finite and >= 0");
}

// Order-preserving map of a non-NaN float to uint32 with the order reversed:
// a smaller result means a larger float (-0 and +0 map alike).
inline uint32_t desc_bits(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t b = std::bit_cast<uint32_t>(f);
  const uint32_t asc = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ~asc;
}

}  // namespace

float default_level_weight(size_t level) { return std::pow(static_cast<float>(level + 1), -0.7f); }
float default_logit_weight(size_t level) { return std::pow(0.9f, static_cast<float>(level)); }

void TreeSearcher::search(const int32_t* tok, const float* prob, size_t levels, size_t k, const int32_t* context,
                          size_t m, const NgramStore* store, const TreeSearchParams& params, DraftTreeOut& out) {
  // ------------------------------------------------------------ validation
  if (levels == 0) throw std::invalid_argument("tree search: need at least one level of candidates (levels == 0)");
  if (k == 0) throw std::invalid_argument("tree search: need at least one candidate per level (k == 0)");
  if (m == 0 || context == nullptr)
    throw std::invalid_argument("tree search: context is empty (its last token is the root)");
  if (params.beam_width == 0) throw std::invalid_argument("tree search: beam_width must be >= 1");
  if (tok == nullptr || prob == nullptr) throw std::invalid_argument("tree search: null candidate arrays");
  if (k > std::numeric_limits<size_t>::max() / levels)
    throw std::invalid_argument("tree search: levels * k overflows");
  for (size_t i = 0; i < levels * k; ++i) {
    const float p = prob[i];
    if (!(p >= 0.0f && p <= 1.0f))  // also rejects NaN
      throw std::invalid_argument("tree search: probability at level " + std::to_string(i / k) + ", candidate " +
                                  std::to_string(i % k) + " is " + std::to_string(p) +
                                  "; probabilities must be in [0, 1] (no NaN)");
  }
  if (!(std::isfinite(params.ngram_weight) && params.ngram_weight >= 0.0f))
    throw std::invalid_argument("tree search: ngram_weight = " + std::to_string(params.ngram_weight) +
                                " must be finite and >= 0");
  if (params.n_eos > 0 && (params.eos_ids == nullptr || !std::is_sorted(params.eos_ids, params.eos_ids + params.n_eos)))
    throw std::invalid_argument("tree search: end-of-text ids must be given sorted ascending");
  if (params.overlay != nullptr) {
    if (store == nullptr)
      throw std::invalid_argument("tree search: an N-gram overlay adds to a store, and no store was given");
    if (params.overlay->order() != store->order())
      throw std::invalid_argument("tree search: N-gram overlay of order " + std::to_string(params.overlay->order()) +
                                  " over a store of order " + std::to_string(store->order()));
  }
  lw_.resize(levels);
  logw_.resize(levels);
  for (size_t l = 0; l < levels; ++l) {
    lw_[l] = params.level_weights ? params.level_weights[l] : default_level_weight(l);
    logw_[l] = params.logit_weights ? params.logit_weights[l] : default_logit_weight(l);
    check_weight(lw_[l], "level_weights", l);
    check_weight(logw_[l], "logit_weights", l);
  }
  // Pool size: k at level 0, then min(w, previous level) * k per level; must fit int32 indices.
  {
    constexpr size_t kMaxPool = static_cast<size_t>(std::numeric_limits<int32_t>::max());
    size_t total = 0, level_n = 0;
    for (size_t l = 0; l < levels; ++l) {
      const size_t parents = l == 0 ? 1 : std::min(params.beam_width, level_n);
      if (parents > kMaxPool / k) throw std::invalid_argument("tree search: candidate pool too large");
      level_n = parents * k;
      if (level_n > kMaxPool - total) throw std::invalid_argument("tree search: candidate pool too large");
      total += level_n;
    }
    pool_.clear();
    pool_.reserve(total);
  }

  const bool use_ng = store != nullptr && params.ngram_weight > 0.0f;
  const float ngw = params.ngram_weight;
  const size_t ctx_len = use_ng && store->order() > 1 ? store->order() - 1 : 0;  // N-1
  logit_term_.resize(k);
  if (use_ng) {
    ranks_.resize(k);
    rank_order_.resize(k);
    ng_.resize(k);
    matched_.resize(k);
  }
  const NgramOverlay* overlay = use_ng && params.overlay != nullptr && !params.overlay->empty() ? params.overlay
                                                                                                : nullptr;
  if (overlay != nullptr) counts_.resize(2 * k);

  // The final selection runs while the pool grows: `top_` is a max-heap of the
  // best max_nodes keys (key desc, creation asc) packed into one uint64
  // (smaller = better), so most nodes cost one comparison with its top.
  const size_t max_keep = params.max_nodes;
  top_.clear();
  auto make = [&](float score, int32_t parent, int32_t token, uint32_t depth) {
    if (std::isnan(score)) score = -std::numeric_limits<float>::infinity();  // only reachable via overflow
    const float key = parent < 0 ? score : std::min(score, pool_[static_cast<size_t>(parent)].key);
    const bool eos = params.n_eos > 0 && std::binary_search(params.eos_ids, params.eos_ids + params.n_eos, token);
    const auto idx = static_cast<uint64_t>(pool_.size());
    pool_.push_back(Node{score, key, parent, token, depth, kUnset, eos});
    if (max_keep == 0) return;
    const uint64_t packed = (static_cast<uint64_t>(desc_bits(key)) << 32) | idx;
    if (top_.size() < max_keep) {
      top_.push_back(packed);
      std::push_heap(top_.begin(), top_.end());
    } else if (packed < top_.front()) {
      std::pop_heap(top_.begin(), top_.end());
      top_.back() = packed;
      std::push_heap(top_.begin(), top_.end());
    }
  };

  // -------------------------------------------------------------- level 0
  for (size_t i = 0; i < k; ++i) {
    const float term = std::log(prob[i] + kEps) * logw_[0];
    make(0.0f + lw_[0] * term, -1, tok[i], 1);
  }

  size_t level_begin = 0;
  for (size_t l = 1; l < levels; ++l) {
    // Next beam = the best w extensions of the previous level: non-EOS-ending
    // first, then score desc, then creation order, packed as (eos | score | index).
    const size_t level_end = pool_.size();
    const size_t n_ext = level_end - level_begin;
    level_keys_.resize(n_ext);
    for (size_t i = 0; i < n_ext; ++i) {
      const Node& x = pool_[level_begin + i];
      level_keys_[i] = (static_cast<uint64_t>(x.eos) << 63) | (static_cast<uint64_t>(desc_bits(x.score)) << 31) |
                       static_cast<uint64_t>(level_begin + i);
    }
    const size_t w = std::min(params.beam_width, n_ext);
    if (w < n_ext) {
      std::nth_element(level_keys_.begin(), level_keys_.begin() + static_cast<std::ptrdiff_t>(w), level_keys_.end());
      level_keys_.resize(w);
    }
    std::sort(level_keys_.begin(), level_keys_.end());
    beam_.resize(w);
    for (size_t i = 0; i < w; ++i) beam_[i] = static_cast<uint32_t>(level_keys_[i] & 0x7fffffffu);
    level_begin = level_end;

    const int32_t* ltok = tok + l * k;
    const float* lprob = prob + l * k;
    for (size_t i = 0; i < k; ++i) logit_term_[i] = std::log(lprob[i] + kEps) * logw_[l];
    const float lw = lw_[l];
    const auto depth = static_cast<uint32_t>(l + 1);

    if (use_ng) {
      for (size_t i = 0; i < k; ++i) ranks_[i] = store->rank_of(ltok[i]);
      const size_t n_seen = NgramStore::sort_ranks(ranks_.data(), k, rank_order_.data());
      // Context = last N-1 tokens of (prompt + candidate sequence); every candidate has l tokens.
      // Candidates sharing a context share the N-gram answers: one store query per distinct context.
      const size_t want = std::min(ctx_len, m + l);
      beam_ctx_.resize(w * want);
      ng_term_.resize(w * k);
      for (size_t j = 0; j < w; ++j) {
        int32_t* c = beam_ctx_.data() + j * want;
        size_t pos = want;
        for (int32_t n = static_cast<int32_t>(beam_[j]); n >= 0 && pos > 0; n = pool_[static_cast<size_t>(n)].parent)
          c[--pos] = pool_[static_cast<size_t>(n)].token;
        for (size_t q = m; pos > 0;) c[--pos] = context[--q];
        float* term = ng_term_.data() + j * k;
        size_t same = j;
        for (size_t j2 = 0; j2 < j && same == j; ++j2)
          if (std::equal(c, c + want, beam_ctx_.data() + j2 * want)) same = j2;
        if (same != j) {
          std::copy_n(ng_term_.data() + same * k, k, term);
          continue;
        }
        if (overlay != nullptr)
          summed_probability_ranked(store, *overlay, c, want, ltok, ranks_.data(), rank_order_.data(), n_seen, k,
                                    ng_.data(), matched_.data(), counts_.data());
        else
          store->probability_sorted(c, want, ranks_.data(), rank_order_.data(), n_seen, k, ng_.data(),
                                    matched_.data());
        for (size_t i = 0; i < k; ++i) term[i] = std::log(ng_[i] + kEps) * ngw;
      }
      for (size_t j = 0; j < w; ++j) {
        const uint32_t b = beam_[j];
        const float parent_score = pool_[b].score;
        const float* ng_term = ng_term_.data() + j * k;
        for (size_t i = 0; i < k; ++i) {
          const float term = logit_term_[i] + ng_term[i];
          make(parent_score + lw * term, static_cast<int32_t>(b), ltok[i], depth);
        }
      }
    } else {
      for (const uint32_t b : beam_) {
        const float parent_score = pool_[b].score;
        for (size_t i = 0; i < k; ++i)
          make(parent_score + lw * logit_term_[i], static_cast<int32_t>(b), ltok[i], depth);
      }
    }
  }

  // -------------------------------------------------- final selection
  // `top_` holds the top max_nodes of the whole pool by (key desc, creation asc).
  // A parent always precedes its children in that order (key <= parent key,
  // created earlier), so the kept set is prefix-closed even on exact ties.
  // Output order: depth asc, then the same total order.
  const size_t n_keep = top_.size();
  std::sort(top_.begin(), top_.end(), [this](uint64_t a, uint64_t b) {
    const uint32_t da = pool_[a & 0xffffffffu].depth, db = pool_[b & 0xffffffffu].depth;
    if (da != db) return da < db;
    return a < b;
  });

  out.tokens.resize(n_keep + 1);
  out.parents.resize(n_keep + 1);
  out.scores.resize(n_keep + 1);
  out.tokens[0] = context[m - 1];
  out.parents[0] = -1;
  out.scores[0] = 0.0f;
  for (size_t j = 0; j < n_keep; ++j) {
    Node& node = pool_[top_[j] & 0xffffffffu];
    node.out = static_cast<uint32_t>(j + 1);
    uint32_t parent_out = 0;
    if (node.parent >= 0) {
      parent_out = pool_[static_cast<size_t>(node.parent)].out;
      if (parent_out == kUnset) throw std::logic_error("tree search: selected node without its parent (bug)");
    }
    out.tokens[j + 1] = node.token;
    out.parents[j + 1] = static_cast<int32_t>(parent_out);
    out.scores[j + 1] = node.score;
  }
}

}  // namespace dart
