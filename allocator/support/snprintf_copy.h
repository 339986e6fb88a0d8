// snprintf's contract, kept by the C API's functions that return a document (JSON, CSV): copy
// what fits, NUL-terminate, return the document's full length.
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

namespace cudacache {

// The length snprintf returns for a document of `size` bytes, or -1 with the reason in *error
// when it does not fit an int (a history of millions of entries): a cast would return a
// negative or wrapped length, and the caller would size its buffer on it.
inline int snprintf_length(std::size_t size, std::string* error) {
  if (size > static_cast<std::size_t>(INT_MAX)) {
    *error = "the document is " + std::to_string(size) +
             " bytes, more than an int can count; the C++ API returns it as a std::string";
    return -1;
  }
  return static_cast<int>(size);
}

// Copies what fits of `text` into `buf` (`len` bytes, the NUL included) and returns text's
// length. Returns -1 with the reason in *error, writing nothing, when buf is NULL but len is
// not 0 or when the length does not fit an int (snprintf_length).
inline int snprintf_copy(std::string_view text, char* buf, std::size_t len, std::string* error) {
  if (buf == nullptr && len > 0) {
    *error = "buf is NULL but len is " + std::to_string(len) + " (NULL only with len 0)";
    return -1;
  }
  const int length = snprintf_length(text.size(), error);
  if (length < 0) return -1;
  if (len > 0) {
    const std::size_t n = std::min(len - 1, text.size());
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return length;
}

}  // namespace cudacache
