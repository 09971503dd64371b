// External merge sort of fixed-size records with bounded memory, for the
// streaming .trie converter: sort chunks that fit the budget in RAM, spill the
// sorted runs to one temporary file, merge them with a heap (in several passes
// when there are more runs than the budget allows buffers for). When all
// records fit one chunk no file is created.
//
// Temporary files are created with mkstemp() in the given directory and
// unlinked at once: the data lives as long as the descriptor, so nothing is
// left behind on success, on error, or even when the process dies. (POSIX.)
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace dart::xsort {

// An anonymous temporary file: appended to, read back with positioned reads.
class TempFile {
 public:
  explicit TempFile(const std::string& dir) {
    std::string tmpl = (dir.empty() ? std::string(".") : dir) + "/.dart-convert-XXXXXX";
    std::vector<char> name(tmpl.begin(), tmpl.end());
    name.push_back('\0');
    fd_ = ::mkstemp(name.data());
    if (fd_ < 0)
      throw std::runtime_error("cannot create a temporary file in '" + (dir.empty() ? std::string(".") : dir) +
                               "': " + std::strerror(errno));
    path_ = name.data();
    ::unlink(path_.c_str());
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  uint64_t size() const { return size_; }

  void append(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n) {
      const ssize_t w = ::pwrite(fd_, c, n, static_cast<off_t>(size_));
      if (w < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error("write to temporary file '" + path_ + "' failed: " + std::strerror(errno) +
                                 " (disk full?)");
      }
      if (w == 0) throw std::runtime_error("write to temporary file '" + path_ + "' failed (disk full?)");
      c += w;
      n -= static_cast<size_t>(w);
      size_ += static_cast<uint64_t>(w);
    }
  }

  void read_at(uint64_t off, void* p, size_t n) const {
    char* c = static_cast<char*>(p);
    while (n) {
      const ssize_t r = ::pread(fd_, c, n, static_cast<off_t>(off));
      if (r < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error("read from temporary file '" + path_ + "' failed: " + std::strerror(errno));
      }
      if (r == 0) throw std::runtime_error("temporary file '" + path_ + "' is shorter than written");
      c += r;
      n -= static_cast<size_t>(r);
      off += static_cast<uint64_t>(r);
    }
  }

 private:
  int fd_ = -1;
  std::string path_;
  uint64_t size_ = 0;
};

// Buffered appender of records to a TempFile.
template <class T>
class RecordWriter {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  RecordWriter(TempFile& f, size_t buf_records) : f_(f) { buf_.reserve(std::max<size_t>(buf_records, 1)); }
  void push(const T& v) {
    buf_.push_back(v);
    if (buf_.size() == buf_.capacity()) flush();
  }
  void flush() {
    if (!buf_.empty()) f_.append(buf_.data(), buf_.size() * sizeof(T));
    buf_.clear();
  }
  uint64_t written() const { return (f_.size() / sizeof(T)) + buf_.size(); }

 private:
  TempFile& f_;
  std::vector<T> buf_;
};

// Buffered sequential reader of `count` records starting at byte `off` of a TempFile.
template <class T>
class RecordReader {
 public:
  RecordReader(const TempFile* f, uint64_t off, uint64_t count, size_t buf_records)
      : f_(f), off_(off), left_(count), buf_(std::max<size_t>(buf_records, 1)) {}
  bool next(T& out) {
    if (pos_ == len_) {
      if (left_ == 0) return false;
      len_ = static_cast<size_t>(std::min<uint64_t>(left_, buf_.size()));
      f_->read_at(off_, buf_.data(), len_ * sizeof(T));
      off_ += len_ * sizeof(T);
      left_ -= len_;
      pos_ = 0;
    }
    out = buf_[pos_++];
    return true;
  }

 private:
  const TempFile* f_;
  uint64_t off_, left_;
  std::vector<T> buf_;
  size_t pos_ = 0, len_ = 0;
};

// K-way merge of sorted record readers with a binary heap.
template <class T, class Less>
class Merger {
 public:
  Merger(std::vector<RecordReader<T>> readers, Less less) : rd_(std::move(readers)), head_(rd_.size()), less_(less) {
    for (size_t i = 0; i < rd_.size(); ++i)
      if (rd_[i].next(head_[i])) heap_.push_back(i);
    for (size_t i = heap_.size() / 2; i-- > 0;) sift(i);
  }
  bool next(T& out) {
    if (heap_.empty()) return false;
    const size_t top = heap_[0];
    out = head_[top];
    if (!rd_[top].next(head_[top])) {
      heap_[0] = heap_.back();
      heap_.pop_back();
    }
    if (!heap_.empty()) sift(0);
    return true;
  }

 private:
  bool lt(size_t a, size_t b) const { return less_(head_[a], head_[b]); }
  void sift(size_t i) {
    const size_t n = heap_.size();
    const size_t v = heap_[i];
    for (;;) {
      size_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && lt(heap_[c + 1], heap_[c])) ++c;
      if (!lt(heap_[c], v)) break;
      heap_[i] = heap_[c];
      i = c;
    }
    heap_[i] = v;
  }
  std::vector<RecordReader<T>> rd_;
  std::vector<T> head_;
  std::vector<size_t> heap_;
  Less less_;
};

