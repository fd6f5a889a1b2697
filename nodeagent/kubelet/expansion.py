"""`$(VAR)` references in env values, command and args, as Kubernetes expands them.

The syntax of `third_party/forked/golang/expansion`: `$(NAME)` becomes NAME's value when one of the
contexts has it and stays as written when none does; `$$` is an escaped `$`; any other `$` passes through.
Nested or unterminated references are left alone, and no other syntax (`${X}`, `$X`, backslashes) means
anything, so shell text in a command survives untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

Lookup = Callable[[str], str]


def mapping_for(*contexts: Mapping[str, str]) -> Lookup:
    """A lookup over the contexts in order; an unknown name maps to its own `$(NAME)` text."""
    def lookup(name: str) -> str:
        for ctx in contexts:
            if name in ctx:
                return ctx[name]
        return f"$({name})"
    return lookup


def expand(text: str, mapping: Lookup) -> str:
    """Replace every `$(NAME)` in `text` through `mapping`, honouring `$$` escapes."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    n = len(text)
    while cursor < n:
        if text[cursor] == "$" and cursor + 1 < n:
            out.append(text[checkpoint:cursor])
            read, is_var, advance = _read_name(text, cursor + 1)
            out.append(mapping(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


def _read_name(text: str, start: int) -> tuple[str, bool, int]:
    """(what was read, whether it names a variable, characters consumed after the `$`)."""
    first = text[start]
    if first == "$":
        return "$", False, 1  # `$$`: one literal `$`
    if first == "(":
        close = text.find(")", start + 1)
        if close != -1:
            return text[start + 1:close], True, close - start + 1
        return "$(", False, 1  # unterminated: keep `$(` and read on after it
    return "$" + first, False, 1


def expand_all(values: list[str], env: Mapping[str, str]) -> list[str]:
    """Command or args expanded against the container's final environment (ExpandContainerCommandAndArgs)."""
    mapping = mapping_for(env)
    return [expand(v, mapping) for v in values]
