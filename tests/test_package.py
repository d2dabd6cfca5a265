"""Package surface: public names, DG_* environment parsing (deep_gemm/envs.py), header discovery."""
import dataclasses
import importlib.metadata
import os
import sys

import pytest

import deep_gemm
from deep_gemm import envs, jit
from deep_gemm.jit.compiler import NVRTCCompiler
from deep_gemm.jit.paths import project_headers, project_include_dir

DISTRIBUTION = "deepgemm-sm90"  # pyproject.toml [project] name; the import name stays deep_gemm

FLAGS = {"DG_JIT_USE_NVCC": "jit_use_nvcc", "DG_JIT_DEBUG": "jit_debug", "DG_PRINT_CONFIGS": "print_configs",
         "DG_JIT_PTXAS_VERBOSE": "ptxas_verbose"}
ALL_VARS = ["DG_JIT_CACHE_DIR", "DG_JIT_NVCC_PATH", *FLAGS]


@pytest.fixture
def clean_env(monkeypatch):
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_public_names():
    assert len(set(deep_gemm.__all__)) == len(deep_gemm.__all__)
    for name in deep_gemm.__all__:
        assert hasattr(deep_gemm, name), name
    for name in ("gemm_fp8_fp8_bf16_nt", "get_col_major_tma_aligned_tensor", "set_num_sms", "get_num_sms",
                 "ceil_div", "get_tma_aligned_size", "per_token_cast_to_fp8", "per_block_cast_to_fp8", "calc_diff"):
        assert name in deep_gemm.__all__ and callable(getattr(deep_gemm, name)), name
    assert isinstance(deep_gemm.__version__, str)


def test_jit_public_names():
    for name in jit.__all__:
        assert hasattr(jit, name), name
    for error in (jit.CompileError, jit.CacheError, jit.ToolchainError, jit.CUDADriverError):
        assert issubclass(error, RuntimeError)


def test_env_defaults(clean_env):
    env = envs.read_env()
    assert env.jit_cache_dir == os.path.expanduser("~/.deep_gemm")
    assert env.jit_nvcc_path == ""
    for field in FLAGS.values():
        assert getattr(env, field) is False, field


def test_env_is_frozen(clean_env):
    with pytest.raises(dataclasses.FrozenInstanceError):
        envs.read_env().jit_debug = True


def test_env_reads_each_call(clean_env):
    assert envs.read_env().jit_use_nvcc is False
    clean_env.setenv("DG_JIT_USE_NVCC", "1")
    assert envs.read_env().jit_use_nvcc is True


@pytest.mark.parametrize("var", sorted(FLAGS))
@pytest.mark.parametrize("value,expected", [
    ("1", True), ("true", True), ("TRUE", True), ("yes", True), ("on", True), (" 1 ", True), ("2", True),
    ("0", False), ("false", False), ("False", False), ("no", False), ("off", False), ("", False), ("  ", False),
])
def test_flag_parsing(clean_env, var, value, expected):
    clean_env.setenv(var, value)
    env = envs.read_env()
    assert getattr(env, FLAGS[var]) is expected
    for other, field in FLAGS.items():
        if other != var:
            assert getattr(env, field) is False, "one variable must set one field"


def test_cache_dir(clean_env, tmp_path):
    clean_env.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    assert envs.read_env().jit_cache_dir == str(tmp_path)
    clean_env.setenv("DG_JIT_CACHE_DIR", "~/dg_somewhere")
    assert envs.read_env().jit_cache_dir == os.path.expanduser("~/dg_somewhere")
    clean_env.setenv("DG_JIT_CACHE_DIR", "")
    assert envs.read_env().jit_cache_dir == os.path.expanduser("~/.deep_gemm")


def test_nvcc_path(clean_env):
    clean_env.setenv("DG_JIT_NVCC_PATH", "/opt/cuda/bin/nvcc")
    assert envs.read_env().jit_nvcc_path == "/opt/cuda/bin/nvcc"


def test_project_include_dir():
    root = project_include_dir()
    assert os.path.isabs(root)
    assert os.path.isfile(os.path.join(root, "deep_gemm", "sm90", "fp8_gemm_1d2d.cuh"))
    assert jit.project_include_dir() == root
    # The kernels include only project headers: no CUTLASS, CCCL or CUDA header directories.
    assert jit.include_dirs() == [root]


