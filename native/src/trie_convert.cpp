// Streaming .trie → our format. Memory is O(memory_budget) (+ O(vocabulary)):
// nothing is held per node; every join below is a merge of streams sorted by
// external merge sort (external_sort.hpp).
//
//  1. scan   read the input once, sequentially, validating every field in
//            place (byte offsets in the messages). Emits: the node file (one
//            24-byte record per node, in id order), child entries to a sorter
//            keyed by child id, nodes to a sorter keyed by (parent, token, id),
//            and the set of distinct tokens (the vocabulary).
//  2. check  one pass over three id-ordered streams at once: node file, child
//            entries by child id (every non-root node listed exactly once, by
//            its own parent, with its own token), nodes grouped by parent
//            (distinct sibling tokens; children's counts ≤ the parent's count,
//            = for the root). Children of the root are level 1, already in
//            store order; the other nodes go to the "rest" file, by parent.
//  3. levels level d+1 = nodes of the rest whose parent is at level d: merge
//            the rest (by parent id) with level d sorted by id (id → position),
//            then sort them by (parent position, token) = store order. Nodes
//            still unplaced after level `order` are deeper than the order.
//  4. write  stream the level files into write_store.
#include "trie_convert.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common.hpp"
#include "external_sort.hpp"
#include "ngram_format.hpp"
#include "ngram_writer.hpp"

namespace dart {

namespace {

using xsort::ExternalSorter;
using xsort::RecordReader;
using xsort::RecordWriter;
using xsort::TempFile;

constexpr uint64_t kHeaderBytes = 16;
constexpr uint64_t kRecordBytes = 24;
constexpr uint64_t kEntryBytes = 12;
constexpr uint64_t kMinBudget = 4096;

// ---------------------------------------------------------------- records
struct NodeRec {  // node file: id = index
  uint64_t parent;
  uint64_t offset;  // byte offset of the node's record
  int32_t token;
  int32_t count;
};
struct EntryRec {  // a child entry (token, child id) inside the record of `parent`
  uint64_t child;
  uint64_t parent;
  uint64_t offset;  // byte offset of the entry
  int32_t token;
  uint32_t pad;
};
struct EntryByChild {
  bool operator()(const EntryRec& a, const EntryRec& b) const {
    return a.child != b.child ? a.child < b.child : a.offset < b.offset;
  }
};
struct ChildRec {  // a node, to be grouped by its parent
  uint64_t parent;
  uint64_t id;
  uint64_t offset;
  int32_t token;
  int32_t count;
};
struct ChildByParent {
  bool operator()(const ChildRec& a, const ChildRec& b) const {
    if (a.parent != b.parent) return a.parent < b.parent;
    if (a.token != b.token) return a.token < b.token;
    return a.id < b.id;
  }
};
struct IdPos {  // a node of level d and its position there
  uint64_t id;
  uint64_t pos;
};
struct IdPosById {
  bool operator()(const IdPos& a, const IdPos& b) const { return a.id < b.id; }
};
struct LevelNode {  // a node of level d+1 with its parent's position at level d
  uint64_t ppos;
  uint64_t id;
  int32_t token;
  int32_t count;
};
struct LevelNodeByStoreOrder {
  bool operator()(const LevelNode& a, const LevelNode& b) const {
    return a.ppos != b.ppos ? a.ppos < b.ppos : a.token < b.token;  // (ppos, token) distinct: checked in phase 2
  }
};

std::string node_at(uint64_t id, uint64_t off) {
  return "node " + std::to_string(id) + " (record at byte offset " + std::to_string(off) + ")";
}

// ---------------------------------------------------------------- token → rank
// Open-addressing hash map int32 → uint32 (the vocabulary is small).
class TokenMap {
 public:
  explicit TokenMap(size_t expected = 512) {
    size_t cap = 1024;
    while (cap < 2 * expected + 2) cap *= 2;
    rehash(cap);
  }
  // Inserts with value 0 if absent.
  void insert(int32_t t) {
    if (has_last_ && t == last_) return;
    last_ = t;
    has_last_ = true;
    size_t h = slot(t);
    while (used_[h]) {
      if (keys_[h] == t) return;
      h = (h + 1) & mask_;
    }
    used_[h] = 1;
    keys_[h] = t;
    vals_[h] = 0;
    if (++n_ * 2 > keys_.size()) rehash(keys_.size() * 2);
  }
  void set(int32_t t, uint32_t v) {
    size_t h = slot(t);
    while (used_[h] && keys_[h] != t) h = (h + 1) & mask_;
    used_[h] = 1;
    keys_[h] = t;
    vals_[h] = v;
  }
  uint32_t get(int32_t t) const {  // t must be present
    size_t h = slot(t);
    while (used_[h] && keys_[h] != t) h = (h + 1) & mask_;
    if (!used_[h]) throw std::logic_error("convert_trie: internal error, token missing from the vocabulary");
    return vals_[h];
  }
  std::vector<int32_t> sorted_keys() const {
    std::vector<int32_t> v;
    v.reserve(n_);
    for (size_t i = 0; i < keys_.size(); ++i)
      if (used_[i]) v.push_back(keys_[i]);
    std::sort(v.begin(), v.end());
    return v;
  }

