"""Kubernetes resource quantities ("500m", "4", "1Gi", "250u", "1e3") as floats.

The grammar is apimachinery's (`k8s.io/apimachinery/pkg/api/resource`, `quantity.go`): a signed
decimal number, then a binary suffix (Ki..Ei), a decimal one (n, u, m, none, k, M, G, T, P, E)
or a decimal exponent (`e`/`E` and a signed integer).
"""

import re
from collections.abc import Mapping

_SUFFIXES = {
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0,
    "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)


def parse_quantity(value: str | int | float) -> float:
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = match.groups()
    return float(number) * _SUFFIXES[suffix or ""]


def parse_resources(resources: Mapping[str, str | int | float]) -> dict[str, float]:
    return {name: parse_quantity(value) for name, value in resources.items()}
