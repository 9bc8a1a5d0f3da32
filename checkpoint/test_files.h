// Files for checkpoint/'s tests: paths in the test's temporary directory, whole files written
// and read back as bytes.
#pragma once

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace zerotrain::checkpoint::testing {

inline std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace zerotrain::checkpoint::testing
