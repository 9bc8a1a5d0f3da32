// Empty stand-in for Gloo's algorithm.h (see third_party/gloo_decls/README.md).
#pragma once
