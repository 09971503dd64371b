// An N-gram overlay as Python holds it: the counts and the lock that lets the tree search read them without the
// GIL while another thread may add or remove a sequence (bind_overlay.cpp, bind_tree.cpp).
#pragma once

#include <cstdint>
#include <shared_mutex>

#include "ngram_overlay.hpp"

namespace dart_py {

struct OverlayHandle {
  explicit OverlayHandle(uint32_t order) : overlay(order) {}
  dart::NgramOverlay overlay;
  mutable std::shared_mutex mutex;
};

}  // namespace dart_py
