# Repositories zerotrain's libraries need, for its own WORKSPACE and for any workspace that
# depends on it (see tests/external_workspace/WORKSPACE):
#   load("@zerotrain//third_party:deps.bzl", "zerotrain_dependencies")
#   zerotrain_dependencies()
load("//third_party/debian:debian_library.bzl", "debian_library_repository")
load("//third_party/libtorch:libtorch.bzl", "libtorch_repository")

# Debian 12's libraries (tools/setup.sh installs them), each checked against tools/versions.txt:
# name -> (packages, BUILD file, where the pinned part of the dpkg version ends).
_DEBIAN_LIBRARIES = {
    # Abseil is pinned by its LTS date: 20220623.1 is 20220623.
    "debian_absl": (["libabsl-dev"], "absl.BUILD", ".+~-"),
    "debian_glog": (["libgoogle-glog-dev", "libgflags-dev"], "glog.BUILD", "+~-"),
    # protoc's generated code must match the runtime library, so both are checked together.
    "debian_protobuf": (["libprotobuf-dev", "protobuf-compiler"], "protobuf.BUILD", "+~-"),
    "debian_googletest": (["libgtest-dev", "libgmock-dev"], "googletest.BUILD", "+~-"),
    "debian_benchmark": (["libbenchmark-dev"], "benchmark.BUILD", "+~-"),
    "debian_sentencepiece": (["libsentencepiece-dev", "sentencepiece"], "sentencepiece.BUILD", "+~-"),
    "debian_nlohmann_json": (["nlohmann-json3-dev"], "nlohmann_json.BUILD", "+~-"),
    # CPython 3.11's headers, for python/'s extension module (which links no libpython: the
    # interpreter that imports it provides those symbols).
    "debian_python": (["libpython3.11-dev"], "python.BUILD", "+~-"),
}

def zerotrain_dependencies():
    for name, (packages, build_file, version_cut) in _DEBIAN_LIBRARIES.items():
        if not native.existing_rule(name):
            debian_library_repository(
                name = name,
                packages = packages,
                build_file = Label("//third_party/debian:" + build_file),
                version_cut = version_cut,
            )
    if not native.existing_rule("libtorch"):
        libtorch_repository(name = "libtorch")
    if not native.existing_rule("local_cuda"):
        # Fetched only when a --config=cuda target needs it.
        native.new_local_repository(
            name = "local_cuda",
            path = "/usr/local/cuda",
            build_file = "@zerotrain//third_party:cuda.BUILD",
        )
