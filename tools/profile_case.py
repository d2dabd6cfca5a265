"""Run one GEMM case a few times, with the heuristic's config or a forced one: the process to put under Nsight
Compute or compute-sanitizer (GPU machine).

Usage: python -m tools.profile_case --family FAMILY CASE
         [--config BMxBN[:STAGES][:mcA|mcB]] [--calls N] [--ncu REPORT [--ncu-set full]]
  FAMILY, CASE and --config as in tools/tune.py. Prints the config and, where the family has a reference, calc_diff.
  --ncu REPORT reruns this command under `ncu -k regex:<kernel> --set <set> -o REPORT` (profiling only the GEMM
  kernel, not the input casts); without it, wrap the command yourself, e.g.
  compute-sanitizer --tool memcheck python -m tools.profile_case --family dense 1024x4096x1024 --config 256x128:mcA
"""
import argparse
import contextlib
import subprocess
import sys

from tools.tune import FAMILIES, WGRAD_KERNEL, describe, make_problem, parse_case, parse_config_spec


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("case", metavar="CASE")
    p.add_argument("--family", required=True, choices=FAMILIES)
    p.add_argument("--config", help="BMxBN[:STAGES][:mcA|mcB] instead of the heuristic's pick")
    p.add_argument("--skew", action="store_true", help="contiguous/masked/psum: skewed expert loads")
    p.add_argument("--calls", type=int, default=3, help="launches (default 3)")
    p.add_argument("--ncu", metavar="REPORT", help="run under Nsight Compute, writing REPORT.ncu-rep")
    p.add_argument("--ncu-set", default="full", help="ncu --set (default full)")
    return p


def main() -> None:
    p = parser()
    args = p.parse_args()
    try:
        parse_case(args.family, args.case)
        spec = parse_config_spec(args.config) if args.config else None
    except ValueError as e:
        p.error(str(e))
    if args.ncu:
        kernel = "fp8_wgrad_gemm" if args.family in WGRAD_KERNEL else "fp8_gemm_1d2d"
        # NOTES: --clock-control none: ncu otherwise locks the clocks to base, so its durations are not the ones the
        # benchmarks measure (and METHOD.md asks to leave the device's clocks alone).
        cmd = ["ncu", "-f", "--clock-control", "none", "-k", f"regex:{kernel}", "--set", args.ncu_set, "-o", args.ncu,
               sys.executable, "-m",
               "tools.profile_case", args.case, "--family", args.family, "--calls", str(args.calls)]
        cmd += (["--config", args.config] if args.config else []) + (["--skew"] if args.skew else [])
        print(" ".join(cmd), flush=True)
        sys.exit(subprocess.call(cmd))
    import torch

    from deep_gemm.testing import forced_config
    problem = make_problem(args.family, args.case, skew=args.skew)
    cfg = problem.make_config(*spec) if spec else problem.picked
    diff = None
    with forced_config(cfg) if spec else contextlib.nullcontext():
        for _ in range(args.calls):
            diff = problem.check() if problem.check else problem.fn()
        torch.cuda.synchronize()
    print(f"{problem.label}: {describe(cfg)}" + (f" diff {diff:.1e}" if diff is not None else ""), flush=True)


if __name__ == "__main__":
    main()
