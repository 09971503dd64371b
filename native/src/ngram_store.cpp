#include "ngram_store.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "common.hpp"

namespace dart {

uint64_t StoreInfo::num_nodes() const {
  uint64_t n = 1;
  for (uint32_t d = 0; d < order; ++d) n += level_nodes[d];
  return n;
}

bool has_store_magic(const uint8_t* data, uint64_t size) {
  return size >= 8 && std::memcmp(data, kMagic, 8) == 0;
}

static uint64_t align8(uint64_t n) { return checked_add(n, 7, "section") & ~uint64_t{7}; }

NgramStore::NgramStore(const uint8_t* data, uint64_t size) : data_(data) {
  if (size < hdr::kSize)
    throw FormatError("not a DART n-gram store: file has " + std::to_string(size) +
                      " bytes, smaller than the " + std::to_string(hdr::kSize) + "-byte header");
  if (!has_store_magic(data, size)) throw FormatError("not a DART n-gram store: bad magic" + at_offset(0));
  const uint32_t version = load_le<uint32_t>(data + hdr::kVersion);
  if (version != kFormatVersion)
    throw FormatError("unsupported n-gram store version " + std::to_string(version) + " (this build reads " +
                      std::to_string(kFormatVersion) + ")" + at_offset(hdr::kVersion));
  const uint64_t stored_sum = load_le<uint64_t>(data + hdr::kHeaderSum);
  if (Checksum::of(data, hdr::kHeaderSum) != stored_sum)
    throw FormatError("n-gram store header checksum mismatch: the header is corrupt" + at_offset(hdr::kHeaderSum));

  info_.file_size = load_le<uint64_t>(data + hdr::kFileSize);
  if (info_.file_size != size)
    throw FormatError("n-gram store size mismatch: header says " + std::to_string(info_.file_size) +
                      " bytes, file has " + std::to_string(size) + (size < info_.file_size ? " (truncated)" : " (trailing bytes)"));
  info_.order = load_le<uint32_t>(data + hdr::kOrder);
  if (info_.order < 1 || info_.order > kMaxOrder)
    throw FormatError("n-gram store order " + std::to_string(info_.order) + " out of range 1.." +
                      std::to_string(kMaxOrder) + at_offset(hdr::kOrder));
  info_.root_count = load_le<uint64_t>(data + hdr::kRootCount);
  info_.vocab_size = load_le<uint64_t>(data + hdr::kVocabSize);
  if (info_.vocab_size > (uint64_t{1} << 32))
    throw FormatError("n-gram store vocabulary size too large" + at_offset(hdr::kVocabSize));
  info_.map_min = load_le<int32_t>(data + hdr::kMapMin);
  info_.map_len = load_le<uint64_t>(data + hdr::kMapLen);
  if (info_.map_len > (uint64_t{1} << 32) ||
      static_cast<int64_t>(info_.map_min) + static_cast<int64_t>(info_.map_len) > (int64_t{1} << 31))
    throw FormatError("n-gram store rank map out of the int32 range" + at_offset(hdr::kMapLen));
  info_.token_bits = load_le<uint32_t>(data + hdr::kTokenBits);
  const uint32_t want_token_bits = bits_for(info_.vocab_size ? info_.vocab_size - 1 : 0);
  if (info_.token_bits != want_token_bits)
    throw FormatError("n-gram store token width " + std::to_string(info_.token_bits) + " does not fit vocabulary size " +
                      std::to_string(info_.vocab_size) + at_offset(hdr::kTokenBits));

  for (uint32_t d = 1; d <= kMaxOrder; ++d) {
    const uint64_t off = hdr::kLevels + (d - 1) * hdr::kLevelStride;
    const uint64_t n = load_le<uint64_t>(data + off);
    const uint32_t cb = load_le<uint32_t>(data + off + 8);
    const uint32_t ob = load_le<uint32_t>(data + off + 12);
    if (d > info_.order) {
      if (n || cb || ob) throw FormatError("n-gram store has data for a level beyond its order" + at_offset(off));
      continue;
    }
    if (cb < 1 || cb > kMaxPackedBits)
      throw FormatError("n-gram store count width " + std::to_string(cb) + " out of range" + at_offset(off + 8));
    if (d < info_.order ? (ob < 1 || ob > kMaxPackedBits) : ob != 0)
      throw FormatError("n-gram store offset width " + std::to_string(ob) + " invalid" + at_offset(off + 12));
    if (n > (uint64_t{1} << 56)) throw FormatError("n-gram store level size too large" + at_offset(off));
    info_.level_nodes[d - 1] = n;
    info_.count_bits[d - 1] = cb;
    info_.offset_bits[d - 1] = ob;
  }

  // Expected section sizes follow from the header; sections are laid out in order.
  uint64_t expect[kNumSections] = {0};
  expect[kSecVocab] = align8(checked_mul(info_.vocab_size, 4, "vocab"));
  expect[kSecRankMap] = info_.map_len ? align8(checked_mul(info_.map_len, 4, "rank map")) : 0;
  for (uint32_t d = 1; d <= info_.order; ++d) {
    const uint64_t n = info_.level_nodes[d - 1];
    checked_mul(n + 1, kMaxPackedBits, "level");
    expect[sec_counts(d)] = packed_bytes(n, info_.count_bits[d - 1]);
    expect[sec_tokens(d)] = packed_bytes(n, info_.token_bits);
    expect[sec_offsets(d)] = d < info_.order ? packed_bytes(n + 1, info_.offset_bits[d - 1]) : 0;
  }
  uint64_t pos = hdr::kSize;
  for (uint32_t s = 0; s < kNumSections; ++s) {
    const uint64_t toff = hdr::kSections + s * hdr::kSectionStride;
    sec_off_[s] = load_le<uint64_t>(data + toff);
    sec_size_[s] = load_le<uint64_t>(data + toff + 8);
    sec_sum_[s] = load_le<uint64_t>(data + toff + 16);
    if (sec_size_[s] != expect[s])
      throw FormatError("n-gram store section " + std::to_string(s) + " has size " + std::to_string(sec_size_[s]) +
                        ", expected " + std::to_string(expect[s]) + at_offset(toff + 8));
    if (sec_off_[s] != pos)
      throw FormatError("n-gram store section " + std::to_string(s) + " is not where the layout puts it" +
                        at_offset(toff));
    pos = checked_add(pos, sec_size_[s], "sections");
  }
  if (pos != size)
    throw FormatError("n-gram store sections end at byte " + std::to_string(pos) + " but the file has " +
                      std::to_string(size) + " bytes");

  vocab_ = data + sec_off_[kSecVocab];
  rank_map_ = info_.map_len ? data + sec_off_[kSecRankMap] : nullptr;
  for (uint32_t d = 1; d <= info_.order; ++d) {
    counts_[d - 1] = data + sec_off_[sec_counts(d)];
    tokens_[d - 1] = data + sec_off_[sec_tokens(d)];
    offsets_[d - 1] = d < info_.order ? data + sec_off_[sec_offsets(d)] : nullptr;
  }
  level1_dense_ = info_.level_nodes[0] == info_.vocab_size;
}

int64_t NgramStore::rank_of(int32_t token) const {
  if (rank_map_) {
    const int64_t i = static_cast<int64_t>(token) - info_.map_min;
    if (i >= 0 && static_cast<uint64_t>(i) < info_.map_len) {
      const int32_t r = load_le<int32_t>(rank_map_ + 4 * static_cast<uint64_t>(i));
      return (r >= 0 && static_cast<uint64_t>(r) < info_.vocab_size) ? r : -1;
    }
    return -1;  // the writer maps every vocabulary token when it writes a map
  }
  uint64_t lo = 0, hi = info_.vocab_size;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (load_le<int32_t>(vocab_ + 4 * mid) < token) lo = mid + 1;
    else hi = mid;
  }
  return (lo < info_.vocab_size && load_le<int32_t>(vocab_ + 4 * lo) == token) ? static_cast<int64_t>(lo) : -1;
}