def test_project_headers_feed_the_cache_key():
    headers = project_headers()
    assert headers == sorted(headers)
    assert os.path.join("deep_gemm", "sm90", "fp8_gemm_1d2d.cuh") in headers
    assert os.path.join("deep_gemm", "common", "scheduler.cuh") in headers
    for rel in headers:
        assert not os.path.isabs(rel) and os.path.isfile(os.path.join(project_include_dir(), rel))


def test_version_is_single_sourced():
    dist = importlib.metadata.distribution(DISTRIBUTION)
    assert dist.version == deep_gemm.__version__
    assert "deep_gemm" in dist.read_text("top_level.txt").split()


def test_py_typed_ships_with_the_package():
    assert os.path.isfile(os.path.join(os.path.dirname(deep_gemm.__file__), "py.typed"))


@pytest.mark.parametrize("version", [(12, 8), (12, 9), (13, 0), (13, 3)])
def test_nvrtc_versions_accepted(monkeypatch, version):
    from cuda.bindings import nvrtc
    monkeypatch.setattr(nvrtc, "nvrtcVersion", lambda: (nvrtc.nvrtcResult.NVRTC_SUCCESS, *version))
    assert NVRTCCompiler().loaded_identity() == "nvrtc-%d.%d" % version


@pytest.mark.parametrize("version", [(11, 8), (12, 6), (12, 7)])
def test_old_nvrtc_refused(monkeypatch, version):
    from cuda.bindings import nvrtc
    monkeypatch.setattr(nvrtc, "nvrtcVersion", lambda: (nvrtc.nvrtcResult.NVRTC_SUCCESS, *version))
    with pytest.raises(jit.ToolchainError, match=r"NVRTC %d\.%d is too old.*12\.8\+.*\[cu13\].*\[cu12\]" % version):
        NVRTCCompiler().loaded_identity()


def test_missing_nvrtc_library_names_the_extras(monkeypatch):
    from cuda.bindings import nvrtc

    def not_found():
        raise RuntimeError("Unable to load libnvrtc.so")
    monkeypatch.setattr(nvrtc, "nvrtcVersion", not_found)
    with pytest.raises(jit.ToolchainError, match=r"NVRTC could not be loaded.*libnvrtc.*\[cu13\].*\[cu12\]"):
        NVRTCCompiler().loaded_identity()


def test_missing_cuda_bindings_names_the_extras(monkeypatch):
    import cuda.bindings
    monkeypatch.delattr(cuda.bindings, "nvrtc", raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)
    with pytest.raises(jit.ToolchainError, match=r"cuda-bindings is required.*\[cu13\].*\[cu12\]"):
        NVRTCCompiler().loaded_identity()


# ---------------------------------------------------------------- _C loading (deep_gemm/_c_loader.py)

def _copy_package(dest_root, with_c: bool = False) -> str:
    """A copy of this package under dest_root/deep_gemm without its built _C (with_c: a corrupt one instead)."""
    import shutil
    src = os.path.dirname(deep_gemm.__file__)
    dst = os.path.join(dest_root, "deep_gemm")
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("_C.*", "__pycache__", "include"))
    if with_c:
        import importlib.machinery
        with open(os.path.join(dst, "_C" + importlib.machinery.EXTENSION_SUFFIXES[0]), "wb") as f:
            f.write(b"not an ELF file")
    return dst


def _import_error(cwd, extra_path=None) -> str:
    """The last line of what `import deep_gemm` prints in a child process started in `cwd`."""
    return _import_stderr(cwd, extra_path).strip().splitlines()[-1]


def _import_stderr(cwd, extra_path=None) -> str:
    import subprocess
    # NOTES: not the PYTHONSAFEPATH conftest.py sets when the checkout has no _C: the child must see its cwd first.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    if extra_path:
        env["PYTHONPATH"] = extra_path
    # This checkout's editable install resolves deep_gemm._C through its own finder even for another copy of the
    # package; a regular install has no such finder, so the child drops it.
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'Editable' not in repr(f)]; "
            "import deep_gemm")
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, "importing a package without a loadable _C must fail"
    return r.stderr


