"""`python -m deep_gemm doctor`: what this installation sees (versions, driver, GPUs, launch path, kernel cache,
DG_* variables); `python -m deep_gemm cache ls|clear|prune`: the on-disk kernel cache.

`add_commands` registers both on the command line's subparsers. Every doctor probe reports why it failed instead of
raising, so the report works on a machine without a GPU, a driver or a compiler.
"""
import argparse
import importlib.metadata
import json
import os
import platform
import re
import sys
import time
from typing import Callable, List, Optional

from ._version import __version__
from .envs import VARIABLES, read_env
from .jit.cache import Entry, KernelCache, prune_plan
from .jit.compiler import NVCCCompiler, get_compiler
from .jit.runtime import check
from .runtime import get_launch_path


def _probe(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except Exception as e:  # a probe reports, never crashes the report
        return {"error": f"{type(e).__name__}: {e}".strip()}


def _deep_gemm_version() -> str:
    return __version__


def _torch_version() -> str:
    import torch
    return f"{torch.__version__} (CUDA {torch.version.cuda or 'none'})"


def _cuda_bindings_version() -> str:
    return importlib.metadata.version("cuda-bindings")


def _nvrtc_version() -> str:
    return get_compiler(False).loaded_identity()


def _nvcc_version() -> str:
    nvcc = NVCCCompiler(read_env().jit_nvcc_path)
    return f"{nvcc.identity()} ({nvcc.path})"


def _driver_version() -> str:
    from cuda.bindings import driver as cu
    version = check(cu.cuDriverGetVersion())
    return f"{version // 1000}.{version % 1000 // 10}"


def _gpus() -> list:
    from cuda.bindings import driver as cu
    err = cu.cuInit(0)[0]
    if err == cu.CUresult.CUDA_ERROR_NO_DEVICE:
        return []
    check(err)
    attr = cu.CUdevice_attribute
    gpus = []
    for i in range(check(cu.cuDeviceGetCount())):
        dev = check(cu.cuDeviceGet(i))
        major = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
        minor = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
        gpus.append(dict(index=i, name=check(cu.cuDeviceGetName(256, dev)).split(b"\0", 1)[0].decode(),
                         arch=f"sm_{major}{minor}",
                         sms=check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))))
    return gpus


def _launch_path() -> str:
    return get_launch_path()


def _cache_summary() -> dict:
    root = read_env().jit_cache_dir
    entries = KernelCache(root).entries()
    return dict(dir=root, entries=len(entries), bytes=sum(e.size for e in entries))


def _env_report() -> dict:
    """Every DG_* variable: the known ones with their value in effect (and whether it came from the environment),
    then any other DG_* set in the environment."""
    env = read_env()
    known = {v.name: dict(value=getattr(env, v.field), set=v.name in os.environ) for v in VARIABLES}
    others = {k: dict(value=os.environ[k], set=True, note="not read by the library")
              for k in sorted(os.environ) if k.startswith("DG_") and k not in known}
    return {**known, **others}


def report() -> dict:
    """The doctor's findings as one JSON-able dict; a failed probe is {"error": why}."""
    return dict(
        versions=dict(deep_gemm=_probe(_deep_gemm_version), python=f"{platform.python_version()} ({sys.executable})",
                      torch=_probe(_torch_version), cuda_bindings=_probe(_cuda_bindings_version),
                      nvrtc=_probe(_nvrtc_version), nvcc=_probe(_nvcc_version)),
        driver=_probe(_driver_version), gpus=_probe(_gpus), launch_path=_probe(_launch_path),
        cache=_probe(_cache_summary), env=_probe(_env_report))


def _text(value) -> str:
    if isinstance(value, dict) and set(value) == {"error"}:
        return f"unavailable: {value['error']}"
    return str(value)


def format_report(r: dict) -> str:
    lines = ["versions:"]
    lines += [f"  {name}: {_text(v)}" for name, v in r["versions"].items()]
    lines.append(f"driver: {_text(r['driver'])}")
    gpus = r["gpus"]
    if isinstance(gpus, list):
        lines.append("gpus:" if gpus else "gpus: no GPU")
        lines += [f"  {g['index']}: {g['name']} ({g['arch']}, {g['sms']} SMs)" for g in gpus]
    else:
        lines.append(f"gpus: {_text(gpus)}")
    lines.append(f"launch path: {_text(r['launch_path'])}")
    cache = r["cache"]
    lines.append(f"kernel cache: {cache['dir']}: {cache['entries']} entries, {_size(cache['bytes'])}"
                 if "dir" in cache else f"kernel cache: {_text(cache)}")
    env = r["env"]
    if "error" in env:
        lines.append(f"environment: {_text(env)}")
    else:
        lines.append("environment (DG_*; * = set here):")
        lines += [f"  {'*' if v['set'] else ' '} {k}={v['value']}" + (f"  ({v['note']})" if "note" in v else "")
                  for k, v in env.items()]
    return "\n".join(lines)


