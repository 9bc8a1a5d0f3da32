#!/usr/bin/env python3
"""Narrows a source file's LibTorch include: <ATen/ATen.h> or <torch/torch.h> (6.6 s and 14.2 s
to parse here) becomes <ATen/core/Tensor.h> (1.4 s), or <torch/types.h> where the file uses
torch::, plus the ATen/ops/<op>.h and torch/<part>.h headers that g++ -fsyntax-only says are
missing, until the file compiles; a file it cannot narrow is left as it was. Run from a checkout
that has built once (it reads LibTorch's headers through bazel-<workspace>/external and the
generated .pb.h files in bazel-bin). Usage: python3 tools/narrow_includes.py FILE...
"""
import glob, os, re, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = (glob.glob(ROOT + '/bazel-*/external/libtorch/include') or [''])[0]
FLAGS = ['g++', '-std=c++17', '-fsyntax-only', '-w', '-I' + ROOT, '-I' + ROOT + '/bazel-bin',
         '-I' + T, '-I' + T + '/torch/csrc/api/include', '-I' + ROOT + '/third_party/gloo_decls',
         '-I/usr/local/cuda/include']
SPECIAL = {
    'nn': 'torch/nn.h', 'optim': 'torch/optim.h', 'manual_seed': 'torch/utils.h',
    'autograd': 'torch/autograd.h', 'cuda': 'torch/cuda.h', 'save': 'torch/serialize.h',
    'load': 'torch/serialize.h', 'linalg': 'torch/linalg.h', 'fft': 'torch/fft.h',
    'data': 'torch/data.h', 'jit': 'torch/jit.h', 'special': 'torch/special.h',
    'globalContext': 'ATen/Context.h', 'Context': 'ATen/Context.h',
    'getCUDAHooks': 'ATen/detail/CUDAHooksInterface.h',
    'NoGradGuard': 'c10/core/GradMode.h', 'AutoGradMode': 'c10/core/GradMode.h',
    'getDefaultCPUGenerator': 'ATen/CPUGeneratorImpl.h',
    'Generator': 'ATen/core/Generator.h', 'IntArrayRef': 'c10/util/ArrayRef.h',
    'TensorList': 'ATen/core/ATen_fwd.h', 'ITensorListRef': 'ATen/core/IListRef.h',
    'Scalar': 'c10/core/Scalar.h', 'ScalarType': 'c10/core/ScalarType.h',
    'OptionalDeviceGuard': 'c10/core/DeviceGuard.h', 'DeviceGuard': 'c10/core/DeviceGuard.h',
    'InferenceMode': 'c10/core/InferenceMode.h', 'parallel_for': 'ATen/Parallel.h',
    'get_num_threads': 'ATen/Parallel.h', 'set_num_threads': 'ATen/Parallel.h',
    'Dispatcher': 'ATen/core/dispatch/Dispatcher.h',
}
Q = "['\u2018\u2019]"
MISSING = [re.compile(Q + r"([A-Za-z_0-9]+)" + Q + r" is not a member of " + Q + r"(?:at|torch|at::native|c10|at::detail|torch::nn|torch::optim)" + Q),
           re.compile(Q + r"([A-Za-z_0-9]+)" + Q + r" was not declared in this scope"),
           re.compile(r"no member named " + Q + r"([A-Za-z_0-9]+)" + Q + r" in namespace")]

def compile_errors(path, text):
    tmp = path + '.narrow.cc'
    with open(tmp, 'w') as f:
        f.write(text)
    try:
        r = subprocess.run(FLAGS + [tmp], capture_output=True, text=True)
    finally:
        os.remove(tmp)
    return r.returncode, r.stderr

def header_for(name):
    if name in SPECIAL:
        return SPECIAL[name]
    if os.path.exists(f'{T}/ATen/ops/{name}.h'):
        return f'ATen/ops/{name}.h'
    if name.endswith('_out') and os.path.exists(f'{T}/ATen/ops/{name[:-4]}.h'):
        return f'ATen/ops/{name[:-4]}.h'
    return None

def narrow(path):
    text = open(path).read()
    pat = re.compile(r'#include <(ATen/ATen\.h|torch/torch\.h)>\n')
    if not pat.search(text):
        return 'unchanged (no broad include)'
    added = ['torch/types.h'] if '<torch/torch.h>' in text and 'torch::' in text else ['ATen/core/Tensor.h']
    for _ in range(8):
        incl = ''.join(f'#include <{h}>\n' for h in sorted(set(added)))
        candidate = pat.sub(incl, text, count=1)
        code, err = compile_errors(path, candidate)
        if code == 0:
            open(path, 'w').write(candidate)
            return 'narrowed: ' + ' '.join(sorted(set(added)))
        names = set()
        for rx in MISSING:
            names.update(rx.findall(err))
        new = [h for h in (header_for(n) for n in names) if h and h not in added]
        if not new:
            first = [l for l in err.splitlines() if 'error' in l][:3]
            return 'FAILED: ' + ' | '.join(first)
        added += new
    return 'FAILED: too many rounds'

if __name__ == '__main__':
    if not T:
        sys.exit('narrow_includes: no bazel-*/external/libtorch/include; run a bazel build first')
    for p in sys.argv[1:]:
        t = time.time()
        print(p, narrow(p), f'({time.time() - t:.0f}s)', flush=True)