 private:
  size_t slot(int32_t t) const {
    uint64_t x = static_cast<uint32_t>(t) * 0x9e3779b97f4a7c15ULL;
    return static_cast<size_t>(x >> 20) & mask_;
  }
  void rehash(size_t cap) {
    std::vector<int32_t> k(cap);
    std::vector<uint32_t> v(cap);
    std::vector<uint8_t> u(cap, 0);
    keys_.swap(k);
    vals_.swap(v);
    used_.swap(u);
    mask_ = cap - 1;
    for (size_t i = 0; i < u.size(); ++i)
      if (u[i]) set(k[i], v[i]);
  }
  std::vector<int32_t> keys_;
  std::vector<uint32_t> vals_;
  std::vector<uint8_t> used_;
  size_t mask_ = 0, n_ = 0;
  int32_t last_ = 0;
  bool has_last_ = false;
};

// ---------------------------------------------------------------- input
class InputFile {
 public:
  InputFile(const std::string& path, size_t buf_bytes) : path_(path), buf_(std::max<size_t>(buf_bytes, 64)) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error("cannot open '" + path + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw std::runtime_error("cannot stat '" + path + "': " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw std::runtime_error("'" + path + "' is not a regular file");
    size_ = static_cast<uint64_t>(st.st_size);
#ifdef POSIX_FADV_SEQUENTIAL
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  }
  ~InputFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  uint64_t offset() const { return file_pos_ - (len_ - pos_); }  // offset of the next unread byte

  // Pointer to the next n (≤ 64) bytes, consumed; throws FormatError at end of file.
  const uint8_t* take(size_t n, const char* what) {
    if (len_ - pos_ < n) refill(n, what);
    const uint8_t* p = buf_.data() + pos_;
    pos_ += n;
    return p;
  }

 private:
  void refill(size_t n, const char* what) {
    std::memmove(buf_.data(), buf_.data() + pos_, len_ - pos_);
    len_ -= pos_;
    pos_ = 0;
    while (len_ < n) {
      const ssize_t r = ::read(fd_, buf_.data() + len_, buf_.size() - len_);
      if (r < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error("read from '" + path_ + "' failed: " + std::strerror(errno));
      }
      if (r == 0)
        throw FormatError(std::string("truncated .trie: the file ends inside ") + what + at_offset(file_pos_ - len_));
      len_ += static_cast<size_t>(r);
      file_pos_ += static_cast<uint64_t>(r);
    }
  }
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::vector<uint8_t> buf_;
  size_t pos_ = 0, len_ = 0;
  uint64_t file_pos_ = 0;  // file offset just past buf_[len_-1]
};

// Level records in a temp file, streamed into write_store.
class FileLevelSource : public LevelSource {
 public:
  FileLevelSource(const TempFile* f, uint64_t n, uint64_t max_count, size_t buf)
      : reader_(f, 0, n, buf), n_(n), max_count_(max_count) {}
  uint64_t size() const override { return n_; }
  uint64_t max_count() const override { return max_count_; }
  size_t read(LevelRecord* buf, size_t cap) override {
    size_t i = 0;
    while (i < cap && reader_.next(buf[i])) ++i;
    if (on_read) on_read(i);
    return i;
  }
  std::function<void(size_t)> on_read;

