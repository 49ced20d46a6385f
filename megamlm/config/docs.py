"""Reading a dataclass's own description: the string under each field (its help text) and Literal choices."""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from typing import Literal, get_args, get_origin


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The string literal under each field of a dataclass (attribute docstrings); read once per class. A generated
    class (the model section) carries them as ``__field_docs__``."""
    if "__field_docs__" in vars(cls):
        return dict(cls.__field_docs__)
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def choices_of(annotation) -> tuple | None:
    """The allowed values of a Literal field (also inside ``X | None``), else None."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    for arg in get_args(annotation):
        if get_origin(arg) is Literal:
            return get_args(arg)
    return None


def scalar_type(annotation) -> type:
    """The type a flag's value is parsed as: the Literal's values' type, or the one non-None type of a union."""
    choices = choices_of(annotation)
    if choices is not None:
        return type(choices[0])
    args = [a for a in get_args(annotation) if a is not type(None)]
    return args[0] if args else annotation
