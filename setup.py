"""deep_gemm: Python package + CUDA headers compiled at run time (no build step for the kernels) + the C++ launch
module (csrc/)."""
import os
import shutil

from setuptools import Extension, find_packages, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithHeaders(build_py):
    """Ship include/deep_gemm inside the package (deep_gemm/include/deep_gemm) so that `pip install .` works."""

    def run(self):
        super().run()
        src = os.path.join(ROOT, "include", "deep_gemm")
        dst = os.path.join(self.build_lib, "deep_gemm", "include", "deep_gemm")
        if os.path.isdir(dst):
            shutil.rmtree(dst)
        shutil.copytree(src, dst)


# NOTES: every kernel launch goes through this module (csrc/launch.cpp). It uses only the CPython API (no torch/CUDA
# headers; libcuda is opened at run time), so it builds in pip's isolated environment with any C++17 compiler. It is
# required: without a compiler the install fails rather than producing a package that cannot launch.
# When torch is importable at build time (no build isolation), the module reads tensors through torch's headers
# instead (~1 us less per call, csrc/launch.cpp); DG_BUILD_WITH_TORCH=0 forces the portable build.
def _launch_module() -> Extension:
    args = dict(sources=["csrc/launch.cpp"], depends=["csrc/cuda_abi.h"], libraries=["dl"], language="c++",
                extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"])
    if os.environ.get("DG_BUILD_WITH_TORCH", "1") != "0":
        try:
            import torch
            from torch.utils.cpp_extension import include_paths, library_paths
        except ImportError:
            torch = None
        if torch is not None:
            abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
            args.update(include_dirs=include_paths(), library_dirs=library_paths(),
                        runtime_library_dirs=library_paths(), libraries=["dl", "c10", "torch", "torch_cpu",
                                                                         "torch_python"],
                        extra_compile_args=["-std=c++20", "-O2", "-fvisibility=hidden", "-w", "-DDG_WITH_TORCH",
                                            f"-D_GLIBCXX_USE_CXX11_ABI={abi}"])
    return Extension("deep_gemm._C", **args)


LAUNCH_MODULE = _launch_module()

setup(
    name="deep_gemm",
    version="0.1.0",
    description="JIT-compiled FP8 GEMM kernels for NVIDIA Hopper, DeepGEMM-compatible API",
    packages=find_packages(include=["deep_gemm", "deep_gemm.*"]),
    python_requires=">=3.9",
    install_requires=[
        "torch>=2.4",
        # NOTES: NVRTC is the only CUDA wheel the JIT needs: the kernels include no CUDA, CCCL or CuTe headers. The
        # upper bounds keep to the toolchain verified on the H200 (CUDA 13.0, driver 580).
        "cuda-bindings>=13.0.3,<13.4",
        "cuda-toolkit[nvrtc]>=13.0.3,<13.1",
    ],
    # NOTES: cuobjdump (+ the nvdisasm it runs) for tests/jit/test_codegen_budget.py, which counts the kernels' SASS;
    # there is no 13.0 wheel of either, 13.2.51 is the oldest (it prints the same SASS as 13.5.37).
    extras_require={"test": ["pytest>=7", "numpy", "nvidia-cuda-cuobjdump==13.2.51", "nvidia-cuda-nvdisasm==13.2.51"]},
    ext_modules=[LAUNCH_MODULE],
    cmdclass={"build_py": BuildPyWithHeaders},
    zip_safe=False,
)