 private:
  RecordReader<LevelRecord> reader_;
  uint64_t n_, max_count_;
};

struct Level {
  std::unique_ptr<TempFile> file;  // LevelRecords in store order
  uint64_t n = 0;
  uint64_t max_count = 0;
};

class Converter {
 public:
  Converter(const std::string& trie_path, const std::string& out_path, const ConvertOptions& opts)
      : trie_path_(trie_path), out_path_(out_path), opts_(opts) {
    budget_ = std::max(opts.memory_budget, kMinBudget);
    share_ = budget_ / 3;  // at most three sorters hold memory at any time
    io_ = static_cast<size_t>(std::clamp<uint64_t>(budget_ / 32, 4096, uint64_t{4} << 20));
    tmp_dir_ = opts.tmp_dir;
    if (tmp_dir_.empty()) {
      const auto slash = out_path.find_last_of('/');
      tmp_dir_ = slash == std::string::npos ? "." : (slash == 0 ? "/" : out_path.substr(0, slash));
    }
  }

  ConvertStats run() {
    InputFile in(trie_path_, io_);
    total_bytes_ = in.size();
    progress(0, "scan");
    scan(in);
    check();
    for (uint32_t d = 1; d < order_ && rest_n_ > 0; ++d) next_level(d);
    if (rest_n_ > 0) throw FormatError(depth_error_);
    return write();
  }

 private:
  // ------------------------------------------------------------ progress
  void progress(uint64_t done, const char* phase) {
    if (opts_.progress) opts_.progress(std::min(done, total_bytes_), total_bytes_, phase);
  }
  // Progress of a phase that walks `total` items, shown on the input's byte scale.
  void progress_items(uint64_t done, uint64_t total, const char* phase) {
    if (!opts_.progress) return;
    const long double f = total ? static_cast<long double>(done) / static_cast<long double>(total) : 1.0L;
    progress(static_cast<uint64_t>(f * static_cast<long double>(total_bytes_)), phase);
  }

