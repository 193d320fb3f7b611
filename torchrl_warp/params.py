"""Environment parameters, each declared once: default (its type), range, choices, doc.

A :class:`Param` says everything the checks, the docs and the memory estimate need,
so every environment gets the same checks: unknown names, wrong types, NaN and
infinite floats (and floats that float32, the state's dtype, cannot hold), ints that
do not fit the kernels' int32, values outside the range, strings outside the choices.
NumPy scalars are taken where Python's are (``np.int64(4)`` for an int, ``np.float32``
for a float), and converted. ``table`` counts what a parameter allocates (a lookup
table of ``value`` entries) in the memory estimate before anything is allocated.

Examples:
    >>> spec = {"gravity": Param(9.8, "gravitational acceleration", gt=0),
    ...         "max_steps": Param(500, "steps before truncation", ge=1)}
    >>> check_params("CartPoleEnv", spec, {"max_steps": 200})
    {'gravity': 9.8, 'max_steps': 200}
    >>> check_params("CartPoleEnv", spec, {"gravity": float("nan")})
    Traceback (most recent call last):
    ...
    ValueError: CartPoleEnv: parameter 'gravity' must be a finite float, got nan
    >>> check_params("CartPoleEnv", spec, {"gravity": 1e39})
    Traceback (most recent call last):
    ...
    ValueError: CartPoleEnv: parameter 'gravity' must be a float that float32 holds, in [-3.4028234663852886e+38, 3.4028234663852886e+38] (the state is float32), got 1e+39
    >>> print(markdown_table(spec))
    | parameter | default | allowed | meaning |
    |---|---|---|---|
    | `gravity` | `9.8` | float > 0 | gravitational acceleration |
    | `max_steps` | `500` | int in [1, 2147483647] | steps before truncation |
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

__all__ = ["Param", "check_params", "table_bytes", "markdown_table", "INT32_MAX", "FLOAT32_MAX"]

#: the largest int a parameter may take: kernels compare them with int32 counters
INT32_MAX = 2**31 - 1
#: the largest magnitude a float parameter may take: the state is float32, where a larger
#: value is infinite (``numpy.finfo(numpy.float32).max``)
FLOAT32_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class Param:
    """One environment parameter.

    Args:
        default: the default value; its type (bool, int, float or str) is the parameter's.
        doc: one line saying what it means (the docs' parameter tables show it).
        ge: a lower bound, ``value >= ge``.
        gt: a lower bound, ``value > gt``.
        le: an upper bound, ``value <= le``.
        lt: an upper bound, ``value < lt``.
        choices: the values a str parameter may take.
        table: bytes the env allocates per unit of the value (a lookup table of
            ``value`` float32 entries: 4), counted in the memory estimate.

    Besides the bounds given, ints always lie in ``[-2**31 + 1, 2**31 - 1]`` and floats are
    always finite, in float32 too (``|value| <= FLOAT32_MAX``).
    """

    default: bool | int | float | str
    doc: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple = ()
    table: int = 0

    @property
    def kind(self) -> type:
        return type(self.default)

    def allowed(self) -> str:
        """The allowed values in words: ``"float > 0"``, ``"int in [1, 100]"``, ``"one of 'a', 'b'"``."""
        kind = self.kind
        if kind is bool:
            return "bool"
        if kind is str:
            return f"one of {', '.join(map(repr, self.choices))}" if self.choices else "str"
        low = self.ge if self.gt is None else self.gt
        high = self.le if self.lt is None else self.lt
        if kind is int:
            low = -INT32_MAX if low is None else low
            high = INT32_MAX if high is None else high
        if low is not None and high is not None:
            left = "(" if self.gt is not None else "["
            right = ")" if self.lt is not None else "]"
            return f"{kind.__name__} in {left}{_num(low)}, {_num(high)}{right}"
        if low is not None:
            return f"{kind.__name__} {'>' if self.gt is not None else '>='} {_num(low)}"
        if high is not None:
            return f"{kind.__name__} {'<' if self.lt is not None else '<='} {_num(high)}"
        return f"finite {kind.__name__}"

    def check(self, env_name: str, name: str, value):
        """``value`` converted to the parameter's type; ``TypeError``/``ValueError`` naming it."""
        kind = self.kind
        where = f"{env_name}: parameter {name!r}"
        if kind is bool:
            ok = isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        elif kind is float:
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            article = "an" if kind is int else "a"
            raise TypeError(f"{where} must be {article} {kind.__name__}, got {value!r} ({type(value).__name__})")
        value = kind(value)
        if kind is str:
            if self.choices and value not in self.choices:
                raise ValueError(f"{where} must be one of {', '.join(map(repr, self.choices))}, got {value!r}")
            return value
        if kind is bool:
            return value
        if kind is float and not math.isfinite(value):
            raise ValueError(f"{where} must be a finite float, got {value!r}")
        if kind is float and abs(value) > FLOAT32_MAX:
            raise ValueError(f"{where} must be a float that float32 holds, in [{-FLOAT32_MAX!r}, {FLOAT32_MAX!r}] "
                             f"(the state is float32), got {value!r}")
        in_range = (
            (self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt)
            and (kind is not int or -INT32_MAX <= value <= INT32_MAX)
        )
        if not in_range:
            allowed = self.allowed()
            raise ValueError(f"{where} must be {'an' if allowed.startswith('int') else 'a'} {allowed}, got {value!r}")
        return value


def _num(x) -> str:
    return repr(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


def check_params(env_name: str, spec: dict[str, Param], given: dict) -> dict:
    """Every parameter's value (``given`` over the defaults), each checked against ``spec``."""
    unknown = sorted(set(given) - set(spec))
    if unknown:
        raise TypeError(
            f"{env_name} got unknown parameter(s) {', '.join(map(repr, unknown))}; "
            f"valid parameters: {', '.join(sorted(spec))}"
        )
    return {name: p.check(env_name, name, given[name]) if name in given else p.default
            for name, p in spec.items()}


def table_bytes(spec: dict[str, Param], values: dict) -> int:
    """Bytes of the lookup tables that ``values`` make the env allocate (``Param.table``)."""
    return sum(p.table * max(int(values[name]), 0) for name, p in spec.items() if p.table)


def markdown_table(spec: dict[str, Param]) -> str:
    """The parameters as a Markdown table (what the docs show for each env)."""
    rows = ["| parameter | default | allowed | meaning |", "|---|---|---|---|"]
    rows += [f"| `{name}` | `{p.default!r}` | {p.allowed()} | {p.doc} |" for name, p in spec.items()]
    return "\n".join(rows)
