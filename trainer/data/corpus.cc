// Access to the byte array the :corpus_data genrule generates from corpus/fortunes.txt.
#include "trainer/data/corpus.h"

#include <cstddef>

namespace zerotrain::trainer {
namespace corpus_data {
extern const unsigned char kBytes[];
extern const std::size_t kSize;
}  // namespace corpus_data

std::string_view EmbeddedCorpus() {
  return std::string_view(reinterpret_cast<const char*>(corpus_data::kBytes), corpus_data::kSize);
}

std::string_view EmbeddedCorpusSource() {
  return "fortunes from Debian's fortunes package (fortune-mod 1.99.1, BSD licence; "
         "trainer/data/corpus/README.md)";
}

}  // namespace zerotrain::trainer
