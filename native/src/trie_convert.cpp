#include "trie_convert.hpp"

#include "common.hpp"

namespace dart {
ConvertStats convert_trie(const std::string&, const std::string&, const ConvertOptions&) {
  throw std::runtime_error("convert_trie: not built yet");
}
}  // namespace dart
