// One line to stdout in one write(2): the benchmark's task processes share their parent's pipe,
// and a line written in two pieces can interleave with another process's line.
#pragma once

#include <unistd.h>

#include <string>

namespace phalanx::bench {

inline void WriteLine(const std::string& line) {
  const std::string out = line + "\n";
  ssize_t unused = write(STDOUT_FILENO, out.data(), out.size());
  (void)unused;
}

}  // namespace phalanx::bench