  // ------------------------------------------------------------ 1. scan
  void scan(InputFile& in) {
    const uint64_t fsize = in.size();
    if (fsize < kHeaderBytes)
      throw FormatError("truncated .trie header: the file has " + std::to_string(fsize) + " bytes, the header needs " +
                        std::to_string(kHeaderBytes) + at_offset(fsize));
    const uint8_t* h = in.take(kHeaderBytes, "the header");
    const uint64_t order = load_le<uint64_t>(h);
    nc_ = load_le<uint64_t>(h + 8);
    if (order < 1 || order > kMaxOrder)
      throw FormatError(".trie order " + std::to_string(order) + " out of range 1.." + std::to_string(kMaxOrder) +
                        at_offset(0));
    order_ = static_cast<uint32_t>(order);
    if (nc_ == 0) throw FormatError(".trie node_count is 0 (the root is always present)" + at_offset(8));
    uint64_t need = 0;
    try {
      need = checked_add(checked_add(kHeaderBytes, checked_mul(nc_, kRecordBytes, "n"), "n"),
                         checked_mul(nc_ - 1, kEntryBytes, "n"), "n");
    } catch (const FormatError&) {
      throw FormatError(".trie node_count " + std::to_string(nc_) +
                        " is absurd: its file size overflows 64 bits (the file has " + std::to_string(fsize) +
                        " bytes)" + at_offset(8));
    }
    if (fsize < need)
      throw FormatError("truncated .trie: node_count " + std::to_string(nc_) + " (at byte offset 8) needs " +
                        std::to_string(need) + " bytes, the file has " + std::to_string(fsize) +
                        "; it ends" + at_offset(fsize));
    if (fsize > need)
      throw FormatError(".trie has trailing bytes: node_count " + std::to_string(nc_) + " (at byte offset 8) needs " +
                        std::to_string(need) + " bytes, the file has " + std::to_string(fsize) + " (" +
                        std::to_string(fsize - need) + " trailing bytes start" + at_offset(need) + ")");

    node_file_ = std::make_unique<TempFile>(tmp_dir_);
    RecordWriter<NodeRec> nodes(*node_file_, io_ / sizeof(NodeRec));
    entries_ = std::make_unique<ExternalSorter<EntryRec, EntryByChild>>(tmp_dir_, share_);
    children_ = std::make_unique<ExternalSorter<ChildRec, ChildByParent>>(tmp_dir_, share_);

    uint64_t next_report = uint64_t{64} << 20;
    for (uint64_t k = 0; k < nc_; ++k) {
      const uint64_t off = in.offset();
      const uint8_t* r = in.take(kRecordBytes, "a node record");
      const int32_t token = load_le<int32_t>(r);
      const uint64_t parent = load_le<uint64_t>(r + 4);
      const int32_t count = load_le<int32_t>(r + 12);
      const uint64_t nch = load_le<uint64_t>(r + 16);
      if (k == 0) {
        if (token != 0)
          throw FormatError("root record has token " + std::to_string(token) + ", expected 0" + at_offset(off));
        if (parent != 0)
          throw FormatError("root record has parent " + std::to_string(parent) + ", expected 0" + at_offset(off + 4));
        if (count < 0)
          throw FormatError("root record has a negative count " + std::to_string(count) + at_offset(off + 12));
        root_count_ = static_cast<uint64_t>(count);
      } else {
        if (parent >= k)
          throw FormatError(node_at(k, off) + " has parent " + std::to_string(parent) +
                            ", not an earlier node" + at_offset(off + 4));
        if (count < 1)
          throw FormatError(node_at(k, off) + " has count " + std::to_string(count) + ", must be at least 1" +
                            at_offset(off + 12));
        vocab_.insert(token);
        children_->push(ChildRec{parent, k, off, token, count});
      }
      // The remaining records need 24 bytes each; entries may use the rest.
      const uint64_t after = off + kRecordBytes;
      const uint64_t room = (in.size() - after - (nc_ - 1 - k) * kRecordBytes) / kEntryBytes;
      if (nch > room)
        throw FormatError(node_at(k, off) + " has n_children " + std::to_string(nch) + ", which overruns the file (" +
                          std::to_string(room) + " entries fit)" + at_offset(off + 16));
      nodes.push(NodeRec{parent, off, token, count});
      for (uint64_t j = 0; j < nch; ++j) {
        const uint64_t eoff = in.offset();
        const uint8_t* e = in.take(kEntryBytes, "a child entry");
        const int32_t ctok = load_le<int32_t>(e);
        const uint64_t child = load_le<uint64_t>(e + 4);
        if (child >= nc_)
          throw FormatError("child entry of " + node_at(k, off) + " names node " + std::to_string(child) +
                            ", out of range (node_count " + std::to_string(nc_) + ")" + at_offset(eoff + 4));
        if (child <= k)
          throw FormatError("child entry of " + node_at(k, off) + " names node " + std::to_string(child) +
                            ", not pointing forward" + at_offset(eoff + 4));
        entries_->push(EntryRec{child, k, eoff, ctok, 0});
      }
      if (in.offset() >= next_report) {
        progress(in.offset(), "scan");
        next_report = in.offset() + (uint64_t{64} << 20);
      }
    }
    if (in.offset() != in.size())
      throw FormatError(".trie records end" + at_offset(in.offset()) + " but the file has " +
                        std::to_string(in.size()) + " bytes: the child entries (" +
                        std::to_string((in.size() - in.offset()) / kEntryBytes) +
                        " fewer than node_count - 1) do not add up; trailing bytes");
    nodes.flush();
    progress(in.size(), "scan");

    vocab_list_ = vocab_.sorted_keys();
    if (vocab_list_.size() > (uint64_t{1} << 32)) throw FormatError(".trie vocabulary too large");
    vocab_ = TokenMap(vocab_list_.size());
    for (size_t i = 0; i < vocab_list_.size(); ++i) vocab_.set(vocab_list_[i], static_cast<uint32_t>(i));
  }

