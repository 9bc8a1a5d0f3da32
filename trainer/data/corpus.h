// The training corpus compiled into the binary (corpus/fortunes.txt, see corpus/README.md), so
// the default run needs no file and no download.
#pragma once

#include <string_view>

namespace zerotrain::trainer {

// The corpus bytes; valid for the life of the process.
std::string_view EmbeddedCorpus();

// Where the corpus comes from and under which licence, for logs and --help.
std::string_view EmbeddedCorpusSource();

}  // namespace zerotrain::trainer
