// The LibTorch headers //tools:torch_pch precompiles (tools/pch.bzl): torch::nn::Module and the
// tensor API, what the model families, the engine's module walks and most tests parse. Only
// LibTorch here: a header of ours would make every change to it rebuild the .gch.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>
