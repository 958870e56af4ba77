// A time-bounded mutation driver for the fuzz targets where libFuzzer is not available (g++'s
// sanitizer builds, so CI fuzzes every change): runs each seed, then random mutations of the
// seeds (bit flips, interesting bytes, inserts, deletes, copies, splices) until the time is up.
// Not coverage-guided — scripts/fuzz.sh runs the same targets under libFuzzer for that — but
// every input runs under ASan and UBSan. A crash writes the input to fuzz-crash-<target>.bin.
// Usage: fuzz_<target>_driver SECONDS SEED_FILE_OR_DIR...   (KILN_FUZZ_SEED picks the RNG seed)
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// The sanitizers' hook, called before a report ends the process (weak: absent without them).
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace {

using Bytes = std::vector<uint8_t>;
const Bytes* g_current = nullptr;
std::string g_crash_path;

void save_current() {
  if (!g_current) return;
  std::ofstream out(g_crash_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(g_current->data()), static_cast<std::streamsize>(g_current->size()));
  std::fprintf(stderr, "fuzz driver: the failing input (%zu bytes) is in %s\n", g_current->size(), g_crash_path.c_str());
}

void run(const Bytes& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(input.data(), input.size());
  g_current = nullptr;
}

Bytes read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

// One to eight random edits of `seed`, sometimes splicing in part of `other`.
Bytes mutate(Bytes b, const Bytes& other, std::mt19937_64& rng) {
  static const uint8_t kInteresting[] = {0, 1, 0x7f, 0x80, 0xff, '0', '9', '"', '[', ']', '{', '}', ',', ':', '-', 'e'};
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % (n ? n : 1)); };
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 7) {
      case 0:
        if (!b.empty()) b[pick(b.size())] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:
        if (!b.empty()) b[pick(b.size())] = kInteresting[pick(sizeof kInteresting)];
        break;
      case 2:
        if (!b.empty()) b[pick(b.size())] = static_cast<uint8_t>(rng());
        break;
      case 3: {  // insert a few random bytes
        const size_t at = pick(b.size() + 1), n = 1 + pick(8);
        Bytes ins(n);
        for (auto& v : ins) v = static_cast<uint8_t>(rng());
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
        break;
      }
      case 4:  // delete a range
        if (!b.empty()) {
          const size_t at = pick(b.size()), n = 1 + pick(std::min<size_t>(b.size() - at, 64));
          b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
        }
        break;
      case 5:  // copy a range over another place
        if (b.size() > 1) {
          const size_t from = pick(b.size()), to = pick(b.size());
          const size_t n = 1 + pick(std::min(b.size() - from, b.size() - to));
          std::copy(b.begin() + static_cast<std::ptrdiff_t>(from), b.begin() + static_cast<std::ptrdiff_t>(from + n),
                    b.begin() + static_cast<std::ptrdiff_t>(to));
        }
        break;
      case 6:  // splice: our head, the other's tail
        if (!other.empty()) {
          const size_t cut = pick(b.size() + 1), from = pick(other.size());
          b.resize(cut);
          b.insert(b.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        }
        break;
    }
    if (b.size() > (1u << 20)) b.resize(1u << 20);
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: " << argv[0] << " SECONDS SEED_FILE_OR_DIR...\n";
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  std::vector<Bytes> seeds{Bytes{}};
  for (int i = 2; i < argc; ++i) {
    const std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file()) seeds.push_back(read_file(e.path()));
    } else if (std::filesystem::is_regular_file(p)) {
      seeds.push_back(read_file(p));
    } else {
      std::cerr << argv[0] << ": no seed file or directory " << p << "\n";
      return 2;
    }
  }
  g_crash_path = "fuzz-crash-" + std::filesystem::path(argv[0]).filename().string() + ".bin";
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(save_current);
  const char* s = std::getenv("KILN_FUZZ_SEED");
  const uint64_t rng_seed = s ? std::strtoull(s, nullptr, 10) : std::random_device{}();
  std::mt19937_64 rng(rng_seed);

  for (const Bytes& seed : seeds) run(seed);
  const auto start = std::chrono::steady_clock::now();
  uint64_t runs = seeds.size();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    for (int k = 0; k < 64; ++k, ++runs) {
      const Bytes& seed = seeds[static_cast<size_t>(rng() % seeds.size())];
      const Bytes& other = seeds[static_cast<size_t>(rng() % seeds.size())];
      run(mutate(seed, other, rng));
    }
  }
  std::cout << argv[0] << ": " << runs << " inputs from " << seeds.size() << " seeds in " << seconds
            << " s, no failure (KILN_FUZZ_SEED=" << rng_seed << ")\n";
  return 0;
}
