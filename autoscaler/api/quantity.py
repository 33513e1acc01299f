"""Kubernetes resource quantities ("500m", "4", "1Gi", "250u", "1e3") as floats.

The grammar is apimachinery's (`k8s.io/apimachinery/pkg/api/resource`, `quantity.go`): a signed
decimal number, then a binary suffix (Ki..Ei), a decimal one (n, u, m, none, k, M, G, T, P, E)
or a decimal exponent (`e`/`E` and a signed integer).
"""

import re
from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal

_SUFFIXES = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}  # fmt: skip
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)


def parse_quantity(value: str | int | float) -> float:
    return float(exact_quantity(value))


def exact_quantity(value: str | int | float) -> Decimal:
    """The quantity's exact value: `300m` and `0.3` are equal, as they are to the API server."""
    if isinstance(value, int | float):
        return Decimal(value)
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = match.groups()
    return Decimal(number) * _SUFFIXES[suffix or ""]


def parse_resources(resources: Mapping[str, str | int | float]) -> dict[str, float]:
    return {name: parse_quantity(value) for name, value in resources.items()}


_DECIMAL_SUFFIXES = (
    (18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"), (0, ""),
    (-3, "m"), (-6, "u"), (-9, "n"),
)  # fmt: skip
_BINARY_SUFFIXES = (
    (60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki"),
)  # fmt: skip


def format_quantity(value: Decimal, *, binary: bool = False) -> str:
    """apimachinery's canonical text: the largest suffix that keeps the number whole (binary
    suffixes when `binary` and the value is a whole multiple of 1024, else decimal ones)."""
    if binary and value == value.to_integral_value() and value:
        for exponent, suffix in _BINARY_SUFFIXES:
            if value % (2**exponent) == 0:
                return f"{int(value / 2**exponent)}{suffix}"
    for exponent, suffix in _DECIMAL_SUFFIXES:
        scaled = value.scaleb(-exponent)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    return f"{int(value.scaleb(9).to_integral_value(rounding=ROUND_CEILING))}n"  # as Go rounds up


def is_binary_quantity(value: str | int | float) -> bool:
    return isinstance(value, str) and value.strip().endswith("i")
