# Repositories zerotrain's libraries need, for its own WORKSPACE and for any workspace that
# depends on it (see tests/external_workspace/WORKSPACE):
#   load("@zerotrain//third_party:deps.bzl", "zerotrain_dependencies")
#   zerotrain_dependencies()
load("//third_party/libtorch:libtorch.bzl", "libtorch_repository")

def zerotrain_dependencies():
    if not native.existing_rule("libtorch"):
        libtorch_repository(name = "libtorch")
    if not native.existing_rule("local_cuda"):
        # Fetched only when a --config=cuda target needs it.
        native.new_local_repository(
            name = "local_cuda",
            path = "/usr/local/cuda",
            build_file = "@zerotrain//third_party:cuda.BUILD",
        )
