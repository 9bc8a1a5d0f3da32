// Empty stand-in for Gloo's common/error.h (see third_party/gloo_decls/README.md).
#pragma once