  // ------------------------------------------------------------ 2. check
  void check() {
    progress(0, "check");
    entries_->finish();
    children_->finish();
    RecordReader<NodeRec> nodes(node_file_.get(), 0, nc_, io_ / sizeof(NodeRec));

    levels_.resize(order_);
    Level& l1 = levels_[0];
    l1.file = std::make_unique<TempFile>(tmp_dir_);
    RecordWriter<LevelRecord> l1w(*l1.file, io_ / sizeof(LevelRecord));
    ids_ = std::make_unique<ExternalSorter<IdPos, IdPosById>>(tmp_dir_, share_);
    rest_ = std::make_unique<TempFile>(tmp_dir_);
    RecordWriter<ChildRec> restw(*rest_, io_ / sizeof(ChildRec));
    rest_n_ = 0;

    std::string pending;  // first count/sibling problem; listing problems take precedence
    EntryRec e{};
    bool have_e = entries_->next(e);
    ChildRec c{};
    bool have_c = children_->next(c);
    for (uint64_t k = 0; k < nc_; ++k) {
      NodeRec nd{};
      nodes.next(nd);
      if (k > 0) {
        if (!have_e || e.child != k)
          throw FormatError(node_at(k, nd.offset) + " is never listed as a child of any node" + at_offset(nd.offset));
        const EntryRec first = e;
        have_e = entries_->next(e);
        if (have_e && e.child == k)
          throw FormatError(node_at(k, nd.offset) + " is listed twice: by node " + std::to_string(first.parent) +
                            " (child entry at byte offset " + std::to_string(first.offset) + ") and by node " +
                            std::to_string(e.parent) + " (child entry" + at_offset(e.offset) + ")");
        if (first.parent != nd.parent)
          throw FormatError(node_at(k, nd.offset) + " has parent " + std::to_string(nd.parent) +
                            " but is listed as a child by node " + std::to_string(first.parent) +
                            " (child entry at byte offset " + std::to_string(first.offset) + ")" +
                            at_offset(nd.offset + 4));
        if (first.token != nd.token)
          throw FormatError("child entry of node " + std::to_string(first.parent) + " lists node " +
                            std::to_string(k) + " with token " + std::to_string(first.token) +
                            " but the node's own token is " + std::to_string(nd.token) + " (" + node_at(k, nd.offset) +
                            ")" + at_offset(first.offset));
      }
      uint64_t sum = 0;
      bool first_child = true;
      ChildRec prev{};
      for (; have_c && c.parent == k; have_c = children_->next(c)) {
        if (pending.empty()) {
          if (!first_child && c.token == prev.token) {
            pending = node_at(k, nd.offset) + " has two children with token " + std::to_string(c.token) + ": " +
                      node_at(prev.id, prev.offset) + " and " + node_at(c.id, c.offset) +
                      " (duplicate child tokens)" + at_offset(c.offset);
          } else if (k == 0) {
            LevelRecord lr{};
            lr.parent = 0;
            lr.count = static_cast<uint64_t>(c.count);
            lr.rank = vocab_.get(c.token);
            l1w.push(lr);
            ids_->push(IdPos{c.id, l1.n});
            ++l1.n;
            l1.max_count = std::max(l1.max_count, lr.count);
          } else if (order_ == 1) {
            pending = node_at(c.id, c.offset) + " is at depth 2, beyond the order 1 (depth beyond order)" +
                      at_offset(c.offset);
          } else {
            restw.push(c);
            ++rest_n_;
          }
        }
        sum += static_cast<uint64_t>(c.count);
        prev = c;
        first_child = false;
      }
      if (pending.empty()) {
        const uint64_t own = static_cast<uint64_t>(nd.count);
        if (k == 0 && sum != own)
          pending = "root count " + std::to_string(own) + " differs from the sum of its children's counts " +
                    std::to_string(sum) + " (counts inconsistent)" + at_offset(nd.offset + 12);
        else if (k > 0 && sum > own)
          pending = node_at(k, nd.offset) + " has count " + std::to_string(own) +
                    ", less than the sum of its children's counts " + std::to_string(sum) + " (counts inconsistent)" +
                    at_offset(nd.offset + 12);
      }
      if ((k & 0xfffff) == 0xfffff) progress_items(k, nc_, "check");
    }
    if (have_e || have_c) throw std::logic_error("convert_trie: internal error, unconsumed records");
    if (!pending.empty()) throw FormatError(pending);
    l1w.flush();
    restw.flush();
    entries_.reset();
    children_.reset();
    node_file_.reset();
    ids_->finish();
    progress(total_bytes_, "check");
  }

