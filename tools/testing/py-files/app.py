"""py-files: a standard WASI 0.2 component in Python (componentize-py) whose exports
reach files with Python's own open(), that is through wasi:filesystem."""

import wit_world
from componentize_py_types import Err


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise Err(f"{path}: {e}")


class WitWorld(wit_world.WitWorld):
    def read_file(self, path: str) -> str:
        return _read(path)

    def line_count(self, path: str) -> int:
        n = len(_read(path).splitlines())
        if n > 0xFFFF_FFFF:
            raise Err(f"{path}: too many lines")
        return n
