#include "ngram_writer.hpp"

#include <algorithm>
#include <stdexcept>

#include "common.hpp"
#include "ngram_format.hpp"

#if defined(_WIN32)
#define DART_FSEEK _fseeki64
#else
#define DART_FSEEK fseeko
#endif

namespace dart {

LevelVectorSource::LevelVectorSource(std::vector<LevelRecord> recs) : recs_(std::move(recs)) {
  for (const auto& r : recs_) max_count_ = std::max(max_count_, r.count);
}

size_t LevelVectorSource::read(LevelRecord* buf, size_t cap) {
  const size_t n = std::min(cap, recs_.size() - pos_);
  std::copy(recs_.begin() + static_cast<std::ptrdiff_t>(pos_), recs_.begin() + static_cast<std::ptrdiff_t>(pos_ + n), buf);
  pos_ += n;
  return n;
}

void MemorySink::write_at(uint64_t off, const uint8_t* p, size_t n) {
  if (off > bytes.size() || n > bytes.size() - off) throw std::logic_error("MemorySink write out of range");
  std::copy(p, p + n, bytes.begin() + static_cast<std::ptrdiff_t>(off));
}

FileSink::FileSink(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) throw std::runtime_error("cannot open '" + path + "' for writing");
}

FileSink::~FileSink() {
  if (f_) std::fclose(f_);
}

void FileSink::resize(uint64_t) {}

void FileSink::write_at(uint64_t off, const uint8_t* p, size_t n) {
  if (!f_) throw std::logic_error("FileSink is closed");
  if (DART_FSEEK(f_, static_cast<off_t>(off), SEEK_SET) != 0 || std::fwrite(p, 1, n, f_) != n)
    throw std::runtime_error("write to '" + path_ + "' failed (disk full?)");
}

void FileSink::close() {
  if (!f_) return;
  const bool ok = std::fflush(f_) == 0;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok || !closed) throw std::runtime_error("closing '" + path_ + "' failed (disk full?)");
}

namespace {

// Sequential writer of one section: packed values or raw bytes, checksummed,
// zero-padded to the section's size, flushed to the sink in large blocks.
class SectionWriter {
 public:
  SectionWriter(Sink& sink, uint64_t off, uint64_t size, unsigned width)
      : sink_(sink), pos_(off), end_(off + size), width_(width) {
    buf_.reserve(kBlock);
  }
  void put(uint64_t v) {
    acc_ |= v << acc_bits_;
    acc_bits_ += width_;
    while (acc_bits_ >= 8) {
      byte(static_cast<uint8_t>(acc_));
      acc_ >>= 8;
      acc_bits_ -= 8;
    }
  }
  void put_bytes(const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) byte(p[i]);
  }
  uint64_t finish() {
    if (acc_bits_) byte(static_cast<uint8_t>(acc_));
    acc_ = 0;
    acc_bits_ = 0;
    while (pos_ + buf_.size() < end_) byte(0);
    flush();
    if (pos_ != end_) throw std::logic_error("section overflow in n-gram writer");
    return sum_.finish();
  }

 private:
  static constexpr size_t kBlock = 1 << 20;
  void byte(uint8_t b) {
    buf_.push_back(b);
    if (buf_.size() == kBlock) flush();
  }
  void flush() {
    if (buf_.empty()) return;
    if (pos_ + buf_.size() > end_) throw std::logic_error("section overflow in n-gram writer");
    sink_.write_at(pos_, buf_.data(), buf_.size());
    sum_.update(buf_.data(), buf_.size());
    pos_ += buf_.size();
    buf_.clear();
  }
  Sink& sink_;
  uint64_t pos_, end_;
  unsigned width_;
  std::vector<uint8_t> buf_;
  Checksum sum_;
  uint64_t acc_ = 0;
  unsigned acc_bits_ = 0;
};

uint64_t align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

}  // namespace

