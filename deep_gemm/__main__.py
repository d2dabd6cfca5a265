"""Command line: `python -m deep_gemm compile ...` fills the kernel cache ahead of time (no GPU needed, see
deep_gemm.warmup); `python -m deep_gemm --version`. The `doctor` and `cache` subcommands come from
deep_gemm/doctor.py when it is installed."""
import argparse
import importlib
import importlib.util
import json
import os
import sys
from typing import List, Optional, Tuple

from ._version import __version__
from .envs import read_env
from .warmup import ARCHS, FAMILIES, MODELS, WARMUP_FIELDS, MoEModel, warmup


class _Parser(argparse.ArgumentParser):
    """Every usage error is one line naming the argument, exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _read_shapes(path: str) -> List[Tuple[int, int, int]]:
    """'m n k' lines (commas allowed, # comments); raises ValueError naming the file and line."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise ValueError(f"--shapes {path}: cannot read it ({e.strerror or e})") from None
    shapes = []
    for lineno, line in enumerate(lines, 1):
        fields = line.split("#", 1)[0].replace(",", " ").split()
        if not fields:
            continue
        try:
            values = tuple(int(v) for v in fields)
        except ValueError:
            values = ()
        if len(values) != 3 or min(values) <= 0:
            raise ValueError(f"--shapes {path}:{lineno}: expected 'm n k' (positive integers), got "
                             f"{' '.join(fields)!r}")
        shapes.append(values)
    return shapes


def _load_model(name: str) -> MoEModel:
    if name in MODELS:
        return MODELS[name]
    try:
        with open(name) as f:
            return MoEModel(**json.load(f))
    except OSError as e:
        raise ValueError(f"--model {name}: neither a known model {sorted(MODELS)} nor a readable JSON file "
                         f"({e.strerror or e})") from None
    except (ValueError, TypeError) as e:
        raise ValueError(f"--model {name}: expected a JSON object with the fields of deep_gemm.warmup.MoEModel "
                         f"({e})") from None


def _shapes_of(args, families: List[str]) -> Tuple[dict, List[int]]:
    """The warmup arguments of the explicit shapes (--m/--n/--k and --shapes) for each requested family, and the
    m values given."""
    mnk = [(m, n, k) for m in args.m or [] for n in args.n or [] for k in args.k or []]
    for path in args.shapes or []:
        mnk += _read_shapes(path)
    nk = [(n, k) for n in args.n or [] for k in args.k or []] + [(n, k) for _, n, k in mnk]
    out = {}
    for family in families:
        if family in ("dense", "contiguous", "masked", "psum", "bmm") and not nk:
            continue
        if family == "dense":
            out["dense"] = sorted(set(nk))
        elif family == "contiguous":
            out["contiguous"] = [(n, k, args.groups) for n, k in sorted(set(nk))]
        elif family in ("masked", "psum", "bmm"):
            if not mnk:
                raise ValueError(f"--family {family}: its kernels depend on {'m' if family == 'bmm' else 'expected_m'}"
                                 f": give it as --m (with --n and --k) or in --shapes")
            expected = {}
            for m, n, k in mnk:
                expected.setdefault((n, k), set()).add(m)
            out[family] = [(n, k, args.groups, sorted(ms)) for (n, k), ms in sorted(expected.items())]
        elif family == "wgrad":
            out["wgrad"] = sorted({(m, n) for m, n, _ in mnk})
        elif family == "k_grouped":
            out["k_grouped"] = sorted({(m, n, args.groups) for m, n, _ in mnk})
        else:  # any other variant: its warm-up fields, from --m/--n/--k (or --shapes) and --groups
            fields = WARMUP_FIELDS[family]
            out[family] = sorted({tuple(dict(m=m, n=n, k=k, num_groups=args.groups)[f] for f in fields)
                                  for m, n, k in mnk})
    return out, sorted(set(args.m or []) | {m for m, _, _ in mnk})


# The most SMs a part of each arch can have (the full die: GH100 has 144 SMs, of which H100/H200 SXM enable 132;
# GB100 has 160, of which B200 enables 148). Without a GPU of the target arch, --num-sms is bounded by these.
MAX_NUM_SMS = {"sm_90a": 144, "sm_100a": 160}
_ARCH_MAJOR = {"sm_90a": 9, "sm_100a": 10}


def _num_sms_bound(arch: str) -> Tuple[int, str]:
    """The largest valid --num-sms for `arch` and what it is: this machine's GPU when it is of that arch, else the
    arch's full die."""
    import torch
    if torch.cuda.is_available():
        device = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(device)
        if props.major == _ARCH_MAJOR[arch]:
            return props.multi_processor_count, f"the SM count of this machine's {props.name}"
    return MAX_NUM_SMS[arch], f"the most SMs an {arch} GPU has"


def _check_compile_args(args) -> None:
    """Every usage error of `compile` that needs no work: raised before anything is compiled."""
    if args.jobs < 0:
        raise ValueError(f"--jobs must be >= 0 (0: one per CPU, at most 16), got {args.jobs}")
    if not args.model:
        for flag, value in (("--tp", args.tp), ("--max-tokens", args.max_tokens), ("--training", args.training)):
            if value:
                raise ValueError(f"{flag} describes a --model deployment; give --model too (or drop {flag})")
    if bool(args.n) != bool(args.k):
        given, missing = ("--n", "--k") if args.n else ("--k", "--n")
        raise ValueError(f"{missing}: needed with {given} (the explicit shapes are every --n x --k pair)")
    if args.m and not args.n and not args.shapes:
        raise ValueError("--n and --k: needed with --m (the explicit shapes are every --m x --n x --k triple)")
    if args.num_sms is not None:
        bound, what = _num_sms_bound(args.arch)
        if args.num_sms > bound:
            raise ValueError(f"--num-sms must be at most {bound} ({what}), got {args.num_sms}")
    if args.json:
        folder = os.path.dirname(os.path.abspath(args.json))
        if os.path.isdir(args.json):
            raise ValueError(f"--json {args.json}: is a directory, expected a file name")
        if not os.path.isdir(folder):
            raise ValueError(f"--json {args.json}: directory {folder} does not exist")
        if not os.access(folder, os.W_OK):
            raise ValueError(f"--json {args.json}: directory {folder} is not writable")


def summary_line(summary: dict) -> str:
    """The one line `compile` prints about a warm-up summary (deep_gemm.warmup's dict plus "cache_dir")."""
    kernels = summary["kernels"]
    by_family = ", ".join(f"{f} {n}" for f, n in summary["by_family"].items())
    return (f"{kernels} kernel{'' if kernels == 1 else 's'} ({by_family}): {summary['compiled']} compiled, "
            f"{summary['cached']} cached, {summary['waited']} built by another process, {len(summary['failures'])} "
            f"failed, {summary['seconds']:.1f} s (sm count {summary['num_sms']}, cache {summary['cache_dir']})")


def cmd_compile(args) -> int:
    _check_compile_args(args)
    families = list(FAMILIES) if "all" in args.family else list(dict.fromkeys(args.family))
    kwargs, ms = _shapes_of(args, families)
    if args.model:
        kwargs.update(model=_load_model(args.model), tp=args.tp or 1, max_tokens=args.max_tokens or 4096,
                      training=args.training)
    elif not kwargs:
        raise ValueError("nothing to compile: give --m/--n/--k lists, --shapes FILE or --model")
    if args.only_m and not ms:
        raise ValueError("--only-m needs m values (--m or --shapes)")
    summary = warmup(**kwargs, families=families, ms=ms if args.only_m else None, num_sms=args.num_sms,
                     arch=args.arch, jobs=args.jobs, progress=not args.quiet)
    summary["cache_dir"] = read_env().jit_cache_dir
    for failure in summary["failures"]:
        print(f"FAILED {failure['kernel']}: {failure['error'].splitlines()[0]}", file=sys.stderr)
    print(summary_line(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 1 if summary["failures"] else 0


def _add_compile(sub) -> None:
    c = sub.add_parser("compile", help="compile kernels into the cache ahead of time (no GPU needed)",
                       description="Compile every kernel the given shapes or model will load (see deep_gemm.warmup).")
    c.set_defaults(func=cmd_compile)
    c.add_argument("--arch", default="sm_90a", choices=ARCHS,
                   help="the GPU architecture to compile for: sm_90a (Hopper: H100, H200, default) or sm_100a "
                        "(Blackwell: B200)")
    c.add_argument("--num-sms", type=_positive_int, default=None,
                   help="SMs the calls will use (default: this machine's GPU, else 132 as on H100/H200 SXM, 148 as "
                        "on B200 for --arch sm_100a); at most this machine's GPU's count, or without a GPU of "
                        f"--arch the full die's ({', '.join(f'{a} {n}' for a, n in MAX_NUM_SMS.items())})")
    c.add_argument("--family", "--kind", action="append", choices=FAMILIES + ("all",), default=None,
                   help="kernel families to build (repeatable; default: dense for explicit shapes, all with --model)")
    c.add_argument("--m", type=_positive_int, nargs="*",
                   help="m values: rows (dense, contiguous, wgrad, k_grouped), expected_m (masked, psum) or rows per "
                        "batch (bmm)")
    c.add_argument("--n", type=_positive_int, nargs="*",
                   help="n values: output columns, the weight's rows (with --k; every --n x --k pair is a shape)")
    c.add_argument("--k", type=_positive_int, nargs="*",
                   help="k values: the reduction length, the weight's columns (with --n)")
    c.add_argument("--shapes", action="append", help="file of 'm n k' lines (# comments allowed)")
    c.add_argument("--groups", type=_positive_int, default=1,
                   help="number of groups (experts) of the grouped families, or batches of bmm")
    c.add_argument("--only-m", action="store_true",
                   help="dense/contiguous: only the kernels of the given m (default: every kernel any m can pick, "
                        "which the first call of an (n, k) precompiles anyway)")
    c.add_argument("--all-m", action="store_true", help=argparse.SUPPRESS)  # the default now; old scripts pass it
    c.add_argument("--model", help=f"a model description: one of {sorted(MODELS)} or a JSON file of "
                                   f"deep_gemm.warmup.MoEModel fields")
    # NOTES: the --model options default to None so that giving one without --model is an error, not ignored.
    c.add_argument("--tp", type=_positive_int, default=None, help="--model: tensor/expert-parallel degree (default 1)")
    c.add_argument("--max-tokens", type=_positive_int, default=None,
                   help="--model: one rank's largest decode batch (sets the masked GEMMs' expected_m range; "
                        "default 4096)")
    c.add_argument("--training", action="store_true", help="--model: also the backward GEMMs (dgrad, wgrad)")
    c.add_argument("--jobs", type=int, default=0, help="compile processes (default: CPUs, at most 16)")
    c.add_argument("--json", metavar="FILE", help="write the summary as JSON")
    c.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: `compile`, and `doctor` / `cache` when deep_gemm/doctor.py is installed."""
    parser = _Parser(prog="python -m deep_gemm")
    parser.add_argument("--version", action="version", version=f"deep_gemm {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    _add_compile(sub)
    if importlib.util.find_spec(f"{__package__}.doctor") is not None:  # `doctor` and `cache`, once installed
        importlib.import_module(f"{__package__}.doctor").add_commands(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd == "compile" and args.family is None:
        args.family = ["all"] if args.model else ["dense"]
    try:
        return args.func(args)
    except (ValueError, TypeError) as e:
        command = " ".join(c for c in (args.cmd, getattr(args, "cache_cmd", None)) if c)
        print(f"{parser.prog} {command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
