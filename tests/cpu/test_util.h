// Helpers shared by the CPU tests: fixture paths and small file utilities.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

namespace qmoe::test {

// QMOE_TEST_DATA_DIR in the environment overrides the build-time path (binaries run elsewhere).
inline std::string data_dir() {
  const char* env = std::getenv("QMOE_TEST_DATA_DIR");
  return env ? env : QMOE_TEST_DATA_DIR;
}
inline std::string fixture_dir(const std::string& name) { return data_dir() + "/fixtures/" + name; }

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

// A fresh empty directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("qmoe_test_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path path_;
};

// Copies a fixture checkpoint into a temp dir so a test can corrupt it.
inline void copy_fixture(const std::string& name, const TempDir& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(fixture_dir(name)))
    std::filesystem::copy_file(entry.path(), std::filesystem::path(dir.path()) / entry.path().filename());
}

}  // namespace qmoe::test