  // ------------------------------------------------------------ 3. levels
  // Places level d+1 (d ≥ 1) from the rest; what stays unplaced is the new rest.
  void next_level(uint32_t d) {
    progress(0, "levels");
    const bool last = d + 1 == order_;
    auto sorter = std::make_unique<ExternalSorter<LevelNode, LevelNodeByStoreOrder>>(tmp_dir_, share_);
    std::unique_ptr<TempFile> rest2 = last ? nullptr : std::make_unique<TempFile>(tmp_dir_);
    uint64_t rest2_n = 0;
    {
      RecordReader<ChildRec> rest(rest_.get(), 0, rest_n_, io_ / sizeof(ChildRec));
      std::unique_ptr<RecordWriter<ChildRec>> rw;
      if (rest2) rw = std::make_unique<RecordWriter<ChildRec>>(*rest2, io_ / sizeof(ChildRec));
      IdPos l{};
      bool have_l = ids_->next(l);
      ChildRec c{};
      for (uint64_t i = 0; rest.next(c); ++i) {
        while (have_l && l.id < c.parent) have_l = ids_->next(l);
        if (have_l && l.id == c.parent) {
          sorter->push(LevelNode{l.pos, c.id, c.token, c.count});
        } else if (last) {
          throw FormatError(node_at(c.id, c.offset) + " is deeper than the order " + std::to_string(order_) +
                            " (depth beyond order)" + at_offset(c.offset));
        } else {
          rw->push(c);
          ++rest2_n;
        }
        if ((i & 0xfffff) == 0xfffff) progress_items(i, 2 * rest_n_, "levels");
      }
      if (rw) rw->flush();
    }
    ids_.reset();
    rest_ = std::move(rest2);
    rest_n_ = rest2_n;
    sorter->finish();
    Level& lv = levels_[d];
    lv.file = std::make_unique<TempFile>(tmp_dir_);
    RecordWriter<LevelRecord> lw(*lv.file, io_ / sizeof(LevelRecord));
    if (!last) ids_ = std::make_unique<ExternalSorter<IdPos, IdPosById>>(tmp_dir_, share_);
    const uint64_t total = sorter->size();
    LevelNode x{};
    while (sorter->next(x)) {
      LevelRecord lr{};
      lr.parent = x.ppos;
      lr.count = static_cast<uint64_t>(x.count);
      lr.rank = vocab_.get(x.token);
      lw.push(lr);
      if (ids_) ids_->push(IdPos{x.id, lv.n});
      ++lv.n;
      lv.max_count = std::max(lv.max_count, lr.count);
      if ((lv.n & 0xfffff) == 0) progress_items(total + lv.n, 2 * total, "levels");
    }
    lw.flush();
    if (ids_) ids_->finish();
  }

  // ------------------------------------------------------------ 4. write
  ConvertStats write() {
    ids_.reset();
    rest_.reset();
    progress(0, "write");
    uint64_t total_n = 0;
    for (const Level& l : levels_) total_n += l.n;
    uint64_t done = 0;
    std::vector<std::unique_ptr<FileLevelSource>> srcs;
    std::vector<LevelSource*> ptrs;
    for (const Level& l : levels_) {
      srcs.push_back(std::make_unique<FileLevelSource>(l.file.get(), l.n, l.max_count, io_ / sizeof(LevelRecord)));
      srcs.back()->on_read = [this, &done, total_n](size_t got) {
        const uint64_t before = done >> 22;
        done += got;
        if ((done >> 22) != before) progress_items(done, total_n, "write");
      };
      ptrs.push_back(srcs.back().get());
    }
    FileSink sink(out_path_);
    try {
      write_store(sink, order_, root_count_, vocab_list_, ptrs);
      sink.close();
    } catch (...) {
      std::remove(out_path_.c_str());
      throw;
    }
    ConvertStats st;
    st.order = order_;
    st.input_nodes = nc_;
    st.vocab_size = vocab_list_.size();
    struct stat sb {};
    if (::stat(out_path_.c_str(), &sb) == 0) st.output_bytes = static_cast<uint64_t>(sb.st_size);
    progress(total_bytes_, "done");
    return st;
  }

  std::string trie_path_, out_path_;
  const ConvertOptions& opts_;
  std::string tmp_dir_;
  uint64_t budget_ = 0, share_ = 0;
  size_t io_ = 0;
  uint64_t total_bytes_ = 0;

  uint32_t order_ = 0;
  uint64_t nc_ = 0;
  uint64_t root_count_ = 0;
  TokenMap vocab_;
  std::vector<int32_t> vocab_list_;

  std::unique_ptr<TempFile> node_file_;
  std::unique_ptr<ExternalSorter<EntryRec, EntryByChild>> entries_;
  std::unique_ptr<ExternalSorter<ChildRec, ChildByParent>> children_;
  std::unique_ptr<ExternalSorter<IdPos, IdPosById>> ids_;  // the last placed level, by id
  std::unique_ptr<TempFile> rest_;                          // unplaced nodes, by parent
  uint64_t rest_n_ = 0;
  std::vector<Level> levels_;
  std::string depth_error_ = "internal error: nodes left unplaced";
};

}  // namespace

ConvertStats convert_trie(const std::string& trie_path, const std::string& out_path, const ConvertOptions& opts) {
  Converter c(trie_path, out_path, opts);
  return c.run();
}

}  // namespace dart
