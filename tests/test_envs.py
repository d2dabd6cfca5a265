"""deep_gemm/envs.py: the one table of DG_* variables (the older parsing tests are in tests/test_package.py)."""
import dataclasses
import os
import re

import pytest

import deep_gemm
from deep_gemm import envs

PACKAGE = os.path.dirname(os.path.abspath(deep_gemm.__file__))


@pytest.fixture
def clean_env(monkeypatch):
    for v in envs.VARIABLES:
        monkeypatch.delenv(v.name, raising=False)
    return monkeypatch


def test_table_matches_env_fields():
    assert [v.field for v in envs.VARIABLES] == [f.name for f in dataclasses.fields(envs.Env)]
    assert len({v.name for v in envs.VARIABLES}) == len(envs.VARIABLES)
    for v in envs.VARIABLES:
        assert v.name.startswith("DG_") and v.effect, v.name


def test_defaults(clean_env):
    env = envs.read_env()
    for v in envs.VARIABLES:
        if v.is_flag:
            assert getattr(env, v.field) is (v.default == "1"), v.name
    assert env.jit_cache_dir == os.path.expanduser("~/.deep_gemm")


@pytest.mark.parametrize("var", [v for v in envs.VARIABLES if v.is_flag], ids=lambda v: v.name)
def test_each_flag_sets_its_field_only(clean_env, var):
    clean_env.setenv(var.name, "0" if var.default == "1" else "1")
    env = envs.read_env()
    clean_env.delenv(var.name)
    default = envs.read_env()
    changed = [f.name for f in dataclasses.fields(envs.Env) if getattr(env, f.name) != getattr(default, f.name)]
    assert changed == [var.field]


def test_every_dg_variable_of_the_library_is_in_the_table():
    """One module reads them all: any DG_* name in the library's source must be in VARIABLES."""
    names = set()
    for dirpath, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py") and f != "testing.py":  # testing.py: DeepGEMM's test-helper variable
                with open(os.path.join(dirpath, f)) as fh:
                    names |= set(re.findall(r"\bDG_[A-Z0-9_]*[A-Z0-9]\b", fh.read()))
    assert names and names <= {v.name for v in envs.VARIABLES}