int32_t NgramStore::vocab_at(uint64_t rank) const {
  if (rank >= info_.vocab_size) throw std::out_of_range("rank out of range");
  return load_le<int32_t>(vocab_ + 4 * rank);
}

uint64_t NgramStore::node_count_at(uint32_t d, uint64_t i) const {
  if (d < 1 || d > info_.order || i >= info_.level_nodes[d - 1]) throw std::out_of_range("node out of range");
  return read_packed(counts_[d - 1], i, info_.count_bits[d - 1]);
}

uint32_t NgramStore::node_rank_at(uint32_t d, uint64_t i) const {
  if (d < 1 || d > info_.order || i >= info_.level_nodes[d - 1]) throw std::out_of_range("node out of range");
  return static_cast<uint32_t>(read_packed(tokens_[d - 1], i, info_.token_bits));
}

void NgramStore::child_range(uint32_t d, uint64_t i, uint64_t& begin, uint64_t& end) const {
  if (d == 0) {
    begin = 0;
    end = info_.level_nodes[0];
    return;
  }
  const unsigned w = info_.offset_bits[d - 1];
  begin = read_packed(offsets_[d - 1], i, w);
  end = read_packed(offsets_[d - 1], i + 1, w);
  if (begin > end || end > info_.level_nodes[d])
    throw FormatError("corrupt n-gram store: child offsets of node " + std::to_string(i) + " at level " +
                      std::to_string(d) + " are out of range (run verify)");
}

