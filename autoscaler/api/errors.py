"""How a pydantic validation error reads to a person: one line, the first problem and where."""

from pydantic import ValidationError


def first_error(error: ValidationError) -> str:
    """`field.path: message` of the first error (`message` alone when it is about the whole)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]