def test_unbuilt_checkout_shadowing_an_install_says_so(tmp_path):
    """Python started inside a checkout whose _C is not built, with an installed deep_gemm further down sys.path:
    the error names the shadowing and both ways out, not 'reinstall'."""
    checkout, site = tmp_path / "checkout", tmp_path / "site"
    checkout.mkdir(), site.mkdir()
    _copy_package(checkout)
    (checkout / "setup.py").write_text("")
    (checkout / "csrc").mkdir()
    (site / "deep_gemm").mkdir()
    (site / "deep_gemm" / "__init__.py").write_text("")
    line = _import_error(checkout, str(site))
    assert line.startswith("ImportError: deep_gemm was imported from the source checkout "), line
    assert str(checkout) in line and "_C is not built" in line, line
    assert f"shadows the installed deep_gemm at {os.path.realpath(site / 'deep_gemm')}" in line, line
    assert "run from another directory" in line and "`pip install -e .`" in line, line
    assert "reinstall" not in line, line
    assert "circular import" not in _import_stderr(checkout, str(site)), "the misleading original error is dropped"


def test_broken_or_missing_c_outside_a_checkout(tmp_path):
    """An installed package whose _C does not load names the file and the loader's own error; one without _C says
    it is missing."""
    broken, missing = tmp_path / "broken", tmp_path / "missing"
    broken.mkdir(), missing.mkdir()
    _copy_package(broken, with_c=True)
    line = _import_error(tmp_path, str(broken))
    assert "deep_gemm._C, the C++ launch module (" in line and str(broken) in line and "does not load" in line, line
    assert "pip install ." in line, line
    _copy_package(missing)
    line = _import_error(tmp_path, str(missing))
    assert f"deep_gemm._C, the C++ launch module, is missing from {missing / 'deep_gemm'}" in line, line


def test_c_loader_is_a_leaf():
    """The loader imports nothing of deep_gemm (any layer may use it) and finds the built _C of this checkout."""
    import ast
    from deep_gemm import _c_loader
    tree = ast.parse(open(_c_loader.__file__).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("deep_gemm"), ast.dump(node)
    assert _c_loader.load_c() is sys.modules["deep_gemm._C"]
    assert _c_loader._built_module(_c_loader.PACKAGE_DIR) is not None


def test_public_callables_have_docstrings():
    """help() on any public name says what it does (DeepGEMM's surface included: align, ceil_div, cublaslt_*)."""
    import inspect
    from deep_gemm import testing, utils
    missing = []
    for module in (deep_gemm, testing, utils):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not inspect.getdoc(obj):
                missing.append(f"{module.__name__}.{name}")
    assert missing == []


# ---------------------------------------------------------------- build record (setup.py -> deep_gemm/_build_info.py)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_setup(root):
    """setup.py's module namespace with its ROOT/BUILD_INFO pointed at `root`, without running setup()."""
    import ast
    source = open(os.path.join(REPO_ROOT, "setup.py")).read()
    tree = ast.parse(source)
    tree.body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call))]
    namespace = {"__file__": os.path.join(str(root), "setup.py")}
    exec(compile(tree, "setup.py", "exec"), namespace)
    return namespace



def test_build_info_is_recorded_from_git_and_kept_without_it(tmp_path):
    """In a checkout the build records HEAD and the dirty flag; built again without .git (as from an sdist) it keeps
    the record it was shipped with, and with no record at all it still names the version."""
    import subprocess
    root = tmp_path / "src"
    (root / "deep_gemm").mkdir(parents=True)
    (root / "deep_gemm" / "_version.py").write_text('__version__ = "1.2.3"\n')
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    setup = _load_setup(root)
    setup["write_build_info"]()
    record = {}
    exec(open(root / "deep_gemm" / "_build_info.py").read(), record)
    assert record["BUILD_INFO"]["commit"] == head and record["BUILD_INFO"]["dirty"] is False
    assert record["BUILD_INFO"]["version"] == "1.2.3"

    import shutil
    shutil.rmtree(root / ".git")
    setup["write_build_info"]()  # an sdist build: the shipped record stays
    kept = {}
    exec(open(root / "deep_gemm" / "_build_info.py").read(), kept)
    assert kept["BUILD_INFO"]["commit"] == head
    (root / "deep_gemm" / "_build_info.py").unlink()
    setup["write_build_info"]()
    fresh = {}
    exec(open(root / "deep_gemm" / "_build_info.py").read(), fresh)
    assert fresh["BUILD_INFO"]["commit"] is None and fresh["BUILD_INFO"]["version"] == "1.2.3"


def test_build_info_of_this_package():
    info = deep_gemm.build_info()
    assert set(info) == {"version", "commit", "dirty", "built_at"}
    assert info["version"] == deep_gemm.__version__
    assert "build_info" in deep_gemm.__all__
    ignored = open(os.path.join(REPO_ROOT, ".gitignore")).read().split()
    assert "deep_gemm/_build_info.py" in ignored
