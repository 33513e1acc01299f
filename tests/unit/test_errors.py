"""One line per validation error, the same in every command and Event."""

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from autoscaler.api.errors import first_error


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    count: int = 1


class Outer(BaseModel):
    inner: Inner = Inner()

    @model_validator(mode="after")
    def _positive(self) -> "Outer":
        if self.inner.count < 0:
            raise ValueError("count must not be negative")
        return self


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"inner": {"cuont": 2}}, "inner.cuont: Extra inputs are not permitted"),
        (
            {"inner": {"count": "x"}},
            "inner.count: Input should be a valid integer, unable to parse string as an integer",
        ),
        ({"inner": {"count": -1}}, "Value error, count must not be negative"),  # about the whole
    ],
)
def test_the_first_error_with_where_it_is(data: dict[str, object], expected: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Outer.model_validate(data)
    assert first_error(caught.value) == expected
