"""How a bad input reads to a person: one line, the first problem and where."""

import yaml
from pydantic import ValidationError


def first_error(error: ValidationError) -> str:
    """`field.path: message` of the first error (`message` alone when it is about the whole)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]


def yaml_problem(error: yaml.YAMLError) -> str:
    """`not valid YAML at line L, column C: problem`: PyYAML's own text spans several lines."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(error, "problem", None) or "invalid YAML"
    return f"not valid YAML{where}: {problem}"
