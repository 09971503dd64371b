// Writes our N-gram store format from level-by-level streams of nodes, so the
// in-memory builder and the streaming .trie converter share one writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dart {

// One node of level d: its parent's index at level d-1 (0 for level 1), the
// rank of its last token in the vocabulary, and its count.
struct LevelRecord {
  uint64_t parent;
  uint64_t count;
  uint32_t rank;
  uint32_t pad = 0;
};

// Nodes of one level in store order: by parent index, then by rank.
class LevelSource {
 public:
  virtual ~LevelSource() = default;
  virtual uint64_t size() const = 0;       // number of nodes
  virtual uint64_t max_count() const = 0;  // largest count (>= 1 when size > 0)
  // Fills up to cap records; returns how many (0 at the end).
  virtual size_t read(LevelRecord* buf, size_t cap) = 0;
};

class LevelVectorSource : public LevelSource {
 public:
  explicit LevelVectorSource(std::vector<LevelRecord> recs);
  uint64_t size() const override { return recs_.size(); }
  uint64_t max_count() const override { return max_count_; }
  size_t read(LevelRecord* buf, size_t cap) override;

 private:
  std::vector<LevelRecord> recs_;
  uint64_t max_count_ = 0;
  size_t pos_ = 0;
};

// Where the bytes go: positioned writes into a region of known total size.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void resize(uint64_t total) = 0;
  virtual void write_at(uint64_t off, const uint8_t* p, size_t n) = 0;
};

class MemorySink : public Sink {
 public:
  void resize(uint64_t total) override { bytes.assign(total, 0); }
  void write_at(uint64_t off, const uint8_t* p, size_t n) override;
  std::vector<uint8_t> bytes;
};

class FileSink : public Sink {
 public:
  explicit FileSink(const std::string& path);  // truncates / creates; throws std::runtime_error
  ~FileSink() override;
  void resize(uint64_t total) override;
  void write_at(uint64_t off, const uint8_t* p, size_t n) override;
  void close();  // flushes; throws on I/O error

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

// Writes a complete store. `vocab` is sorted, distinct token ids (rank =
// index); levels[d-1] streams level d. Validates the streams (parents in range
// and non-decreasing, ranks strictly increasing per parent, counts >= 1) and
// throws std::invalid_argument naming the first violation.
void write_store(Sink& sink, uint32_t order, uint64_t root_count, const std::vector<int32_t>& vocab,
                 const std::vector<LevelSource*>& levels);

}  // namespace dart
