// Declaration-only stand-in for Gloo's context.h (see third_party/gloo_decls/README.md).
#pragma once
#include <chrono>

namespace gloo {
class Context {
 public:
  // Defined in LibTorch's bundled Gloo; named by ProcessGroupGloo::setTimeout.
  void setTimeout(std::chrono::milliseconds timeout);
};
}  // namespace gloo
