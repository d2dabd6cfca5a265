"""One name per variant, everywhere: the warm-up and its CLI, the tuner, the benchmarks and the sanitizer driver list
their variants from the runtime's registry, and each has what it needs for every one of them, so that a new variant
cannot miss a tool (no GPU needed)."""
import inspect
import json

import pytest

import deep_gemm
from benchmarks import bench
from deep_gemm import runtime
from deep_gemm.warmup import FAMILIES as WARMUP_FAMILIES
from tools import gpu_check, tune

SM90_GEMMS = runtime.variants_on("sm_90a", gemm=True)


def test_the_registry_lists():
    assert SM90_GEMMS == ("dense", "contiguous", "masked", "psum", "bmm", "skip_head_mid", "dense_fp8_out",
                          "contiguous_fp8_out", "masked_fp8_out", "contiguous_swiglu", "masked_swiglu", "wgrad", "k_grouped", "bf16", "bf16_contiguous",
                          "bf16_masked", "einsum", "tf32_hc_prenorm")
    assert runtime.variants_on("sm_90a", gemm=False) == ("pack_ue8m0", "pack_ue8m0_k_grouped", "mqa_logits",
                                                          "paged_mqa_logits", "fp8_cast_per_token",
                                                          "fp8_cast_per_block", "fp8_cast_per_channel")
    assert runtime.variants_on("sm_100a", gemm=True) == ("dense", "contiguous", "masked", "dense_ue8m0",
                                                         "contiguous_ue8m0", "masked_ue8m0")
    assert [op.name.lower() for op in runtime.Op] == [v.name for v in runtime.VARIANTS]


def test_warmup_and_cli_families_are_the_registry_variants():
    warmed = [v.name for v in runtime.VARIANTS if v.warmup_fields is not None]
    assert WARMUP_FAMILIES == tuple(warmed) and set(warmed) == set(SM90_GEMMS)
    # Every variant warmed up under another's name exists and is warmed up itself.
    for v in runtime.VARIANTS:
        assert v.warmup_as is None or v.warmup_as in WARMUP_FAMILIES
    params = inspect.signature(deep_gemm.warmup).parameters
    assert [p for p in params if params[p].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD] == \
        ["dense", "contiguous", "masked", "psum", "wgrad", "k_grouped", "bmm"]  # the public signature, unchanged
    # The other variants' shapes are keyword arguments of their names (**shapes_of): each is taken.
    assert any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    for family in WARMUP_FAMILIES:
        assert deep_gemm.warmup(**{family: []}, num_sms=132, progress=False)["kernels"] == 0


def test_cli_family_choices_are_the_warmup_families(capsys):
    from deep_gemm.__main__ import main
    with pytest.raises(SystemExit):
        main(["compile", "--family", "no_such_variant", "--n", "256", "--k", "128"])
    err = capsys.readouterr().err
    assert all(f"'{name}'" in err for name in WARMUP_FAMILIES), err


def test_tuner_covers_every_gemm_variant():
    assert tune.FAMILIES == SM90_GEMMS
    assert set(tune.CASE_FORMS) == set(tune.DEFAULT_TESTS) == set(SM90_GEMMS)
    assert set(tune.WGRAD_KERNEL) < set(SM90_GEMMS)
    for family in (f for f, form in tune.CASE_FORMS.items() if form == tune.SPEC_FORM):
        small = tune._spec_of(family).small  # a variant without a problem maker tunes its SPECS problem
        assert tune.parse_case(family, json.dumps(small)) == small
    for family in SM90_GEMMS:
        with pytest.raises(ValueError, match=f"for --family {family}"):
            tune.parse_case(family, "not-a-case")


def test_benchmark_suites_cover_every_gemm_variant():
    assert bench.SUITES == SM90_GEMMS
    assert set(bench.SUITE_SECTION) == set(SM90_GEMMS)
    # Every suite has a runner (its section's), every section but the SPECS-driven one has a suite of its own, and a
    # variant without one runs its tests/gemm_cases.py problems.
    assert set(bench.SUITE_SECTION.values()) <= {key for key, _ in bench.SECTIONS}
    assert set(bench.SUITE_SECTION.values()) | {"spec"} == {key for key, _ in bench.SECTIONS}
    for suite in (s for s, section in bench.SUITE_SECTION.items() if section == "spec"):
        spec, problems = bench.spec_problems(suite)
        assert len(problems) == 1 + bench.SPEC_SAMPLES and problems[0] == spec.small
    assert bench.parse_args(["--suite", "psum", "bmm"]).suite == ["psum", "bmm"]


def test_sanitizer_driver_covers_every_variant():
    assert gpu_check.FAMILIES == runtime.variants_on("sm_90a")
    assert set(gpu_check.PROBLEMS) == set(gpu_check.BUILDERS) == set(gpu_check.FAMILIES)
    assert all(gpu_check.PROBLEMS[name] for name in gpu_check.FAMILIES)
    assert gpu_check.parser().parse_args(["--driver"]).families == list(gpu_check.FAMILIES)
