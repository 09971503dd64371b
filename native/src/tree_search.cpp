#include "tree_search.hpp"

#include <stdexcept>

namespace dart {
void TreeSearcher::search(const int32_t*, const float*, size_t, size_t, const int32_t*, size_t, const NgramStore*,
                          const TreeSearchParams&, DraftTreeOut&) {
  throw std::runtime_error("search: not built yet");
}
}  // namespace dart
