// On-disk layout of our N-gram store (format version 1). See native/README.md.
//
// A store of order N holds, for each level d = 1..N, the distinct d-grams in
// lexicographic order of their token ranks (a level-wise CSR trie):
//   counts_d   packed count_bits[d]  per node
//   tokens_d   packed token_bits     per node: rank of its last token in `vocab`
//   offsets_d  packed offset_bits[d] per node + 1 (d < N): children of node i at
//              level d are nodes offsets_d[i] .. offsets_d[i+1]-1 of level d+1
// plus `vocab` (sorted distinct int32 token ids; rank = index) and an optional
// dense `rank_map` (int32 per token id in [map_min, map_min + map_len), -1 when
// absent) that turns a token id into its rank with one load.
#pragma once

#include <cstdint>

namespace dart {

constexpr char kMagic[8] = {'D', 'A', 'R', 'T', 'N', 'G', 'R', 'M'};
constexpr uint32_t kFormatVersion = 1;
constexpr uint32_t kMaxOrder = 8;

enum Section : uint32_t {
  kSecVocab = 0,
  kSecRankMap = 1,
  kSecLevelBase = 2,  // + 3 * (d - 1) + {0: counts, 1: tokens, 2: offsets}
};
constexpr uint32_t kNumSections = kSecLevelBase + 3 * kMaxOrder;
inline constexpr uint32_t sec_counts(uint32_t d) { return kSecLevelBase + 3 * (d - 1); }
inline constexpr uint32_t sec_tokens(uint32_t d) { return kSecLevelBase + 3 * (d - 1) + 1; }
inline constexpr uint32_t sec_offsets(uint32_t d) { return kSecLevelBase + 3 * (d - 1) + 2; }

// Field offsets inside the fixed-size header (all little-endian).
namespace hdr {
constexpr uint64_t kMagicOff = 0;        // char[8]
constexpr uint64_t kVersion = 8;         // u32
constexpr uint64_t kOrder = 12;          // u32
constexpr uint64_t kFileSize = 16;       // u64
constexpr uint64_t kRootCount = 24;      // u64: tokens inserted
constexpr uint64_t kVocabSize = 32;      // u64
constexpr uint64_t kMapMin = 40;         // i32
constexpr uint64_t kTokenBits = 44;      // u32
constexpr uint64_t kMapLen = 48;         // u64
constexpr uint64_t kReserved = 56;       // u64 (0)
constexpr uint64_t kLevels = 64;         // kMaxOrder x {u64 n, u32 count_bits, u32 offset_bits}
constexpr uint64_t kLevelStride = 16;
constexpr uint64_t kSections = kLevels + kMaxOrder * kLevelStride;  // kNumSections x {u64 off, u64 size, u64 sum}
constexpr uint64_t kSectionStride = 24;
constexpr uint64_t kHeaderSum = kSections + kNumSections * kSectionStride;  // u64 over bytes [0, kHeaderSum)
constexpr uint64_t kSize = kHeaderSum + 8;
}  // namespace hdr

static_assert(hdr::kSize % 8 == 0, "sections must start 8-aligned");

}  // namespace dart
