// libzt_sentencepiece.so: Debian's libsentencepiece behind a C interface, loaded by
// sentencepiece_model.cc with dlopen(RTLD_DEEPBIND). libsentencepiece carries its own protobuf
// (3.14) and exports it; linked into a program that also links protobuf 3.21 (ours, for the
// config), the two would bind to each other's symbols and abort. Loaded deep-bound, it keeps its
// own.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

char* Copy(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(out, s.data(), s.size() + 1);
  return out;
}

}  // namespace

extern "C" {

// A processor, or null with *error set (free it with zt_spm_free_buffer).
void* zt_spm_load(const char* path, char** error) {
  auto* p = new sentencepiece::SentencePieceProcessor();
  const auto s = p->Load(path);
  if (s.ok()) return p;
  *error = Copy(s.ToString());
  delete p;
  return nullptr;
}

void zt_spm_free(void* processor) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(processor);
}

void zt_spm_free_buffer(void* buffer) { std::free(buffer); }

int zt_spm_size(void* processor) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(processor)->GetPieceSize();
}

// 0 and *ids (malloc'd, *n of them), or -1 and *error.
int zt_spm_encode(void* processor, const char* text, size_t len, int** ids, size_t* n,
                  char** error) {
  std::vector<int> pieces;
  const auto s = static_cast<sentencepiece::SentencePieceProcessor*>(processor)->Encode(
      std::string_view(text, len), &pieces);
  if (!s.ok()) {
    *error = Copy(s.ToString());
    return -1;
  }
  *n = pieces.size();
  *ids = static_cast<int*>(std::malloc(sizeof(int) * (pieces.size() + 1)));
  std::memcpy(*ids, pieces.data(), sizeof(int) * pieces.size());
  return 0;
}

// The text (malloc'd, *len bytes), or null.
char* zt_spm_decode(void* processor, const int* ids, size_t n, size_t* len) {
  std::string text;
  const std::vector<int> v(ids, ids + n);
  if (!static_cast<sentencepiece::SentencePieceProcessor*>(processor)->Decode(v, &text).ok()) {
    return nullptr;
  }
  *len = text.size();
  return Copy(text);
}

}  // extern "C"
