#include "suffix_tree.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <stdexcept>
#include <string>
#include <tuple>

namespace dart {

SuffixTree::SuffixTree(int32_t max_depth) : max_depth_(max_depth) {
  if (max_depth < 1) throw std::invalid_argument("max_depth must be at least 1, got " + std::to_string(max_depth));
  nodes_.emplace_back();  // the root
}

int32_t SuffixTree::child(int32_t parent, int32_t token) const {
  const auto it = edges_.find(edge_key(parent, token));
  return it == edges_.end() ? -1 : it->second;
}

int32_t SuffixTree::child_or_new(int32_t parent, int32_t token) {
  const uint64_t key = edge_key(parent, token);
  const auto it = edges_.find(key);
  if (it != edges_.end()) return it->second;
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    if (nodes_.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      throw std::length_error("suffix tree: more than 2^31 - 1 nodes");
    id = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[static_cast<size_t>(id)];
  Node& p = nodes_[static_cast<size_t>(parent)];
  n = Node{};
  n.token = token;
  n.parent = parent;
  n.depth = p.depth + 1;
  n.next_sibling = p.first_child;
  if (p.first_child >= 0) nodes_[static_cast<size_t>(p.first_child)].prev_sibling = id;
  p.first_child = id;
  edges_.emplace(key, id);
  return id;
}

void SuffixTree::release(int32_t id) {
  Node& n = nodes_[static_cast<size_t>(id)];
  Node& p = nodes_[static_cast<size_t>(n.parent)];
  if (n.prev_sibling >= 0)
    nodes_[static_cast<size_t>(n.prev_sibling)].next_sibling = n.next_sibling;
  else
    p.first_child = n.next_sibling;
  if (n.next_sibling >= 0) nodes_[static_cast<size_t>(n.next_sibling)].prev_sibling = n.prev_sibling;
  edges_.erase(edge_key(n.parent, n.token));
  n = Node{};
  free_.push_back(id);
}

void SuffixTree::extend(int64_t seq, const int32_t* tokens, size_t n) {
  Sequence& s = seqs_[seq];
  s.tokens.reserve(s.tokens.size() + n);
  std::vector<int32_t> next;
  next.reserve(static_cast<size_t>(max_depth_));
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = tokens[i];
    next.clear();
    // every suffix still shorter than max_depth grows by t; a new suffix starts at t
    s.growing.push_back(0);
    for (const int32_t g : s.growing) {
      const int32_t c = child_or_new(g, t);
      Node& node = nodes_[static_cast<size_t>(c)];
      node.count += 1;
      if (node.depth < max_depth_) next.push_back(c);
    }
    nodes_[0].count += 1;
    s.growing.swap(next);
    s.tokens.push_back(t);
  }
}

bool SuffixTree::remove(int64_t seq) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return false;
  const std::vector<int32_t>& toks = it->second.tokens;
  std::vector<int32_t> path;
  path.reserve(static_cast<size_t>(max_depth_));
  for (size_t start = 0; start < toks.size(); ++start) {
    const size_t end = std::min(toks.size(), start + static_cast<size_t>(max_depth_));
    path.clear();
    int32_t node = 0;
    for (size_t j = start; j < end; ++j) {
      node = child(node, toks[j]);
      if (node < 0) throw std::logic_error("suffix tree: a held suffix has no node");
      path.push_back(node);
    }
    for (auto p = path.rbegin(); p != path.rend(); ++p) {  // deepest first, so a released node has no children
      Node& n = nodes_[static_cast<size_t>(*p)];
      if (--n.count == 0) release(*p);
    }
    nodes_[0].count -= 1;
  }
  seqs_.erase(it);
  return true;
}

size_t SuffixTree::tokens() const {
  return static_cast<size_t>(nodes_[0].count);
}

size_t SuffixTree::sequence_length(int64_t seq) const {
  const auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.tokens.size();
}

const std::vector<int32_t>* SuffixTree::sequence(int64_t seq) const {
  const auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : &it->second.tokens;
}

int32_t SuffixTree::find(const int32_t* path, size_t n) const {
  int32_t node = 0;
  for (size_t i = 0; i < n && node >= 0; ++i) node = child(node, path[i]);
  return node;
}

int32_t SuffixTree::node_of(const int32_t* path, size_t n) const {
  if (n > static_cast<size_t>(max_depth_)) return -1;
  return find(path, n);
}

const SuffixTree::Node& SuffixTree::at(int32_t node) const {
  // a node in use is the root or has a count (a released node is reset to count 0)
  if (node < 0 || static_cast<size_t>(node) >= nodes_.size() || (node > 0 && nodes_[static_cast<size_t>(node)].count == 0))
    throw std::out_of_range("suffix tree: node " + std::to_string(node) + " is not in use");
  return nodes_[static_cast<size_t>(node)];
}

int64_t SuffixTree::count(const int32_t* path, size_t n) const {
  if (n == 0 || n > static_cast<size_t>(max_depth_)) return 0;
  const int32_t node = find(path, n);
  return node < 0 ? 0 : nodes_[static_cast<size_t>(node)].count;
}

