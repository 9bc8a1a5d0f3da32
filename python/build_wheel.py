"""Writes zerotrain's wheel (//python:wheel): the files given as SRC=DEST, and the .dist-info that
pip reads (METADATA with the exact torch it was built against, WHEEL with the CPython 3.11 Linux
tag, RECORD with each file's SHA-256).

Usage: build_wheel.py OUT.whl VERSION TORCH_VERSION SRC=DEST...
"""
import base64
import hashlib
import sys
import zipfile

# Fixed timestamps, so the same inputs give the same wheel.
_DATE = (2026, 1, 1, 0, 0, 0)


def _digest(data):
    d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + d.decode()


def main(argv):
    out, version, torch_version = argv[1:4]
    files = []
    for pair in argv[4:]:
        src, dest = pair.split("=", 1)
        with open(src, "rb") as f:
            files.append((dest, f.read()))
    info = f"zerotrain-{version}.dist-info"
    files.append((f"{info}/METADATA", (
        "Metadata-Version: 2.1\n"
        "Name: zerotrain\n"
        f"Version: {version}\n"
        "Summary: DeepSpeed's ZeRO training engine in C++ on LibTorch, with DeepSpeed's Python API\n"
        "Requires-Python: ==3.11.*\n"
        f"Requires-Dist: torch=={torch_version}\n").encode()))
    files.append((f"{info}/WHEEL", (
        "Wheel-Version: 1.0\n"
        "Generator: zerotrain build_wheel.py\n"
        "Root-Is-Purelib: false\n"
        "Tag: cp311-cp311-linux_x86_64\n").encode()))
    record = [f"{name},{_digest(data)},{len(data)}" for name, data in files]
    record.append(f"{info}/RECORD,,")
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as whl:
        for name, data in files:
            entry = zipfile.ZipInfo(name, _DATE)
            entry.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(entry, data)


if __name__ == "__main__":
    main(sys.argv)
