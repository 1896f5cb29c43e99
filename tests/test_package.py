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


def test_what_runs_when_modules_load_is_python_3_9_syntax() -> None:
    """The package claims Python 3.9, where ``X | Y`` between types raises: nowhere may it be
    evaluated as the modules load, neither in code outside annotations (a type alias) nor in
    the fields of a ``msgspec.Struct``, whose annotations msgspec evaluates."""
    import ast

    found = []
    for path in sorted(pathlib.Path(memstrata.__file__).parent.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        structs = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            and any(
                "Struct" in ast.unparse(base) or "_Entry" in ast.unparse(base)
                for base in node.bases
            )
        ]
        evaluated = [
            field.annotation
            for struct in structs
            for field in struct.body
            if isinstance(field, ast.AnnAssign)
        ]
        in_annotations = {
            inner  # AST nodes hash by identity: the very nodes inside annotations
            for node in ast.walk(tree)
            for name in ("annotation", "returns")
            if getattr(node, name, None) is not None
            for inner in ast.walk(getattr(node, name))
        }
        runtime = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.BitOr)
            and node not in in_annotations
            and any(
                isinstance(side, ast.Subscript)
                or (isinstance(side, ast.Name) and side.id in ("str", "int", "float", "bytes"))
                for side in (node.left, node.right)
            )
        ]
        for node in [*runtime, *(a for a in evaluated if "|" in ast.unparse(a))]:
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
