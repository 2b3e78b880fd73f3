// The driver every fuzz target links in the normal (GCC) build, standing in for libFuzzer: it
// replays each file of the target's checked-in corpus, then runs a deterministic mutation loop
// (seeded PRNG; byte flips, inserts, erases, copies and splices of corpus entries) bounded by
// both an iteration count and a time budget, whichever ends first. It gives no coverage
// feedback (that is `make fuzz`'s clang/libFuzzer build); its job in `make test` is to keep every
// corpus entry, i.e. every past crash, passing and to shake the parsers a little on each run.
//
//   <target> [--iterations=N] [--seconds=S] [--seed=N] [--max_len=N] <corpus dir or file>...
//
// A crash (signal or abort) first writes the input being run to crash-<target>.bin in the working
// directory (or $PHALANX_FUZZ_ARTIFACTS), so it can be added to the corpus as a regression case.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// What the signal handler writes out: set before each run, so no allocation happens in the
// handler.
const uint8_t* g_current_data = nullptr;
size_t g_current_size = 0;
char g_crash_path[4096] = "crash.bin";

void OnCrash(int sig) {
  const int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    size_t off = 0;
    while (off < g_current_size) {
      const ssize_t n = write(fd, g_current_data + off, g_current_size - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    close(fd);
  }
  static const char kMsg[] = "fuzz driver: crashed; input written to ";
  (void)!write(2, kMsg, sizeof(kMsg) - 1);
  (void)!write(2, g_crash_path, strlen(g_crash_path));
  (void)!write(2, "\n", 1);
  signal(sig, SIG_DFL);
  raise(sig);
}

void Run(const std::vector<uint8_t>& input) {
  g_current_data = input.data();
  g_current_size = input.size();
  LLVMFuzzerTestOneInput(input.data(), input.size());
}

std::vector<uint8_t> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// One random edit of `data` (which may be empty), drawing on `corpus` for splices.
void Mutate(std::vector<uint8_t>& data, const std::vector<std::vector<uint8_t>>& corpus,
            std::mt19937_64& rng, size_t max_len) {
  auto pick = [&rng](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  // Bytes parsers care about, so random inserts reach their branches sooner.
  static const char kInteresting[] = "{}[]\":,\n\r\t =-0123456789.aeflnrstuxTFN\\/#&*!|>'";
  switch (rng() % 8) {
    case 0:  // flip a bit
      if (!data.empty()) data[pick(data.size())] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
    case 1:  // overwrite a byte with a random or an interesting one
      if (!data.empty()) {
        data[pick(data.size())] = (rng() % 2) ? static_cast<uint8_t>(rng())
                                              : kInteresting[pick(sizeof(kInteresting) - 1)];
      }
      break;
    case 2:  // insert an interesting byte
      data.insert(data.begin() + pick(data.size() + 1),
                  static_cast<uint8_t>(kInteresting[pick(sizeof(kInteresting) - 1)]));
      break;
    case 3:  // erase a range
      if (!data.empty()) {
        const size_t at = pick(data.size());
        const size_t n = 1 + pick(std::min<size_t>(data.size() - at, 16));
        data.erase(data.begin() + at, data.begin() + at + n);
      }
      break;
    case 4:  // duplicate a range in place (deep nesting, long values)
      if (!data.empty()) {
        const size_t at = pick(data.size());
        const size_t n = 1 + pick(std::min<size_t>(data.size() - at, 64));
        std::vector<uint8_t> copy(data.begin() + at, data.begin() + at + n);
        data.insert(data.begin() + pick(data.size() + 1), copy.begin(), copy.end());
      }
      break;
    case 5:  // splice in a piece of another corpus entry
      if (!corpus.empty()) {
        const std::vector<uint8_t>& other = corpus[pick(corpus.size())];
        if (!other.empty()) {
          const size_t at = pick(other.size());
          const size_t n = 1 + pick(std::min<size_t>(other.size() - at, 128));
          data.insert(data.begin() + pick(data.size() + 1), other.begin() + at,
                      other.begin() + at + n);
        }
      }
      break;
    case 6:  // truncate
      if (!data.empty()) data.resize(pick(data.size()));
      break;
    default:  // set a byte to a boundary value
      if (!data.empty()) {
        static const uint8_t kEdges[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe};
        data[pick(data.size())] = kEdges[pick(sizeof(kEdges))];
      }
      break;
  }
  if (data.size() > max_len) data.resize(max_len);
}

bool Flag(const char* arg, const char* name, long long* value) {
  const size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *value = atoll(arg + n + 1);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long long iterations = 20000, seconds = 3, seed = 1, max_len = 64 * 1024;
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (Flag(argv[i], "--iterations", &iterations) || Flag(argv[i], "--seconds", &seconds) ||
        Flag(argv[i], "--seed", &seed) || Flag(argv[i], "--max_len", &max_len)) {
      continue;
    }
    if (argv[i][0] == '-') {
      fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
    inputs.emplace_back(argv[i]);
  }
  const char* artifacts = getenv("PHALANX_FUZZ_ARTIFACTS");
  snprintf(g_crash_path, sizeof(g_crash_path), "%s/crash-%s.bin",
           artifacts != nullptr ? artifacts : ".",
           std::filesystem::path(argv[0]).filename().c_str());
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) signal(sig, OnCrash);

  // Sorted, so the replay order (and with it the mutation loop) is the same on every machine.
  std::vector<std::filesystem::path> files;
  for (const auto& input : inputs) {
    if (std::filesystem::is_directory(input)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(input)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else if (std::filesystem::is_regular_file(input)) {
      files.push_back(input);
    } else {
      fprintf(stderr, "no such corpus: %s\n", input.c_str());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<std::vector<uint8_t>> corpus;
  for (const auto& file : files) {
    corpus.push_back(ReadFile(file));
    Run(corpus.back());
  }
  printf("replayed %zu corpus files\n", corpus.size());

  const auto stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  long long runs = 0;
  std::vector<uint8_t> data;
  for (; runs < iterations; ++runs) {
    if ((runs & 63) == 0 && std::chrono::steady_clock::now() >= stop_at) break;
    data = corpus.empty() ? std::vector<uint8_t>() : corpus[rng() % corpus.size()];
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) Mutate(data, corpus, rng, static_cast<size_t>(max_len));
    Run(data);
  }
  printf("ran %lld mutated inputs (seed %lld), no crash\n", runs, seed);
  return 0;
}
