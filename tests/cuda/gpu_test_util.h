// Shared by the GPU test files: skip without a device, and the run's random seed (fresh every run;
// QMOE_TEST_SEED replays one, and failures print it).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "qmoe/cuda.h"

namespace qmoe::test {

#define REQUIRE_GPU()                                                         \
  do {                                                                        \
    if (::qmoe::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";   \
  } while (0)

inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* replay = std::getenv("QMOE_TEST_SEED");
    return replay ? std::strtoull(replay, nullptr, 10) : std::random_device{}();
  }();
  return seed;
}

// " (seed N: QMOE_TEST_SEED=N replays this run)", for failure messages.
inline std::string seed_note() {
  return " (seed " + std::to_string(test_seed()) + ": QMOE_TEST_SEED=" + std::to_string(test_seed()) +
         " replays this run)";
}

// QMOE_TEST_SANITIZER_SUBSET=1: the register kernel's tests run a subset that compute-sanitizer's
// racecheck finishes within one device call (every format, tile and k-loop path on exact data and
// the smaller cases; tools/gpu_test.sh sets it for QMOE_RACECHECK_KERNELS=1). The tests print what
// they leave out.
inline bool sanitizer_subset() {
  static const bool subset = [] {
    const char* v = std::getenv("QMOE_TEST_SANITIZER_SUBSET");
    return v != nullptr && std::string(v) == "1";
  }();
  return subset;
}

}  // namespace qmoe::test
