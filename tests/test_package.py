"""The package as a user installs it: the wheel, its public names and its exceptions."""

from __future__ import annotations

import pathlib

import memstrata
from memstrata import exceptions


def test_imports_the_installed_wheel_not_the_source_tree() -> None:
    package_dir = pathlib.Path(memstrata.__file__).resolve().parent
    assert "site-packages" in package_dir.parts
    assert (package_dir / "py.typed").exists()
    assert (package_dir / "_core.pyi").exists()


def test_public_names_are_exported() -> None:
    for name in memstrata.__all__:
        assert hasattr(memstrata, name), name
    assert memstrata.__version__ == "0.1.0"


def test_input_errors_are_builtin_errors_too() -> None:
    assert issubclass(exceptions.NestingTooDeepError, ValueError)
    assert issubclass(exceptions.UnsupportedTypeError, TypeError)
    assert issubclass(exceptions.ZeroVectorError, exceptions.MemstrataError)
    err = exceptions.NestingTooDeepError("too deep", path="$.a", limit=3)
    assert (err.path, err.limit, str(err)) == ("$.a", 3, "too deep")
