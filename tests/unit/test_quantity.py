"""Resource quantities parsed as Kubernetes parses them, checked against the `kubernetes` client."""

import random

import pytest
from kubernetes.utils import parse_quantity as kubernetes_parse

from autoscaler.api.quantity import parse_quantity

SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


def quantities(count: int, seed: int = 0) -> list[str]:
    """Numbers of every written shape (signs, fractions, exponents) with every suffix."""
    draw = random.Random(seed)
    found = []
    for _ in range(count):
        whole = str(draw.randint(0, 5000))
        number = draw.choice([whole, f"{whole}.{draw.randint(0, 999)}", f".{draw.randint(1, 99)}"])
        sign = draw.choice(["", "", "+", "-"])
        if draw.random() < 0.2:
            found.append(f"{sign}{number}{draw.choice('eE')}{draw.randint(-9, 9)}")
        else:
            found.append(f"{sign}{number}{draw.choice(SUFFIXES)}")
    return found


@pytest.mark.parametrize("text", quantities(400))
def test_every_quantity_matches_the_kubernetes_client(text: str) -> None:
    assert parse_quantity(text) == pytest.approx(float(kubernetes_parse(text)), rel=1e-12)


@pytest.mark.parametrize("text", ["", "1x", "Mi", "1.2.3", "--1", "1 Gi", "1e", "0x10"])
def test_what_is_not_a_quantity_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(text)
