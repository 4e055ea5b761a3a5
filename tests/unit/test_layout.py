"""The layout README.md describes, held: each package imports only the layers below it, no module
imports another that imports it back (lazy imports included), only the Triton adapters and
``triton_io/`` touch the Python backend's module, and no function under ``benchmarks/`` runs past 80 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What each layer may import of the project, lowest first (README.md "Layout").
ALLOWED: dict[str, frozenset[str]] = {
    "renderer": frozenset(),
    "engines": frozenset({"renderer"}),
    "triton_io": frozenset({"renderer"}),
    "model_repository": frozenset({"renderer", "engines", "triton_io"}),
    "client": frozenset({"renderer"}),
    "openai_front": frozenset({"renderer", "client"}),
    "model_builders": frozenset(),
    "launcher": frozenset({"renderer", "model_builders"}),
}
BACKEND_MODULE = "triton_python_backend_utils"


def _sources() -> list[Path]:
    out = []
    for layer in ALLOWED:
        out += [p for p in (ROOT / layer).rglob("*.py") if not p.is_symlink() and "__pycache__" not in p.parts]
    return sorted(out)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    """Every absolute import of the file, at any depth (a lazy import counts as much as the rest);
    ``from a import b`` names ``a.b`` when that is a module of the project."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                is_module = (ROOT / Path(*sub.split("."))).with_suffix(".py").exists() or (
                    ROOT / Path(*sub.split(".")) / "__init__.py"
                ).exists()
                names.append(sub if is_module else node.module)
    return names


def test_every_python_package_has_a_layer():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "benchmarks"}
    assert packages <= set(ALLOWED), f"packages without a layer in this test and README.md: {packages - set(ALLOWED)}"
    assert (ROOT / "model_repository").is_dir()


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_the_layers_below_it(layer):
    wrong = []
    for path in _sources():
        if path.relative_to(ROOT).parts[0] != layer:
            continue
        for name in _imports(path):
            top = name.split(".")[0]
            if top in ALLOWED and top != layer and top not in ALLOWED[layer]:
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)


def _benchmark_sources() -> list[Path]:
    """``benchmarks/``: the top layer (it may import every other), held to no cycles with the rest."""
    return sorted(p for p in (ROOT / "benchmarks").rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_imports_one_that_imports_it_back():
    sources = _sources() + _benchmark_sources()
    modules = {_module_name(p): p for p in sources if p.relative_to(ROOT).parts[0] != "model_repository"}
    graph = {m: {n for n in _imports(p) if n in modules and n != m} for m, p in modules.items()}
    # A package's __init__ is imported with each of its modules; an edge to it is an edge to the
    # package's own docstring, not a cycle, unless it imports something back.
    cycles = []
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join(stack[stack.index(n) :] + [n]))
            elif n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


def test_only_the_adapters_and_triton_io_import_the_python_backend():
    users = {
        str(p.relative_to(ROOT)) for p in _sources() if any(n.split(".")[0] == BACKEND_MODULE for n in _imports(p))
    }
    outside = {u for u in users if u.split("/")[0] not in ("model_repository", "triton_io")}
    assert not outside, outside
    # Each Python model's adapter is a file of its own model folder (or the same file, linked).
    for config in sorted(ROOT.glob("model_repository/*/config.pbtxt")):
        if 'backend: "python"' in config.read_text():
            assert (config.parent / "1" / "model.py").is_file(), config.parent.name


MAX_FUNCTION_LINES = 80


def test_no_benchmark_function_is_longer_than_80_lines():
    """Every function under ``benchmarks/`` reads as named steps: none longer than ``MAX_FUNCTION_LINES``
    (``def`` to its last line, docstring included)."""
    long = []
    for path in _benchmark_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} is {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps):\n" + "\n".join(long)
