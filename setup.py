"""The build steps pyproject.toml cannot express: the C++ launch module `deep_gemm._C` (csrc/) and the kernel headers
copied into the package (they are compiled at run time, no build step for the kernels)."""
import os
import shutil

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.errors import CCompilerError, ExecError

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


class BuildExtRequired(build_ext):
    """A failed build of `_C` stops the install with what to do, not only the compiler's last line."""

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except (CCompilerError, ExecError) as e:
            raise SystemExit(f"error: building {ext.name} (csrc/launch.cpp) failed: {e}\n"
                             "deep_gemm cannot launch kernels without it: install a C++17 compiler (CC and CXX choose "
                             "one) and the Python development headers, then reinstall.") from e


# Everything else (name, version, dependencies, extras, package data) is in pyproject.toml.
setup(ext_modules=[_launch_module()], cmdclass={"build_py": BuildPyWithHeaders, "build_ext": BuildExtRequired})
