// Suffix decoding's counting structure (docs/drafters.md): every suffix of every sequence held, each cut to
// at most max_depth tokens, as a trie of exact counts; and the speculation that turns the context's most recent
// tokens into a chain or a tree of the most frequent continuations. A sequence grows one token at a time at O(depth)
// cost (the nodes of its still-growing suffixes are kept), and is removed at O(length x depth) cost.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace dart {

struct SuffixSpecParams {
  int32_t max_spec_tokens = 24;  // the draft's size cap
  float max_spec_factor = 1.0f;  // draft budget per matched token
  float max_spec_offset = 0.0f;  // added to the budget
  float min_token_prob = 0.1f;   // a token whose path probability (as a float) falls below this is never drafted
  bool tree = true;              // best-first tree (else the most frequent chain)
};

struct SuffixDraft {
  std::vector<int32_t> tokens;   // the drafted tokens (the pattern's continuation; no root)
  std::vector<int32_t> parents;  // index into tokens of each token's parent, -1 for the first level
  std::vector<float> probs;      // count(pattern + path) / count(pattern)
  double score = 0.0;            // sum of probs
  int32_t match_len = 0;         // tokens of the context the draft continues
};

class SuffixTree {
 public:
  explicit SuffixTree(int32_t max_depth);

  int32_t max_depth() const { return max_depth_; }
  // Appends tokens to sequence `seq` (created empty when new).
  void extend(int64_t seq, const int32_t* tokens, size_t n);
  // Removes a sequence and all its suffixes; false when it is not held.
  bool remove(int64_t seq);
  bool contains(int64_t seq) const { return seqs_.count(seq) != 0; }
  size_t sequences() const { return seqs_.size(); }
  size_t tokens() const;                           // tokens held over all sequences
  size_t nodes() const { return nodes_.size() - free_.size() - 1; }  // trie nodes below the root
  size_t sequence_length(int64_t seq) const;       // 0 when not held
  const std::vector<int32_t>* sequence(int64_t seq) const;  // its tokens, nullptr when not held
  // count(path) of the spec: cut suffixes beginning with path (0 for a path longer than max_depth or empty).
  int64_t count(const int32_t* path, size_t n) const;
  // The spec's speculate() over the last max_depth tokens of context.
  SuffixDraft speculate(const int32_t* context, size_t n, const SuffixSpecParams& params) const;
  // Read access by node, for counts kept on this trie by others (the N-gram overlay, ngram_overlay.hpp): the node
  // of `path` (the root for an empty path; -1 when not held or longer than max_depth), a node's count, the child
  // of a node by token (-1 when absent), and a node's children as (token, count). Nodes are bounds-checked.
  int32_t node_of(const int32_t* path, size_t n) const;
  int64_t node_count(int32_t node) const { return at(node).count; }
  int32_t child_of(int32_t node, int32_t token) const {
    at(node);
    return child(node, token);
  }
  template <class F>
  void for_each_child(int32_t node, F&& f) const {
    for (int32_t c = at(node).first_child; c >= 0; c = nodes_[static_cast<size_t>(c)].next_sibling)
      f(nodes_[static_cast<size_t>(c)].token, nodes_[static_cast<size_t>(c)].count);
  }
  // The structure's own check (tests): every node's count equals the cut suffixes through it, parents and children
  // agree, free nodes are unlinked. Throws std::logic_error naming the first broken invariant.
  void check() const;

 private:
  struct Node {
    int64_t count = 0;
    int32_t token = 0;
    int32_t parent = -1;
    int32_t depth = 0;
    int32_t first_child = -1;
    int32_t next_sibling = -1;
    int32_t prev_sibling = -1;
  };
  struct Sequence {
    std::vector<int32_t> tokens;
    std::vector<int32_t> growing;  // nodes of the suffixes shorter than max_depth, oldest start first
  };

  static uint64_t edge_key(int32_t parent, int32_t token) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) | static_cast<uint32_t>(token);
  }
  const Node& at(int32_t node) const;  // throws std::out_of_range for a node that is not in use
  int32_t child(int32_t parent, int32_t token) const;
  int32_t child_or_new(int32_t parent, int32_t token);
  void release(int32_t node);
  int32_t find(const int32_t* path, size_t n) const;  // -1 when not held
  void chain_from(int32_t node, int32_t budget, float min_prob, SuffixDraft& out) const;
  void tree_from(int32_t node, int32_t budget, float min_prob, SuffixDraft& out) const;

  int32_t max_depth_;
  std::vector<Node> nodes_;  // [0] = the root
  std::vector<int32_t> free_;
  std::unordered_map<uint64_t, int32_t> edges_;  // (parent, token) -> child
  std::unordered_map<int64_t, Sequence> seqs_;
};

}  // namespace dart
