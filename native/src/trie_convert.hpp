// Streaming converter from the reference `.trie` format (docs/formats.md) to our
// store format, with bounded memory whatever the input size: fixed-size records
// go through external merge sorts in a temporary directory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace dart {

struct ConvertOptions {
  std::string tmp_dir;                         // "" = next to the output file
  uint64_t memory_budget = uint64_t{512} << 20;  // bytes of RAM for sort buffers
  // Called now and then with (bytes of input processed, total input bytes, phase name).
  std::function<void(uint64_t, uint64_t, const char*)> progress;
};

struct ConvertStats {
  uint32_t order = 0;
  uint64_t input_nodes = 0;  // root included
  uint64_t vocab_size = 0;
  uint64_t output_bytes = 0;
};

// Reads `trie_path`, validates every field (throws FormatError naming the
// problem and byte offset) and writes our format to `out_path`.
ConvertStats convert_trie(const std::string& trie_path, const std::string& out_path, const ConvertOptions& opts);

}  // namespace dart
