// UTF-8 as JSON readers accept it (Python's json, jq, browsers): a writer keeps the sequences
// that are valid and escapes each byte that is not, so that a file name or a frame in another
// encoding still gives a document every reader can load.
#pragma once

#include <cstddef>
#include <string_view>

namespace cudacache {

// The length of the valid UTF-8 sequence at text[at] (1 to 4), or 0 when the byte there does not
// begin one: a stray continuation byte, a sequence cut short, an overlong form, a surrogate
// (U+D800 to U+DFFF) or a code point above U+10FFFF.
inline std::size_t utf8_sequence_length(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80;  // the range of the second byte, narrower after some leads
  unsigned char high = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // overlong below U+0800
    if (lead == 0xed) high = 0x9f;  // surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;   // overlong below U+10000
    if (lead == 0xf4) high = 0x8f;  // above U+10FFFF
  } else {
    return 0;  // a continuation byte, 0xc0, 0xc1 or 0xf5 and up
  }
  if (at + length > text.size()) return 0;
  if (byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if (byte(at + i) < 0x80 || byte(at + i) > 0xbf) return 0;
  }
  return length;
}

}  // namespace cudacache
