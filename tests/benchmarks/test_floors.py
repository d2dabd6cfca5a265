"""benchmarks/floors.py without a GPU: the command line refuses cleanly and the suites are the issues' shapes."""
import os
import subprocess
import sys

from benchmarks import floors

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_command_line_without_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.floors", "--help"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--suite" in proc.stdout
    run = subprocess.run([sys.executable, "-m", "benchmarks.floors", "--suite", "bmm"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "needs a CUDA GPU and Triton" in run.stderr


def test_suites_are_the_issues_shapes():
    bmm_shapes = {args for _, args in floors.SUITES["bmm"]}
    assert len(bmm_shapes) == 32 and {b for b, _, _, _ in bmm_shapes} == {16, 128}
    assert {(n, k) for _, _, n, k in bmm_shapes} == {(512, 128), (128, 512)}
    dense = [args for _, args in floors.SUITES["dense"]]
    assert len(dense) == 12 and all(m <= 128 and k % 128 == 0 for m, _, k in dense)
    assert (64, 7168, 16384) in dense  # the best small-m shape of issue 14's target 2
    assert [args for _, args in floors.SUITES["masked"]] == [(16, m, 4096, 7168) for m in (16, 32, 48)]
    decode = [args for _, args in floors.SUITES["decode"]]  # issue 33: m in 1..32 x DeepGEMM's six (n, k)
    assert len(decode) == 36 and {m for m, _, _ in decode} == {1, 2, 4, 8, 16, 32}
    assert {(n, k) for _, n, k in decode} == {(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384),
                                              (4096, 7168), (7168, 2048)}


def test_decode_few_columns_suite():
    cases = [args for _, args in floors.SUITES["decode_few_columns"]]
    assert {n for _, n, _ in cases} == {256, 576, 1536} and {k for _, _, k in cases} == {7168}
    assert {m for m, _, _ in cases} == set(floors.DECODE_MS) and len(cases) == 18


def test_masked_decode_is_issue_33s_grid():
    cases = [args for _, args in floors.SUITES["masked_decode"]]
    assert len(cases) == 80 and {g for g, _, _, _, _ in cases} == {8, 32, 64, 256}
    assert {m for _, m, _, _, _ in cases} == {1, 4, 8, 16, 32} and {s for *_, s in cases} == {False, True}
    assert {(n, k) for _, _, n, k, _ in cases} == {(4096, 7168), (7168, 2048)}


def test_summary_geomeans():
    rows = [dict(suite="decode", write=dict(ours_us=2.0, floor_us=1.0, peer_us=4.0)),
            dict(suite="decode", write=dict(ours_us=8.0, floor_us=4.0, peer_us=4.0))]
    entry = floors.summarise(rows, ("write",))["decode/write"]
    assert entry["cases"] == 2 and abs(entry["ours_over_floor"]["geomean"] - 2.0) < 1e-12
    assert abs(entry["peer_over_ours"]["geomean"] - 1.0) < 1e-12 and entry["peer_over_ours"]["min"] == 0.5


def test_cast_suites_are_issue_35s_grid():
    for suite, kind in (("cast", "per_token"), ("cast_block", "per_block")):
        cases = [args for _, args in floors.SUITES[suite]]
        assert len(cases) == 15 and {k for k, _, _ in cases} == {kind}
        assert {m for _, m, _ in cases} == {64, 512, 4096, 32768, 65536}
        assert {n for _, _, n in cases} == {2048, 4096, 7168}
    assert {args[0] for _, args in floors.SUITES["cast_variants"]} == {"per_token", "per_block", "per_channel"}


def test_summary_reports_the_torch_path():
    rows = [dict(suite="cast", write=dict(ours_us=2.0, floor_us=1.8, torch_us=20.0)),
            dict(suite="cast", write=dict(ours_us=4.0, floor_us=4.0, torch_us=20.0))]
    entry = floors.summarise(rows, ("write",))["cast/write"]
    assert abs(entry["torch_over_ours"]["geomean"] - (10.0 * 5.0) ** 0.5) < 1e-9
    assert entry["ours_over_floor"]["max"] == 2.0 / 1.8
