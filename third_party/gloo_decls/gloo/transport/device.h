// Declaration-only stand-in for Gloo's transport/device.h (see third_party/gloo_decls/README.md).
#pragma once

namespace gloo {
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo
