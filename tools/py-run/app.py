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
from componentize_py_types import Err, Ok
from wit_world.imports import outgoing_handler, streams
from wit_world.imports import types as http

# The standard library modules code for counting, parsing, converting and computing
# reaches for. componentize-py keeps only what the module imports while it builds the
# snapshot, so they are imported here; the code then imports them as usual.
import base64  # noqa: F401
import bisect  # noqa: F401
import calendar  # noqa: F401
import collections  # noqa: F401
import csv  # noqa: F401
import datetime  # noqa: F401
import decimal  # noqa: F401
import difflib  # noqa: F401
import fnmatch  # noqa: F401
import fractions  # noqa: F401
import functools  # noqa: F401
import glob  # noqa: F401
import hashlib  # noqa: F401
import heapq  # noqa: F401
import html  # noqa: F401
import itertools  # noqa: F401
import json  # noqa: F401
import math  # noqa: F401
import operator  # noqa: F401
import pathlib  # noqa: F401
import pprint  # noqa: F401
import random  # noqa: F401
import re  # noqa: F401
import statistics  # noqa: F401
import string  # noqa: F401
import struct  # noqa: F401
import textwrap  # noqa: F401
import time  # noqa: F401
import unicodedata  # noqa: F401
import urllib.parse  # noqa: F401
import zlib  # noqa: F401

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
    """The folder the listed paths share: the code's relative names start there, so it
    opens them by the names it was given (the host hands them over joined to the
    workspace)."""
    dirs = [p if os.path.isdir(p) else os.path.dirname(p) for p in paths if os.path.isabs(p)]
    if not dirs:
        return None
    try:
        return os.path.commonpath(dirs)
    except ValueError:
        return None


# What takes a path, by module: each gets relative paths joined to the working folder.
# (`os.chdir` would have to open the folder itself, which the call was not granted.)
_PATH_TAKERS = {
    os: ["open", "stat", "lstat", "listdir", "scandir", "remove", "unlink", "rename",
         "replace", "mkdir", "makedirs", "rmdir", "access", "utime"],
}


def _rooted(where: str, granted: list[str]) -> None:
    """Makes relative paths name what the call listed, for open(), os and pathlib alike.

    The host hands the listed paths over joined to the workspace; the code names them as
    the model wrote them ("sales.csv", "data/2026/q1.csv"). A relative name is the
    listed path it ends with (or a path below a listed folder it starts in), when that
    is one path; otherwise it joins the folder the listed paths share.
    """

    def fix(path):
        if not isinstance(path, (str, bytes, os.PathLike)):
            return path
        text = os.fsdecode(path)
        if os.path.isabs(text):
            return path
        parts = os.path.normpath(text).split(os.sep)
        found = set()
        for g in granted:
            for cut in range(len(parts), 0, -1):
                head = os.sep + os.path.join(*parts[:cut])
                if g.endswith(head):
                    found.add(os.path.join(g, *parts[cut:]) if cut < len(parts) else g)
                    break
        if len(found) == 1:
            return found.pop()
        return os.path.normpath(os.path.join(where, text))

    def wrap(func, two=False):
        def wrapped(*args, **kwargs):
            args = list(args) or ["."]
            args[0] = fix(args[0])
            if two and len(args) > 1:
                args[1] = fix(args[1])
            return func(*args, **kwargs)

        return wrapped

    for module, names in _PATH_TAKERS.items():
        for name in names:
            if hasattr(module, name):
                setattr(module, name, wrap(getattr(module, name), name in ("rename", "replace")))
    builtins.open = io.open = wrap(io.open)
    os.getcwd = lambda: where


# What one fetch() reads of a body, at most (bytes).
MAX_FETCHED = 1 << 20


def _read_all(stream, url: str) -> bytearray:
    data = bytearray()
    while True:
        try:
            data += stream.blocking_read(64 << 10)
        except Err as e:
            if isinstance(e.value, streams.StreamError_Closed):
                return data
            raise OSError(f"fetch {url}: reading the body failed") from None
        if len(data) > MAX_FETCHED:
            raise OverflowError(f"fetch {url}: the body is over {MAX_FETCHED} bytes")


def fetch(url: str) -> str:
    """GET `url` through the host's checked HTTP (only the call's `urls` are reached) and
    return the body as text; a status outside 2xx raises OSError."""
    parts = urllib.parse.urlsplit(url)
    schemes = {"http": http.Scheme_Http(), "https": http.Scheme_Https()}
    if parts.scheme not in schemes or not parts.netloc:
        raise ValueError(f"not an http or https URL: {url}")
    request = http.OutgoingRequest(http.Fields())
    request.set_method(http.Method_Get())
    request.set_scheme(schemes[parts.scheme])
    request.set_authority(parts.netloc)
    request.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    try:
        future = outgoing_handler.handle(request, None)
    except Err as e:
        raise OSError(f"fetch {url}: {e.value}") from None
    # Resources are released child first (a pollable before its future, a stream before
    # its body before its response), each as its block ends, or the runtime traps.
    with future:
        with future.subscribe() as pollable:
            pollable.block()
        got = future.get()
        if got is None:
            raise OSError(f"fetch {url}: no answer")
        outer = got.value if isinstance(got, Ok) else None
        del got
        if not isinstance(outer, Ok):
            raise OSError(f"fetch {url}: {getattr(outer, 'value', outer)}")
        with outer.value as response:
            del outer
            status = response.status()
            with response.consume() as body:
                with body.stream() as stream:
                    data = _read_all(stream, url)
    if not 200 <= status < 300:
        raise OSError(f"fetch {url}: status {status}")
    return data.decode("utf-8", "replace")


def _split(code: str) -> tuple[ast.Module, ast.Expression | None]:
    """The code's statements, and its last line apart when that is an expression."""
    tree = ast.parse(code, "<code>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    return tree, last


# What a failure's answer keeps of what the code printed before it (its end), in
# characters: the traceback comes first, so the host's error cap never cuts it.
PRINTED_ON_FAILURE = 4096


def _tail(text: str) -> str:
    if not text:
        return ""
    if len(text) > PRINTED_ON_FAILURE:
        cut = len(text) - PRINTED_ON_FAILURE
        text = f"[{cut} characters cut]" + text[cut:]
    return "printed before it failed:\n" + text


def _trace(error: BaseException) -> str:
    """The traceback of the code's failure: its own frames (`<code>`), not this module's."""
    shown = traceback.TracebackException.from_exception(error, limit=-TRACEBACK_FRAMES)
    frames = [f for f in shown.stack if f.filename == "<code>"]
    shown.stack = traceback.StackSummary.from_list(frames)
    return "".join(shown.format())


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
            granted = [p for p in list(reads or []) + list(writes or []) if os.path.isabs(p)]
            where = _workdir(granted)
            if where:
                _rooted(where, granted)
            tree, last = _split(code)
            scope = {"__name__": "__main__", "__builtins__": builtins, "fetch": fetch}
            exec(compile(tree, "<code>", "exec"), scope)
            value = eval(compile(last, "<code>", "eval"), scope) if last else None
        except BaseException as e:  # the code's failure, whatever it is, is the answer
            raise Err(_trace(e) + _tail(printed.text()))
        finally:
            sys.stdout, sys.stderr = saved
        text = printed.text()
        if value is not None:
            text += repr(value)
        return text
