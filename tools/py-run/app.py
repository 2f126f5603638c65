"""py.run: runs the model's Python source inside bx's sandbox (componentize-py).

The code gets what it printed and the value of its last line back, bounded; an
exception is the call's failure with its traceback. It reaches files only through the
preopens the host gives the call (exactly the paths of `reads` and `writes`), and the
host checks every operation; this module adds no authority, it only runs the code.
"""

import ast
import builtins
import io
import os
import sys
import traceback

import wit_world
from componentize_py_types import Err

# What the code may print, at most (characters); past it the call fails. The host's
# output cap stops a larger answer too; this one stops the code early, before memory does.
MAX_PRINTED = 1 << 20
# Traceback frames kept: the innermost ones, where the code failed.
TRACEBACK_FRAMES = 8


class _Printed(io.TextIOBase):
    """stdout and stderr for the code: kept in memory, up to MAX_PRINTED."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.size += len(text)
        if self.size > MAX_PRINTED:
            raise OverflowError(f"the code printed more than {MAX_PRINTED} characters")
        self.parts.append(text)
        return len(text)

    def text(self) -> str:
        return "".join(self.parts)


def _workdir(paths: list[str]) -> str | None:
    """The folder the listed paths share, so the code opens them by the names it was
    given (the host hands them over joined to the workspace)."""
    dirs = [p if os.path.isdir(p) else os.path.dirname(p) for p in paths if os.path.isabs(p)]
    if not dirs:
        return None
    try:
        return os.path.commonpath(dirs)
    except ValueError:
        return None


def _split(code: str) -> tuple[ast.Module, ast.Expression | None]:
    """The code's statements, and its last line apart when that is an expression."""
    tree = ast.parse(code, "<code>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    return tree, last


class WitWorld(wit_world.WitWorld):
    def run(
        self,
        code: str,
        reads: list[str] | None,
        writes: list[str] | None,
        urls: list[str] | None,
    ) -> str:
        printed = _Printed()
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = printed
        try:
            where = _workdir(list(reads or []) + list(writes or []))
            if where:
                os.chdir(where)
            tree, last = _split(code)
            scope = {"__name__": "__main__", "__builtins__": builtins}
            exec(compile(tree, "<code>", "exec"), scope)
            value = eval(compile(last, "<code>", "eval"), scope) if last else None
        except BaseException:  # the code's failure, whatever it is, is the answer
            trace = traceback.format_exc(limit=-TRACEBACK_FRAMES)
            raise Err(printed.text() + trace)
        finally:
            sys.stdout, sys.stderr = saved
        text = printed.text()
        if value is not None:
            text += repr(value)
        return text