void write_store(Sink& sink, uint32_t order, uint64_t root_count, const std::vector<int32_t>& vocab,
                 const std::vector<LevelSource*>& levels) {
  if (order < 1 || order > kMaxOrder)
    throw std::invalid_argument("n-gram order must be in 1.." + std::to_string(kMaxOrder) + ", got " +
                                std::to_string(order));
  if (levels.size() != order) throw std::invalid_argument("write_store needs one level source per order");
  const uint64_t V = vocab.size();
  if (V > (uint64_t{1} << 32)) throw std::invalid_argument("vocabulary too large");
  for (uint64_t r = 1; r < V; ++r)
    if (vocab[r - 1] >= vocab[r]) throw std::invalid_argument("vocabulary must be sorted and distinct");

  uint64_t n[kMaxOrder + 1] = {0};
  uint32_t cbits[kMaxOrder] = {0}, obits[kMaxOrder] = {0};
  for (uint32_t d = 1; d <= order; ++d) {
    n[d] = levels[d - 1]->size();
    if (n[d] > (uint64_t{1} << 56)) throw std::invalid_argument("level too large");
    cbits[d - 1] = bits_for(levels[d - 1]->max_count());
    if (cbits[d - 1] > kMaxPackedBits) throw std::invalid_argument("count too large");
  }
  for (uint32_t d = 1; d < order; ++d) obits[d - 1] = bits_for(n[d + 1]);
  const unsigned tbits = bits_for(V ? V - 1 : 0);

  int32_t map_min = 0;
  uint64_t map_len = 0;
  if (V) {
    const uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(vocab.back()) - vocab.front()) + 1;
    if (range <= std::max<uint64_t>(uint64_t{1} << 20, 8 * V) && range <= (uint64_t{1} << 26)) {
      map_min = vocab.front();
      map_len = range;
    }
  }

  uint64_t size[kNumSections] = {0};
  size[kSecVocab] = align8(4 * V);
  size[kSecRankMap] = map_len ? align8(4 * map_len) : 0;
  for (uint32_t d = 1; d <= order; ++d) {
    size[sec_counts(d)] = packed_bytes(n[d], cbits[d - 1]);
    size[sec_tokens(d)] = packed_bytes(n[d], tbits);
    size[sec_offsets(d)] = d < order ? packed_bytes(n[d] + 1, obits[d - 1]) : 0;
  }
  // Empty sections (leaf offsets, unused levels) keep the checksum of nothing.
  uint64_t off[kNumSections] = {0}, sum[kNumSections] = {0};
  uint64_t pos = hdr::kSize;
  for (uint32_t s = 0; s < kNumSections; ++s) {
    sum[s] = Checksum::of(nullptr, 0);
    off[s] = pos;
    pos += size[s];
  }
  const uint64_t total = pos;
  sink.resize(total);

  {
    SectionWriter w(sink, off[kSecVocab], size[kSecVocab], 8);
    for (int32_t t : vocab) {
      uint8_t b[4];
      store_le<int32_t>(b, t);
      w.put_bytes(b, 4);
    }
    sum[kSecVocab] = w.finish();
  }
  {
    SectionWriter w(sink, off[kSecRankMap], size[kSecRankMap], 8);
    if (map_len) {
      std::vector<int32_t> map(map_len, -1);
      for (uint64_t r = 0; r < V; ++r) map[static_cast<uint64_t>(static_cast<int64_t>(vocab[r]) - map_min)] = static_cast<int32_t>(r);
      for (int32_t r : map) {
        uint8_t b[4];
        store_le<int32_t>(b, r);
        w.put_bytes(b, 4);
      }
    }
    sum[kSecRankMap] = w.finish();
  }

  std::vector<LevelRecord> buf(1 << 16);
  for (uint32_t d = 1; d <= order; ++d) {
    SectionWriter counts(sink, off[sec_counts(d)], size[sec_counts(d)], cbits[d - 1]);
    SectionWriter toks(sink, off[sec_tokens(d)], size[sec_tokens(d)], tbits);
    // Offsets of level d-1 come from the parent indices of level d.
    const bool has_parent_offsets = d >= 2;
    SectionWriter offs(sink, has_parent_offsets ? off[sec_offsets(d - 1)] : 0,
                       has_parent_offsets ? size[sec_offsets(d - 1)] : 0, has_parent_offsets ? obits[d - 2] : 1);
    const uint64_t nparents = d == 1 ? 1 : n[d - 1];
    const uint64_t maxc = levels[d - 1]->max_count();
    uint64_t i = 0, next_parent = 0, last_parent = 0;
    uint32_t last_rank = 0;
    for (size_t got; (got = levels[d - 1]->read(buf.data(), buf.size())) > 0;) {
      for (size_t j = 0; j < got; ++j, ++i) {
        const LevelRecord& r = buf[j];
        auto where = [&] { return "level " + std::to_string(d) + " node " + std::to_string(i); };
        if (i >= n[d]) throw std::invalid_argument("level " + std::to_string(d) + " has more nodes than announced");
        if (r.parent >= nparents) throw std::invalid_argument(where() + ": parent index out of range");
        if (i > 0 && r.parent < last_parent) throw std::invalid_argument(where() + ": parents not sorted");
        if (r.rank >= V) throw std::invalid_argument(where() + ": token rank out of range");
        if (i > 0 && r.parent == last_parent && r.rank <= last_rank)
          throw std::invalid_argument(where() + ": sibling tokens not strictly increasing (duplicate child?)");
        if (r.count < 1 || r.count > maxc) throw std::invalid_argument(where() + ": count out of range");
        if (has_parent_offsets)
          for (; next_parent <= r.parent; ++next_parent) offs.put(i);
        counts.put(r.count);
        toks.put(r.rank);
        last_parent = r.parent;
        last_rank = r.rank;
      }
    }
    if (i != n[d]) throw std::invalid_argument("level " + std::to_string(d) + " has fewer nodes than announced");
    if (has_parent_offsets) {
      for (; next_parent <= nparents; ++next_parent) offs.put(n[d]);
      sum[sec_offsets(d - 1)] = offs.finish();
    }
    sum[sec_counts(d)] = counts.finish();
    sum[sec_tokens(d)] = toks.finish();
  }
  uint8_t h[hdr::kSize] = {0};
  std::memcpy(h + hdr::kMagicOff, kMagic, 8);
  store_le<uint32_t>(h + hdr::kVersion, kFormatVersion);
  store_le<uint32_t>(h + hdr::kOrder, order);
  store_le<uint64_t>(h + hdr::kFileSize, total);
  store_le<uint64_t>(h + hdr::kRootCount, root_count);
  store_le<uint64_t>(h + hdr::kVocabSize, V);
  store_le<int32_t>(h + hdr::kMapMin, map_min);
  store_le<uint32_t>(h + hdr::kTokenBits, tbits);
  store_le<uint64_t>(h + hdr::kMapLen, map_len);
  for (uint32_t d = 1; d <= order; ++d) {
    const uint64_t lo = hdr::kLevels + (d - 1) * hdr::kLevelStride;
    store_le<uint64_t>(h + lo, n[d]);
    store_le<uint32_t>(h + lo + 8, cbits[d - 1]);
    store_le<uint32_t>(h + lo + 12, obits[d - 1]);
  }
  for (uint32_t s = 0; s < kNumSections; ++s) {
    const uint64_t so = hdr::kSections + s * hdr::kSectionStride;
    store_le<uint64_t>(h + so, off[s]);
    store_le<uint64_t>(h + so + 8, size[s]);
    store_le<uint64_t>(h + so + 16, sum[s]);
  }
  store_le<uint64_t>(h + hdr::kHeaderSum, Checksum::of(h, hdr::kHeaderSum));
  sink.write_at(0, h, hdr::kSize);
}

}  // namespace dart
