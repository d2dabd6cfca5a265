"""`cuobjdump -sass` of a cubin, for DG_JIT_DUMP_SASS (deep_gemm.jit.build): finding cuobjdump and nvdisasm, and
running them. The SASS analysis itself (main-loop instruction counts) is a developer tool: tools/sass.py."""
import glob
import os
import shutil
import subprocess
import tempfile
from typing import Optional


def _find_tool(name: str) -> Optional[str]:
    """`name` from the NVIDIA wheels (nvidia/*/bin), else a CUDA toolkit's, else PATH; None if absent."""
    candidates = []
    try:
        import nvidia
        for root in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(root, "*", "bin", name)))
    except ImportError:
        pass
    for home in (os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"):
        if home:
            candidates.append(os.path.join(home, "bin", name))
    on_path = shutil.which(name)
    if on_path:
        candidates.append(on_path)
    return next((c for c in candidates if os.path.isfile(c) and os.access(c, os.X_OK)), None)


def find_cuobjdump() -> Optional[str]:
    """cuobjdump, or None unless both it and nvdisasm (which `cuobjdump -sass` runs) are found: the
    nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels of the `test` extra, else a CUDA toolkit's."""
    tool = _find_tool("cuobjdump")
    return tool if tool is not None and _find_tool("nvdisasm") is not None else None


def sass_text(cubin: bytes, cuobjdump: Optional[str] = None) -> str:
    """`cuobjdump -sass` of `cubin` (FileNotFoundError when cuobjdump/nvdisasm are not found)."""
    tool = cuobjdump or find_cuobjdump()
    nvdisasm = _find_tool("nvdisasm")
    if tool is None or nvdisasm is None:
        raise FileNotFoundError("cuobjdump/nvdisasm not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm "
                                "(the `test` extra)")
    # NOTES: cuobjdump looks for nvdisasm beside itself, then on PATH.
    env = dict(os.environ, PATH=os.pathsep.join((os.path.dirname(nvdisasm), os.environ.get("PATH", ""))))
    with tempfile.TemporaryDirectory(prefix="deep_gemm_sass_") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        proc = subprocess.run([tool, "-sass", path], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} -sass failed (exit {proc.returncode}):\n{proc.stderr}")
    return proc.stdout