void SuffixTree::chain_from(int32_t node, int32_t budget, float min_prob, SuffixDraft& out) const {
  const double total = static_cast<double>(nodes_[static_cast<size_t>(node)].count);
  int32_t cur = node;
  while (static_cast<int32_t>(out.tokens.size()) < budget) {
    int32_t best = -1;  // the most frequent child; among equal counts the first listed
    for (int32_t c = nodes_[static_cast<size_t>(cur)].first_child; c >= 0;
         c = nodes_[static_cast<size_t>(c)].next_sibling)
      if (best < 0 || nodes_[static_cast<size_t>(c)].count > nodes_[static_cast<size_t>(best)].count) best = c;
    if (best < 0) break;
    const double prob = static_cast<double>(nodes_[static_cast<size_t>(best)].count) / total;
    if (static_cast<float>(prob) < min_prob) break;  // compared in float, as the knob is given
    out.parents.push_back(static_cast<int32_t>(out.tokens.size()) - 1);
    out.tokens.push_back(nodes_[static_cast<size_t>(best)].token);
    out.probs.push_back(static_cast<float>(prob));
    out.score += prob;
    cur = best;
  }
}

void SuffixTree::tree_from(int32_t node, int32_t budget, float min_prob, SuffixDraft& out) const {
  // Best-first: every path's probability shares the pattern's count as denominator, so the most probable path is
  // the most frequent one. Entries: (count, -arrival, node, parent's draft index); ties go to the earlier arrival.
  using Entry = std::tuple<int64_t, int64_t, int32_t, int32_t>;
  std::priority_queue<Entry> frontier;
  const double total = static_cast<double>(nodes_[static_cast<size_t>(node)].count);
  int64_t arrival = 0;
  auto push_children = [&](int32_t parent_node, int32_t parent_index) {
    for (int32_t c = nodes_[static_cast<size_t>(parent_node)].first_child; c >= 0;
         c = nodes_[static_cast<size_t>(c)].next_sibling)
      frontier.emplace(nodes_[static_cast<size_t>(c)].count, -(arrival++), c, parent_index);
  };
  push_children(node, -1);
  while (!frontier.empty() && static_cast<int32_t>(out.tokens.size()) < budget) {
    const auto [count, order, id, parent] = frontier.top();
    (void)order;
    frontier.pop();
    const double prob = static_cast<double>(count) / total;
    if (static_cast<float>(prob) < min_prob) break;  // the most probable left is below the floor, so is every other
    const auto index = static_cast<int32_t>(out.tokens.size());
    out.tokens.push_back(nodes_[static_cast<size_t>(id)].token);
    out.parents.push_back(parent);
    out.probs.push_back(static_cast<float>(prob));
    out.score += prob;
    push_children(id, index);
  }
}

SuffixDraft SuffixTree::speculate(const int32_t* context, size_t n, const SuffixSpecParams& params) const {
  if (params.max_spec_tokens < 0) throw std::invalid_argument("max_spec_tokens must not be negative");
  if (!std::isfinite(params.max_spec_factor) || !std::isfinite(params.max_spec_offset) ||
      !std::isfinite(params.min_token_prob))
    throw std::invalid_argument("max_spec_factor, max_spec_offset and min_token_prob must be finite");
  const size_t keep = std::min(n, static_cast<size_t>(max_depth_));
  const int32_t* ctx = context + (n - keep);
  SuffixDraft best;
  SuffixDraft draft;
  for (size_t m = 1; m < keep; ++m) {
    const int32_t node = find(ctx + (keep - m), m);
    if (node < 0 || nodes_[static_cast<size_t>(node)].count == 0) break;
    const double raw = std::floor(static_cast<double>(m) * params.max_spec_factor + params.max_spec_offset + 1e-6);
    const auto budget = static_cast<int32_t>(std::clamp(raw, 0.0, static_cast<double>(params.max_spec_tokens)));
    draft = SuffixDraft{};
    if (params.tree)
      tree_from(node, budget, params.min_token_prob, draft);
    else
      chain_from(node, budget, params.min_token_prob, draft);
    if (draft.score >= best.score) {
      draft.match_len = static_cast<int32_t>(m);
      best = std::move(draft);
    }
  }
  return best;
}

void SuffixTree::check() const {
  // recount every cut suffix from the sequences, then compare with the nodes
  std::unordered_map<int32_t, int64_t> expected;
  int64_t starts = 0;
  for (const auto& [id, s] : seqs_) {
    (void)id;
    for (size_t start = 0; start < s.tokens.size(); ++start) {
      ++starts;
      int32_t node = 0;
      const size_t end = std::min(s.tokens.size(), start + static_cast<size_t>(max_depth_));
      for (size_t j = start; j < end; ++j) {
        node = child(node, s.tokens[j]);
        if (node < 0) throw std::logic_error("suffix tree check: a held suffix has no node");
        ++expected[node];
      }
    }
  }
  if (nodes_[0].count != starts) throw std::logic_error("suffix tree check: the root's count is not the tokens held");
  size_t live = 0;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.count == 0) continue;
    ++live;
    const auto it = expected.find(static_cast<int32_t>(i));
    if (it == expected.end() || it->second != n.count)
      throw std::logic_error("suffix tree check: node " + std::to_string(i) + " counts " + std::to_string(n.count) +
                             " suffixes, the sequences hold " +
                             std::to_string(it == expected.end() ? 0 : it->second));
    if (child(n.parent, n.token) != static_cast<int32_t>(i) || n.depth != nodes_[static_cast<size_t>(n.parent)].depth + 1)
      throw std::logic_error("suffix tree check: node " + std::to_string(i) + " and its parent disagree");
  }
  if (live != nodes() || edges_.size() != live)
    throw std::logic_error("suffix tree check: released nodes are still linked");
}

}  // namespace dart
