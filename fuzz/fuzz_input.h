// Helpers the fuzz targets share to cut one fuzzer input into the several inputs a parser takes
// (a kubeconfig and a context name, three HTTP answers, ...). Pieces are separated by a line
// "@@" so corpus files stay readable text. Test-only; pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace phalanx::fuzz {

inline constexpr std::string_view kPieceSeparator = "\n@@\n";

// At most `max` pieces (the last one keeps any further separators); always at least one.
inline std::vector<std::string> Pieces(const uint8_t* data, size_t size, size_t max) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> out;
  while (out.size() + 1 < max) {
    const size_t at = rest.find(kPieceSeparator);
    if (at == std::string_view::npos) break;
    out.emplace_back(rest.substr(0, at));
    rest.remove_prefix(at + kPieceSeparator.size());
  }
  out.emplace_back(rest);
  return out;
}

// The piece at `i`, or "" when the input had fewer.
inline const std::string& PieceOr(const std::vector<std::string>& pieces, size_t i) {
  static const std::string kEmpty;
  return i < pieces.size() ? pieces[i] : kEmpty;
}

// A crash the fuzzer reports: a broken invariant (not an error status, which is a parser's
// normal answer to garbage).
#define PHALANX_FUZZ_CHECK(cond)                                                        \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                          \
    }                                                                                   \
  } while (0)

}  // namespace phalanx::fuzz