uint64_t NgramStore::find_child(uint32_t d, uint64_t i, uint64_t rank) const {
  if (d == 0 && level1_dense_) return rank < info_.level_nodes[0] ? rank : kNone;
  uint64_t lo, hi;
  child_range(d, i, lo, hi);
  const uint64_t at = gallop(d, lo, hi, rank);
  return (at < hi && read_packed(tokens_[d], at, info_.token_bits) == rank) ? at : kNone;
}

uint64_t NgramStore::suffix_node(const int32_t* context, size_t m, size_t L) const {
  uint64_t node = 0;
  for (size_t j = 0; j < L && node != kNone; ++j) {
    const int64_t r = rank_of(context[m - L + j]);
    node = r < 0 ? kNone : find_child(static_cast<uint32_t>(j), node, static_cast<uint64_t>(r));
  }
  return node;
}

void NgramStore::probability(const int32_t* context, size_t m, const int32_t* tokens, size_t k, float* probs,
                             int32_t* matched) const {
  constexpr size_t kChunk = 64;
  int64_t ranks[kChunk];
  for (size_t s = 0; s < k; s += kChunk) {
    const size_t c = std::min(kChunk, k - s);
    for (size_t j = 0; j < c; ++j) ranks[j] = rank_of(tokens[s + j]);
    probability_ranked(context, m, ranks, c, probs + s, matched + s);
  }
}