def cmd_doctor(args) -> int:
    r = report()
    print(json.dumps(r) if args.json else format_report(r))
    return 0


# ---- cache ----

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"(\d+(?:\.\d*)?)\s*([KMGT]?)(?:I?B)?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """"500M", "2G", "1.5GiB", "4096" -> bytes (K, M, G, T are powers of 1024)."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"--max-size: expected a size such as 4096, 500M or 2G, got {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def parse_days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not days >= 0:  # also NaN
        raise ValueError(f"--older-than: expected a number of days >= 0, got {text!r}")
    return days


def _size(n: float) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"


def _age(seconds: float) -> str:
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= span:
            return f"{seconds / span:.1f} {unit}"
    return f"{max(seconds, 0):.0f} s"


def _entry_json(e: Entry, now: float) -> dict:
    return dict(name=e.name, key=e.key, kernel=(e.meta or {}).get("kernel"), bytes=e.size,
                age_seconds=round(now - e.last_used, 1), path=e.path)


def _cache() -> KernelCache:
    return KernelCache(read_env().jit_cache_dir)


def cmd_cache_ls(args) -> int:
    cache, now = _cache(), time.time()
    entries = cache.entries()
    if args.json:
        print(json.dumps(dict(dir=os.path.dirname(cache.root), entries=[_entry_json(e, now) for e in entries])))
        return 0
    for e in entries:
        print(f"{e.name}.{e.key}  {_size(e.size)}  used {_age(now - e.last_used)} ago  "
              f"{(e.meta or {}).get('kernel', '(no meta.json)')}")
    print(f"{len(entries)} entries, {_size(sum(e.size for e in entries))} in {cache.root}")
    return 0


def _remove(cache: KernelCache, entries: List[Entry]) -> int:
    count = size = 0
    for e in entries:
        if cache.remove(e):  # False: another process removed it first
            count, size = count + 1, size + e.size
            print(f"removed {e.name}.{e.key} ({_size(e.size)})")
    print(f"removed {count} entries, {_size(size)} from {cache.root}")
    return 0


def cmd_cache_clear(args) -> int:
    cache = _cache()
    return _remove(cache, cache.entries())


def cmd_cache_prune(args) -> int:
    # A ValueError becomes one line with the program's prefix and exit status 2 (deep_gemm/__main__.py).
    if args.older_than is None and args.max_size is None:
        raise ValueError("give --older-than DAYS and/or --max-size SIZE")
    older_than_s: Optional[float] = None if args.older_than is None else parse_days(args.older_than) * 86400
    max_size: Optional[int] = None if args.max_size is None else parse_size(args.max_size)
    cache = _cache()
    return _remove(cache, prune_plan(cache.entries(), time.time(), older_than_s, max_size))


def add_commands(subparsers) -> None:
    """Register `doctor` and `cache ls|clear|prune` on an argparse subparsers object; each sets `func`
    (args -> exit code)."""
    doctor = subparsers.add_parser("doctor", help="report versions, driver, GPUs, launch path, cache and DG_* settings")
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.set_defaults(func=cmd_doctor)
    cache = subparsers.add_parser("cache", help="list, clear or prune the kernel cache (DG_JIT_CACHE_DIR)")
    sub = cache.add_subparsers(dest="cache_cmd", required=True)
    ls = sub.add_parser("ls", help="list entries: name, size, time since last use, kernel")
    ls.add_argument("--json", action="store_true", help="print one JSON object")
    ls.set_defaults(func=cmd_cache_ls)
    sub.add_parser("clear", help="remove every entry").set_defaults(func=cmd_cache_clear)
    prune = sub.add_parser("prune", help="remove entries unused for a while and/or the least recently used beyond a "
                                         "total size")
    # NOTES: strings checked in the handler, so that a bad value exits 2 with one line (not argparse's usage).
    prune.add_argument("--older-than", metavar="DAYS", help="remove entries not used for more than DAYS days")
    prune.add_argument("--max-size", metavar="SIZE", help="then remove the least recently used until the rest "
                                                          "fits in SIZE (e.g. 500M, 2G)")
    prune.set_defaults(func=cmd_cache_prune)
