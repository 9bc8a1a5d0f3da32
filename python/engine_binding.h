// The Engine for Python (zerotrain._C.Engine): built from a Python module's tensors and a loaded
// config, its forward scope, Backward, Step, GatheredParameters and checkpoints.
#pragma once

namespace pybind11 {
class module_;
}

namespace zerotrain::python {

void BindEngine(pybind11::module_& m);

}  // namespace zerotrain::python
