// Shared low-level helpers of the native core: errors, little-endian loads,
// bit-packed arrays and the streaming checksum used by our N-gram format.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace dart {

// A file (ours or the reference .trie) is malformed. Messages name the problem
// and, where there is one, the byte offset.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline std::string at_offset(uint64_t off) { return " (at byte offset " + std::to_string(off) + ")"; }

template <class T>
inline T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
inline void store_le(uint8_t* p, T v) {
  static_assert(std::endian::native == std::endian::little, "big-endian hosts are not supported");
  std::memcpy(p, &v, sizeof(T));
}

static_assert(std::endian::native == std::endian::little, "big-endian hosts are not supported");

// Number of bits needed to hold values 0..max_value (at least 1).
inline unsigned bits_for(uint64_t max_value) {
  unsigned b = static_cast<unsigned>(std::bit_width(max_value));
  return b == 0 ? 1 : b;
}

// Widest value a packed field may have: an unaligned 8-byte load shifted by up
// to 7 bits must still hold the whole field.
constexpr unsigned kMaxPackedBits = 57;

// Bytes of a packed array of n values of w bits, plus 8 bytes of slack so that
// every read is one in-bounds unaligned 8-byte load, rounded up to 8.
inline uint64_t packed_bytes(uint64_t n, unsigned w) {
  const uint64_t bits = n * w;  // callers check n * w cannot overflow
  const uint64_t bytes = (bits + 7) / 8 + 8;
  return (bytes + 7) & ~uint64_t{7};
}

inline uint64_t read_packed(const uint8_t* base, uint64_t i, unsigned w) {
  const uint64_t bit = i * w;
  uint64_t v;
  std::memcpy(&v, base + (bit >> 3), 8);
  return (v >> (bit & 7)) & ((uint64_t{1} << w) - 1);
}

// Streaming 64-bit checksum over bytes (word-wise multiply/xorshift mix). Not
// cryptographic: it catches truncation, bit flips and foreign files.
class Checksum {
 public:
  void update(const uint8_t* data, uint64_t n) {
    total_ += n;
    if (tail_len_) {
      while (n && tail_len_ < 8) {
        tail_[tail_len_++] = *data++;
        --n;
      }
      if (tail_len_ < 8) return;
      mix(load_le<uint64_t>(tail_));
      tail_len_ = 0;
    }
    while (n >= 8) {
      mix(load_le<uint64_t>(data));
      data += 8;
      n -= 8;
    }
    while (n) {
      tail_[tail_len_++] = *data++;
      --n;
    }
  }
  uint64_t finish() const {
    uint64_t h = h_;
    if (tail_len_) {
      uint8_t last[8] = {0};
      std::memcpy(last, tail_, tail_len_);
      h = step(h, load_le<uint64_t>(last));
    }
    h = step(h, total_);
    return h ^ (h >> 29);
  }
  static uint64_t of(const uint8_t* data, uint64_t n) {
    Checksum c;
    c.update(data, n);
    return c.finish();
  }

 private:
  static uint64_t step(uint64_t h, uint64_t w) {
    h ^= w;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
    return h;
  }
  void mix(uint64_t w) { h_ = step(h_, w); }
  uint64_t h_ = 0x9e3779b97f4a7c15ULL;
  uint64_t total_ = 0;
  uint8_t tail_[8] = {0};
  unsigned tail_len_ = 0;
};

// a * b, or throw FormatError(what) when it overflows 64 bits.
inline uint64_t checked_mul(uint64_t a, uint64_t b, const char* what) {
  if (a != 0 && b > UINT64_MAX / a) throw FormatError(std::string(what) + ": size overflows 64 bits");
  return a * b;
}
inline uint64_t checked_add(uint64_t a, uint64_t b, const char* what) {
  if (b > UINT64_MAX - a) throw FormatError(std::string(what) + ": size overflows 64 bits");
  return a + b;
}

}  // namespace dart