// Sorts any number of records using about `budget` bytes of RAM. Usage:
// push()* then finish() then next()* (each record once, in `less` order).
template <class T, class Less>
class ExternalSorter {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  static constexpr uint64_t kMinChunk = 16;  // records per in-RAM chunk, at least
  static constexpr uint64_t kMinBuf = 4;     // records per merge buffer, at least
  static constexpr uint64_t kMaxFanIn = 512;

  ExternalSorter(std::string dir, uint64_t budget_bytes, Less less = Less())
      : dir_(std::move(dir)), less_(less) {
    budget_recs_ = std::max<uint64_t>(budget_bytes / sizeof(T), kMinChunk);
    buf_.reserve(static_cast<size_t>(budget_recs_));  // untouched pages cost no RAM
  }

  void push(const T& v) {
    if (buf_.size() == budget_recs_) spill();
    buf_.push_back(v);
    ++n_;
  }

  uint64_t size() const { return n_; }
  uint64_t runs_spilled() const { return spilled_; }

  void finish() {
    if (runs_.empty()) {
      std::sort(buf_.begin(), buf_.end(), less_);
      in_memory_ = true;
      return;
    }
    if (!buf_.empty()) spill();
    std::vector<T>().swap(buf_);
    const uint64_t fan_in = std::clamp<uint64_t>(budget_recs_ / kMinBuf - 1, 2, kMaxFanIn);
    while (runs_.size() > fan_in) {
      auto out = std::make_unique<TempFile>(dir_);
      std::vector<Run> next_runs;
      for (size_t g = 0; g < runs_.size(); g += fan_in) {
        const size_t e = std::min<size_t>(runs_.size(), g + fan_in);
        const size_t bufn = buf_records(e - g + 1);
        Merger<T, Less> m(readers(g, e, bufn), less_);
        RecordWriter<T> w(*out, bufn);
        const uint64_t start = out->size();
        uint64_t cnt = 0;
        for (T v; m.next(v); ++cnt) w.push(v);
        w.flush();
        next_runs.push_back({start, cnt});
      }
      file_ = std::move(out);
      runs_.swap(next_runs);
    }
    merger_ = std::make_unique<Merger<T, Less>>(readers(0, runs_.size(), buf_records(runs_.size())), less_);
  }

  bool next(T& out) {
    if (in_memory_) {
      if (pos_ == buf_.size()) {
        if (!buf_.empty()) std::vector<T>().swap(buf_);
        return false;
      }
      out = buf_[pos_++];
      return true;
    }
    return merger_ && merger_->next(out);
  }

 private:
  struct Run {
    uint64_t off, count;
  };
  size_t buf_records(size_t streams) const {
    return static_cast<size_t>(std::max<uint64_t>(kMinBuf, budget_recs_ / std::max<size_t>(streams, 1)));
  }
  std::vector<RecordReader<T>> readers(size_t b, size_t e, size_t bufn) const {
    std::vector<RecordReader<T>> r;
    r.reserve(e - b);
    for (size_t i = b; i < e; ++i) r.emplace_back(file_.get(), runs_[i].off, runs_[i].count, bufn);
    return r;
  }
  void spill() {
    std::sort(buf_.begin(), buf_.end(), less_);
    if (!file_) file_ = std::make_unique<TempFile>(dir_);
    runs_.push_back({file_->size(), buf_.size()});
    file_->append(buf_.data(), buf_.size() * sizeof(T));
    buf_.clear();
    ++spilled_;
  }

  std::string dir_;
  Less less_;
  uint64_t budget_recs_;
  std::vector<T> buf_;
  uint64_t n_ = 0, spilled_ = 0;
  std::unique_ptr<TempFile> file_;
  std::vector<Run> runs_;
  bool in_memory_ = false;
  size_t pos_ = 0;
  std::unique_ptr<Merger<T, Less>> merger_;
};

}  // namespace dart::xsort
