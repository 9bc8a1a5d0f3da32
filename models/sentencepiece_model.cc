// SentencePieceModel through libzt_sentencepiece.so (sentencepiece_shim.cc), loaded once with
// dlopen(RTLD_DEEPBIND) so libsentencepiece's bundled protobuf never meets the program's.
#include "models/sentencepiece_model.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

namespace zerotrain::models {
namespace {

constexpr char kShim[] = "libzt_sentencepiece.so";
constexpr char kShimInRunfiles[] = "/zerotrain/models/libzt_sentencepiece.so";

struct Shim {
  void* (*load)(const char*, char**) = nullptr;
  void (*free_processor)(void*) = nullptr;
  void (*free_buffer)(void*) = nullptr;
  int (*size)(void*) = nullptr;
  int (*encode)(void*, const char*, size_t, int**, size_t*, char**) = nullptr;
  char* (*decode)(void*, const int*, size_t, size_t*) = nullptr;
  std::string error;  // why it could not be loaded
};

// Where the shim is: $ZEROTRAIN_SENTENCEPIECE_SHIM, the runfiles of a test or of `bazel run`, the
// runfiles beside this executable, then beside the executable itself.
std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  if (const char* p = std::getenv("ZEROTRAIN_SENTENCEPIECE_SHIM")) paths.push_back(p);
  if (const char* r = std::getenv("RUNFILES_DIR"))
    paths.push_back(std::string(r) + kShimInRunfiles);
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    const std::string self(exe, n);
    paths.push_back(self + ".runfiles" + kShimInRunfiles);
    paths.push_back(self.substr(0, self.rfind('/') + 1) + kShim);
  }
  return paths;
}

template <typename F>
bool Bind(void* lib, const char* name, F* out, std::string* error) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (*out == nullptr) *error = std::string(kShim) + " has no " + name;
  return *out != nullptr;
}

const Shim& LoadShim() {
  static Shim* shim = [] {
    auto* s = new Shim();
    void* lib = nullptr;
    std::string tried;
    for (const std::string& path : Candidates()) {
      lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (lib != nullptr) break;
      tried += (tried.empty() ? "" : ", ") + path;
    }
    if (lib == nullptr) {
      s->error = std::string("the SentencePiece library ") + kShim + " is not at " + tried +
                 " (set ZEROTRAIN_SENTENCEPIECE_SHIM to its path)";
      return s;
    }
    std::string e;
    if (!(Bind(lib, "zt_spm_load", &s->load, &e) &&
          Bind(lib, "zt_spm_free", &s->free_processor, &e) &&
          Bind(lib, "zt_spm_free_buffer", &s->free_buffer, &e) &&
          Bind(lib, "zt_spm_size", &s->size, &e) && Bind(lib, "zt_spm_encode", &s->encode, &e) &&
          Bind(lib, "zt_spm_decode", &s->decode, &e))) {
      s->error = e;
    }
    return s;
  }();
  return *shim;
}

}  // namespace

struct SentencePieceModel::Impl {
  void* processor = nullptr;
  ~Impl() {
    if (processor != nullptr) LoadShim().free_processor(processor);
  }
};

SentencePieceModel::SentencePieceModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path,
                                                             std::string* error) {
  const Shim& shim = LoadShim();
  if (!shim.error.empty()) {
    *error = shim.error;
    return nullptr;
  }
  char* message = nullptr;
  auto impl = std::make_unique<Impl>();
  impl->processor = shim.load(path.c_str(), &message);
  if (impl->processor == nullptr) {
    *error = message != nullptr ? message : "unknown error";
    shim.free_buffer(message);
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(new SentencePieceModel(std::move(impl)));
}

bool SentencePieceModel::Encode(std::string_view text, std::vector<int>* ids,
                                std::string* error) const {
  const Shim& shim = LoadShim();
  int* out = nullptr;
  size_t n = 0;
  char* message = nullptr;
  if (shim.encode(impl_->processor, text.data(), text.size(), &out, &n, &message) != 0) {
    *error = message != nullptr ? message : "unknown error";
    shim.free_buffer(message);
    return false;
  }
  ids->assign(out, out + n);
  shim.free_buffer(out);
  return true;
}

bool SentencePieceModel::Decode(const std::vector<int>& ids, std::string* text) const {
  const Shim& shim = LoadShim();
  size_t len = 0;
  char* out = shim.decode(impl_->processor, ids.data(), ids.size(), &len);
  if (out == nullptr) return false;
  text->assign(out, len);
  shim.free_buffer(out);
  return true;
}

int SentencePieceModel::size() const { return LoadShim().size(impl_->processor); }

}  // namespace zerotrain::models
