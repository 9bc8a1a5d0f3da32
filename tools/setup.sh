#!/usr/bin/env bash
# Installs everything zerotrain's build and tests need on a fresh Debian 12 machine, idempotently:
# Debian packages, and LibTorch as PyPI's torch wheel (hash-pinned in tools/requirements.lock) in the
# project-local virtual environment .venv, plus DeepSpeed as the conformance tests' oracle
# (tools/requirements-oracle.lock) and Hugging Face transformers (tools/requirements-models.lock),
# tests only, never the build or the trainer. A second run changes nothing and takes seconds.
# Run as root (apt-get). Records what it found in .venv/zerotrain-versions.txt. pip installs with
# --no-compile: Python compiles a module's bytecode when it is first imported, so the thousands
# that no test imports (most of transformers' models) cost nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
TORCH_VERSION="2.11.0"
DEEPSPEED_VERSION="0.19.8"
TRANSFORMERS_VERSION="4.57.3 0.26.0"  # transformers, torchvision
APT_PACKAGES=(
  bazel-bootstrap g++ git python3 python3-venv
  libabsl-dev libgoogle-glog-dev libgflags-dev libprotobuf-dev protobuf-compiler
  libgtest-dev libgmock-dev libbenchmark-dev
  libsentencepiece-dev sentencepiece  # SentencePiece tokenizers; its CLI is the tests' reference
  nlohmann-json3-dev                  # JSON (//json), header-only
  clang-format-14
  python3-dev  # DeepSpeed (the test oracle) compiles its CPU communication op against Python.h
  iproute2     # ip netns / tc for //tests/multinode:multinode_test's two "machines"
  # The launchers //tests/launchers runs //trainer:main under, as their users start it.
  openmpi-bin slurmctld slurmd slurm-client munge
)

say() { echo "setup: $*"; }
die() { echo "setup: ERROR: $*" >&2; exit 1; }

install_debian_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    say "Debian packages: all ${#APT_PACKAGES[@]} present"
    return
  fi
  [ "$(id -u)" -eq 0 ] || die "missing Debian packages (${missing[*]}); run this script as root"
  say "installing Debian packages: ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

installed_torch_version() {
  local f
  f=$(ls "$VENV"/lib/python3*/site-packages/torch/version.py 2>/dev/null | head -n 1) || true
  [ -n "$f" ] && sed -n "s/^__version__ = '\([^'+]*\).*/\1/p" "$f"
}

install_libtorch() {
  if [ "$(installed_torch_version)" = "$TORCH_VERSION" ]; then
    say "LibTorch: torch $TORCH_VERSION already in $VENV"
    return
  fi
  local py=/usr/bin/python3
  local pyver
  pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [ "$pyver" = "3.11" ] || die "tools/requirements.lock pins wheels for CPython 3.11; $py is $pyver. \
Install torch==$TORCH_VERSION yourself and build with --repo_env=LIBTORCH_HOME=<site-packages>/torch"
  say "installing torch $TORCH_VERSION (with its CUDA wheels, several GB) into $VENV"
  rm -rf "$VENV"
  "$py" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes --no-compile \
    -r "$ROOT/tools/requirements.lock"
  [ "$(installed_torch_version)" = "$TORCH_VERSION" ] || die "torch $TORCH_VERSION did not install into $VENV"
}

installed_deepspeed_version() {
  "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("deepspeed"))' 2>/dev/null || true
}

