"""Parameters are declared once (``Param``) and every env gets the same checks from it."""
import math
import re
from pathlib import Path

import numpy as np
import pytest

from all_envs import ENV_CLASSES
from torchrl_warp import Param, WarpEnv
from torchrl_warp.envs.mpe import MPEScenario, common_parameters
from torchrl_warp.params import INT32_MAX, check_params, markdown_table

DOCS = Path(__file__).resolve().parents[1] / "docs" / "environments.md"


def params_of(kind):
    return [(cls, name) for cls in ENV_CLASSES for name, p in cls.parameters.items() if p.kind is kind]


def ids(cases):
    return [f"{cls.__name__}.{name}" for cls, name in cases]


@pytest.mark.parametrize("cls", ENV_CLASSES, ids=lambda c: c.__name__)
def test_every_parameter_is_declared_with_a_doc_and_a_valid_default(cls):
    assert cls.parameters, cls
    for name, p in cls.parameters.items():
        assert isinstance(p, Param), name
        assert p.doc and len(p.doc) < 100, name
        assert p.check(cls.__name__, name, p.default) == p.default, name
    assert cls.defaults == {name: p.default for name, p in cls.parameters.items()}


FLOATS = params_of(float)


@pytest.mark.parametrize("cls, name", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinite_floats_are_refused(cls, name, bad):
    with pytest.raises(ValueError, match=f"parameter '{name}' must be a finite float, got {bad}"):
        cls(num_envs=1, **{name: bad})


INTS = params_of(int)


@pytest.mark.parametrize("cls, name", INTS, ids=ids(INTS))
@pytest.mark.parametrize("bad", [2**31, 2**40, 2**64, -(2**31)])
def test_ints_that_do_not_fit_the_kernels_are_refused(cls, name, bad):
    with pytest.raises(ValueError, match=f"parameter '{name}' must be an int in"):
        cls(num_envs=1, **{name: bad})


BOUNDED_BELOW = [(cls, name) for cls, name in INTS + FLOATS
                 if cls.parameters[name].gt is not None or cls.parameters[name].ge is not None]


@pytest.mark.parametrize("cls, name", BOUNDED_BELOW, ids=ids(BOUNDED_BELOW))
def test_values_below_the_declared_range_are_refused(cls, name):
    p = cls.parameters[name]
    low = p.gt if p.gt is not None else p.ge
    bad = low if p.gt is not None else low - 1
    with pytest.raises(ValueError, match=f"parameter '{name}' must be"):
        cls(num_envs=1, **{name: p.kind(bad)})


BOOLS = params_of(bool)


@pytest.mark.parametrize("cls, name", BOOLS, ids=ids(BOOLS))
@pytest.mark.parametrize("bad", [1, 0, "yes", None])
def test_bools_take_only_bools(cls, name, bad):
    with pytest.raises(TypeError, match=f"parameter '{name}' must be a bool"):
        cls(num_envs=1, **{name: bad})


def test_types_choices_and_unknown_names():
    spec = {"k": Param(3, "k", ge=1), "x": Param(0.5, "x"), "mode": Param("a", "mode", choices=("a", "b"))}
    assert check_params("E", spec, {"x": 2}) == {"k": 3, "x": 2.0, "mode": "a"}
    with pytest.raises(TypeError, match="parameter 'k' must be an int, got 4.0"):
        check_params("E", spec, {"k": 4.0})
    with pytest.raises(TypeError, match="parameter 'x' must be a float, got True"):
        check_params("E", spec, {"x": True})
    with pytest.raises(ValueError, match="parameter 'mode' must be one of 'a', 'b', got 'c'"):
        check_params("E", spec, {"mode": "c"})
    with pytest.raises(TypeError, match="unknown parameter.*'kk'.*valid parameters: k, mode, x"):
        check_params("E", spec, {"kk": 1})
    assert Param(1.0, "", gt=0, le=2).allowed() == "float in (0, 2]"
    assert Param(1, "", ge=1).allowed() == f"int in [1, {INT32_MAX}]"


def test_lookup_tables_count_in_the_memory_estimate(monkeypatch):
    """A parameter that sizes a table (``Param.table``) is in the estimate before any allocation."""
    from torchrl_warp import checks
    from torchrl_warp.envs import TagEnv

    monkeypatch.setattr(checks, "_free_bytes", lambda device: 100_000)  # 100 kB free
    with pytest.raises(MemoryError, match=r"TagEnv\(num_envs=1\) needs about .* \(lookup tables"):
        TagEnv(num_envs=1, num_acceleration_levels=60_000)


def test_subclasses_that_declare_defaults_the_old_way_are_told_how():
    with pytest.raises(TypeError, match="declare parameters as `parameters = "):
        type("Old", (WarpEnv,), {"defaults": {"a": 1}})


@pytest.mark.parametrize("cls", ENV_CLASSES, ids=lambda c: c.__name__)
def test_the_docs_list_every_parameter_as_declared(cls):
    """docs/environments.md carries each env's generated table, so it cannot drift."""
    if issubclass(cls, MPEScenario):  # the parameters every scenario shares are documented once
        assert markdown_table(common_parameters()) in DOCS.read_text(), (
            "docs/environments.md lacks the MPE scenarios' common parameter table: paste "
            "torchrl_warp.params.markdown_table(torchrl_warp.envs.mpe.common_parameters())")
        assert markdown_table(cls.scenario_parameters()) in DOCS.read_text(), (
            f"docs/environments.md lacks {cls.__name__}'s parameter table: paste "
            f"torchrl_warp.params.markdown_table({cls.__name__}.scenario_parameters())")
        return
    assert markdown_table(cls.parameters) in DOCS.read_text(), (
        f"docs/environments.md lacks {cls.__name__}'s parameter table: paste "
        f"torchrl_warp.params.markdown_table({cls.__name__}.parameters)")


@pytest.mark.parametrize("cls, name", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("bad", [1e39, -1e39, 3.5e38])
def test_floats_float32_cannot_hold_are_refused(cls, name, bad):
    """Finite in Python, infinite in the float32 state (``grid_length=1e39``): refused with the
    parameter, the range and the value."""
    with pytest.raises(ValueError, match=re.escape(f"parameter '{name}' must be a float that float32 holds, in "
                                                   f"[-3.4028234663852886e+38, 3.4028234663852886e+38] "
                                                   f"(the state is float32), got {bad!r}")):
        cls(num_envs=1, **{name: bad})


def test_the_largest_float32_is_taken():
    from torchrl_warp.params import FLOAT32_MAX

    spec = {"x": Param(0.5, "x")}
    assert FLOAT32_MAX == float(np.finfo(np.float32).max)
    assert check_params("E", spec, {"x": FLOAT32_MAX}) == {"x": FLOAT32_MAX}
    assert check_params("E", spec, {"x": -FLOAT32_MAX}) == {"x": -FLOAT32_MAX}


@pytest.mark.parametrize("cls", ENV_CLASSES, ids=lambda c: c.__name__)
def test_numpy_scalars_are_taken_where_python_ones_are(cls):
    """``np.int64(4)`` for an int parameter, ``np.float32``/``np.float64`` for a float one,
    converted to the Python type (the kernels' arguments)."""
    given = {}
    for name, p in cls.parameters.items():
        if p.kind is int:
            given[name] = np.int64(p.default) if p.default % 2 else np.int32(p.default)
        elif p.kind is float:
            given[name] = np.float64(p.default)
    checked = check_params(cls.__name__, cls.parameters, given)
    for name, value in given.items():
        assert type(checked[name]) is cls.parameters[name].kind and checked[name] == value, name