uint64_t NgramStore::gallop(uint32_t d, uint64_t lo, uint64_t hi, uint64_t rank) const {
  const uint8_t* toks = tokens_[d];
  const unsigned w = info_.token_bits;
  uint64_t step = 1, probe = lo;
  while (probe < hi && read_packed(toks, probe, w) < rank) {
    lo = probe + 1;
    probe = lo + step;
    step <<= 1;
  }
  if (probe < hi) hi = probe;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (read_packed(toks, mid, w) < rank) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

size_t NgramStore::sort_ranks(const int64_t* ranks, size_t k, uint32_t* order) {
  size_t n = 0;
  for (size_t j = 0; j < k; ++j) {
    if (ranks[j] < 0) continue;
    size_t i = n++;
    for (; i > 0 && ranks[order[i - 1]] > ranks[j]; --i) order[i] = order[i - 1];
    order[i] = static_cast<uint32_t>(j);
  }
  return n;
}

void NgramStore::probability_ranked(const int32_t* context, size_t m, const int64_t* ranks, size_t k,
                                    float* probs, int32_t* matched) const {
  constexpr size_t kStack = 256;
  uint32_t stack_order[kStack];
  std::vector<uint32_t> heap_order;
  uint32_t* order = stack_order;
  if (k > kStack) {
    heap_order.resize(k);
    order = heap_order.data();
  }
  const size_t n_valid = sort_ranks(ranks, k, order);
  probability_sorted(context, m, ranks, order, n_valid, k, probs, matched);
}

void NgramStore::probability_sorted(const int32_t* context, size_t m, const int64_t* ranks, const uint32_t* order,
                                    size_t n_valid, size_t k, float* probs, int32_t* matched) const {
  std::fill(probs, probs + k, 0.0f);
  std::fill(matched, matched + k, 0);
  if (m == 0 || k == 0) return;
  const size_t lmax = std::min<size_t>(info_.order - 1, m);
  size_t unmatched = n_valid;
  // Longest context first; each candidate keeps the first length that knows it.
  for (size_t L = lmax; L >= 1 && unmatched > 0; --L) {
    const uint64_t node = suffix_node(context, m, L);
    if (node == kNone) continue;
    const auto d = static_cast<uint32_t>(L);
    const float inv = 1.0f / static_cast<float>(node_count_at(d, node));
    uint64_t pos, end;
    child_range(d, node, pos, end);
    for (size_t o = 0; o < n_valid && pos < end; ++o) {
      const uint32_t j = order[o];
      if (matched[j]) continue;
      const auto r = static_cast<uint64_t>(ranks[j]);
      pos = gallop(d, pos, end, r);
      if (pos < end && read_packed(tokens_[d], pos, info_.token_bits) == r) {
        probs[j] = static_cast<float>(read_packed(counts_[d], pos, info_.count_bits[d])) * inv;
        matched[j] = static_cast<int32_t>(L);
        --unmatched;
      }
    }
  }
}

static void check_suffix_length(size_t L, size_t m, uint32_t order) {
  if (L < 1 || L > m || L + 1 > order)
    throw std::invalid_argument("n-gram store: suffix length " + std::to_string(L) + " outside 1..min(" +
                                std::to_string(m) + " context tokens, order - 1 = " + std::to_string(order - 1) + ")");
}

uint64_t NgramStore::suffix_counts(const int32_t* context, size_t m, size_t L, const int64_t* ranks,
                                   const uint32_t* order, size_t n_valid, size_t k, uint64_t* child_counts) const {
  check_suffix_length(L, m, info_.order);
  std::fill_n(child_counts, k, uint64_t{0});
  const uint64_t node = suffix_node(context, m, L);
  if (node == kNone) return 0;
  const auto d = static_cast<uint32_t>(L);
  uint64_t pos, end;
  child_range(d, node, pos, end);
  for (size_t o = 0; o < n_valid && pos < end; ++o) {
    const uint32_t j = order[o];
    if (j >= k) throw std::invalid_argument("n-gram store: candidate order out of range");
    const auto r = static_cast<uint64_t>(ranks[j]);
    pos = gallop(d, pos, end, r);
    if (pos < end && read_packed(tokens_[d], pos, info_.token_bits) == r)
      child_counts[j] = read_packed(counts_[d], pos, info_.count_bits[d]);
  }
  return node_count_at(d, node);
}

uint64_t NgramStore::suffix_children(const int32_t* context, size_t m, size_t L,
                                     std::vector<std::pair<int32_t, uint64_t>>& out) const {
  check_suffix_length(L, m, info_.order);
  const uint64_t node = suffix_node(context, m, L);
  if (node == kNone) return 0;
  const auto d = static_cast<uint32_t>(L);
  uint64_t begin, end;
  child_range(d, node, begin, end);
  for (uint64_t p = begin; p < end; ++p)
    out.emplace_back(vocab_at(read_packed(tokens_[d], p, info_.token_bits)),
                     read_packed(counts_[d], p, info_.count_bits[d]));
  return node_count_at(d, node);
}

size_t NgramStore::continuations(const int32_t* context, size_t m, size_t k, int32_t* tokens, float* probs) const {
  if (m == 0 || k == 0 || info_.order < 2) return 0;
  const size_t lmax = std::min<size_t>(info_.order - 1, m);
  std::vector<std::pair<uint64_t, int32_t>> found;  // (count, token id)
  for (size_t L = lmax; L >= 1; --L) {
    const uint64_t node = suffix_node(context, m, L);
    if (node == kNone) continue;
    const auto d = static_cast<uint32_t>(L);
    uint64_t begin, end;
    child_range(d, node, begin, end);
    if (begin == end) continue;
    found.clear();
    found.reserve(end - begin);
    for (uint64_t p = begin; p < end; ++p)
      found.emplace_back(read_packed(counts_[d], p, info_.count_bits[d]),
                         vocab_at(read_packed(tokens_[d], p, info_.token_bits)));
    const size_t n = std::min(k, found.size());
    std::partial_sort(found.begin(), found.begin() + static_cast<std::ptrdiff_t>(n), found.end(),
                      [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first
                                                                                    : a.second < b.second; });
    const float inv = 1.0f / static_cast<float>(node_count_at(d, node));
    for (size_t i = 0; i < n; ++i) {
      tokens[i] = found[i].second;
      probs[i] = static_cast<float>(found[i].first) * inv;
    }
    return n;
  }
  return 0;
}

uint64_t NgramStore::count(const int32_t* ngram, size_t len) const {
  if (len == 0) return info_.root_count;
  if (len > info_.order) return 0;
  uint64_t node = 0;
  for (size_t j = 0; j < len; ++j) {
    const int64_t r = rank_of(ngram[j]);
    if (r < 0) return 0;
    node = find_child(static_cast<uint32_t>(j), node, static_cast<uint64_t>(r));
    if (node == kNone) return 0;
  }
  return node_count_at(static_cast<uint32_t>(len), node);
}

void NgramStore::verify() const {
  for (uint32_t s = 0; s < kNumSections; ++s) {
    if (Checksum::of(data_ + sec_off_[s], sec_size_[s]) != sec_sum_[s])
      throw FormatError("n-gram store section " + std::to_string(s) + " checksum mismatch: the file is corrupt" +
                        at_offset(sec_off_[s]));
  }
  const uint64_t V = info_.vocab_size;
  for (uint64_t r = 1; r < V; ++r)
    if (load_le<int32_t>(vocab_ + 4 * (r - 1)) >= load_le<int32_t>(vocab_ + 4 * r))
      throw FormatError("n-gram store vocabulary is not strictly increasing at rank " + std::to_string(r));
  if (rank_map_) {
    for (uint64_t i = 0; i < info_.map_len; ++i) {
      const int32_t r = load_le<int32_t>(rank_map_ + 4 * i);
      const int64_t tok = static_cast<int64_t>(info_.map_min) + static_cast<int64_t>(i);
      if (r < -1 || (r >= 0 && (static_cast<uint64_t>(r) >= V || load_le<int32_t>(vocab_ + 4 * static_cast<uint64_t>(r)) != tok)))
        throw FormatError("n-gram store rank map entry for token " + std::to_string(tok) + " is wrong");
    }
    for (uint64_t r = 0; r < V; ++r) {
      const int64_t tok = load_le<int32_t>(vocab_ + 4 * r);
      const int64_t i = tok - info_.map_min;
      if (i < 0 || static_cast<uint64_t>(i) >= info_.map_len || load_le<int32_t>(rank_map_ + 4 * static_cast<uint64_t>(i)) != static_cast<int64_t>(r))
        throw FormatError("n-gram store rank map misses token " + std::to_string(tok));
    }
  }
  // Level by level: children sorted and in range, counts >= 1, a parent's
  // count at least the sum of its children's, root count = sum of level 1.
  for (uint32_t d = 0; d < info_.order; ++d) {
    const uint64_t parents = d == 0 ? 1 : info_.level_nodes[d - 1];
    const uint64_t kids = info_.level_nodes[d];
    const unsigned cw = info_.count_bits[d];
    if (d > 0) {
      const unsigned ow = info_.offset_bits[d - 1];
      if (read_packed(offsets_[d - 1], 0, ow) != 0 || read_packed(offsets_[d - 1], parents, ow) != kids)
        throw FormatError("n-gram store offsets of level " + std::to_string(d) + " do not span level " +
                          std::to_string(d + 1));
    }
    for (uint64_t p = 0; p < parents; ++p) {
      uint64_t b, e;
      child_range(d, p, b, e);
      const uint64_t pc = d == 0 ? info_.root_count : read_packed(counts_[d - 1], p, info_.count_bits[d - 1]);
      uint64_t sum = 0;
      uint64_t prev = 0;
      for (uint64_t c = b; c < e; ++c) {
        const uint64_t t = read_packed(tokens_[d], c, info_.token_bits);
        if (t >= V) throw FormatError("n-gram store token rank out of range at level " + std::to_string(d + 1));
        if (c > b && t <= prev)
          throw FormatError("n-gram store children not strictly sorted at level " + std::to_string(d + 1) +
                            ", node " + std::to_string(c));
        if (d == 0 && level1_dense_ && t != c)
          throw FormatError("n-gram store dense level 1 is not the identity at node " + std::to_string(c));
        prev = t;
        const uint64_t cc = read_packed(counts_[d], c, cw);
        if (cc == 0) throw FormatError("n-gram store node with count 0 at level " + std::to_string(d + 1));
        sum += cc;
      }
      if (d == 0 ? sum != pc : sum > pc)
        throw FormatError("n-gram store counts inconsistent: children of node " + std::to_string(p) + " at level " +
                          std::to_string(d) + " count " + std::to_string(sum) + ", parent " + std::to_string(pc));
    }
  }
}

}  // namespace dart