# DeepSpeed is an sdist; it builds (pure Python, DS_BUILD_OPS=0) against the pinned setuptools.
install_deepspeed_oracle() {
  if [ "$(installed_deepspeed_version)" = "$DEEPSPEED_VERSION" ]; then
    say "DeepSpeed: $DEEPSPEED_VERSION already in $VENV (test oracle)"
    return
  fi
  say "installing DeepSpeed $DEEPSPEED_VERSION into $VENV (the conformance tests' oracle)"
  local pip=("$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes --no-compile)
  "${pip[@]}" -r "$ROOT/tools/requirements-oracle-build.lock"
  DS_BUILD_OPS=0 "${pip[@]}" --no-build-isolation -r "$ROOT/tools/requirements-oracle.lock"
  [ "$(installed_deepspeed_version)" = "$DEEPSPEED_VERSION" ] ||
    die "DeepSpeed $DEEPSPEED_VERSION did not install into $VENV"
}

installed_transformers_version() {
  "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("transformers"), m.version("torchvision"))' 2>/dev/null || true
}

# Hugging Face transformers and torchvision: the model tests' references for GPT-2, Llama and
# ResNet (tests/hf/), as DeepSpeed is the conformance tests'. Wheels only.
install_transformers_oracle() {
  if [ "$(installed_transformers_version)" = "$TRANSFORMERS_VERSION" ]; then
    say "transformers, torchvision: $TRANSFORMERS_VERSION already in $VENV (test references)"
    return
  fi
  say "installing transformers, torchvision $TRANSFORMERS_VERSION into $VENV (the model tests' references)"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes --no-compile --only-binary=:all: \
    -r "$ROOT/tools/requirements-models.lock"
  [ "$(installed_transformers_version)" = "$TRANSFORMERS_VERSION" ] ||
    die "transformers, torchvision $TRANSFORMERS_VERSION did not install into $VENV"
}

# A Debian package's version as tools/versions.txt pins it: no epoch, cut at the first of the
# characters in $2 (third_party/debian/debian_library.bzl's trim_version does the same).
deb_version() {
  dpkg-query -W -f='${Version}' "$1" 2>/dev/null | sed "s/^[0-9]*://; s/[$2].*//"
}

# Prints "name found expected" lines and warns where the machine differs from tools/versions.txt.
check_versions() {
  local found p
  declare -A have
  have[debian]=$(cut -d. -f1 /etc/debian_version 2>/dev/null || echo none)
  have[bazel-bootstrap]=$(dpkg-query -W -f='${Version}' bazel-bootstrap 2>/dev/null | sed 's/[+~-].*//')
  have[g++]=$(g++ -dumpfullversion 2>/dev/null || echo none)
  have[protobuf-compiler]=$(protoc --version 2>/dev/null | awk '{print $2}')
  have[libabsl-dev]=$(deb_version libabsl-dev '.+~-')
  for p in libgoogle-glog-dev libgflags-dev libprotobuf-dev libgtest-dev libgmock-dev libbenchmark-dev \
    libsentencepiece-dev sentencepiece nlohmann-json3-dev clang-format-14 openmpi-bin slurmd munge; do
    have[$p]=$(deb_version "$p" '+~-')
  done
  have[python]=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  have[torch]=$(installed_torch_version)
  have[cuda]=$(/usr/local/cuda/bin/nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
  have[nccl]=$(awk '/define NCCL_MAJOR/{a=$3} /define NCCL_MINOR/{b=$3} END{if (a) print a "." b}' \
    /usr/local/cuda/include/nccl.h 2>/dev/null)
  : > "$VENV/zerotrain-versions.txt"
  while read -r name want; do
    case "$name" in ''|'#'*) continue ;; esac
    found="${have[$name]:-none}"
    [ -n "$found" ] || found=none
    echo "$name $found" >> "$VENV/zerotrain-versions.txt"
    if [ "$found" = "$want" ]; then
      say "  $name $found"
    else
      say "  WARNING: $name is '$found' here; zerotrain is tested with $want"
    fi
  done < "$ROOT/tools/versions.txt"
  if [ ! -x /usr/local/cuda/bin/nvcc ]; then
    say "  note: no /usr/local/cuda: CPU builds work; 'bazel build --config=cuda' needs CUDA 13 there"
  fi
}

install_debian_packages
install_libtorch
install_deepspeed_oracle
install_transformers_oracle
say "versions (recorded in .venv/zerotrain-versions.txt):"
check_versions
say "done. Next: bazel test //..."
