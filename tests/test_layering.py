"""The package's imports run one way (issue 33): commands → job → outputs → (warehouse |
inputs) → sources → storage, with transforms/ and sql/ below everything, and no module
takes part in an import cycle. Every import is read from the source (ast), at module level
and inside functions alike: a function-local import does not hide a wrong direction, and one of
the package's own modules inside a function says why (`# deferred:`, the CLI's start-up)."""

from __future__ import annotations

import ast
from pathlib import Path

from retrieval_eval.flows.warehouse.evaluation_key import PACKAGE_ROOT

# Higher imports lower, never the other way; equal ranks do not import each other. The
# flows/ root holds only nightly.py (prefect.yaml's script entrypoint), above everything.
RANKS = {
    "flows": 7,
    "flows.commands": 6,
    "flows.job": 5,
    "flows.outputs": 4,
    "flows.warehouse": 3,
    "flows.inputs": 3,
    "flows.sources": 2,
    "flows.storage": 1,
    "transforms": 0,
    "sql": -1,  # the SQL models, which transforms/ load
}
ORDER = "commands → job → outputs → (warehouse | inputs) → sources → storage → (transforms, sql)"


def modules() -> dict[str, Path]:
    """Every Python module of the package, by its dotted name below retrieval_eval."""
    found = {}
    for folder in ("flows", "transforms", "sql"):
        for path in (PACKAGE_ROOT / folder).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(PACKAGE_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def layer(module: str) -> str:
    """The layer a module belongs to: its longest prefix in RANKS."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in RANKS:
            return ".".join(parts[:end])
    raise AssertionError(f"{module}: in no layer of {ORDER}")


def imports(module: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) of every import of the package's own modules in `module`, anywhere in it."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("retrieval_eval"):
                target = node.module.removeprefix("retrieval_eval").lstrip(".")
            else:
                continue
            for alias in node.names:  # `from . import config` imports a module
                named = f"{target}.{alias.name}" if target else alias.name
                found.append((node.lineno, named if named in known else target))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("retrieval_eval."):
                    found.append((node.lineno, alias.name.removeprefix("retrieval_eval.")))
    return [(line, target) for line, target in found if target in known]


def deferred_imports_without_reason(module: str, path: Path, known: dict[str, Path]) -> list[str]:
    """The functions of `module` that import the package's own modules with no `# deferred:`
    comment saying why (the only reason kept: the CLI's start-up, which imports a command's
    modules, and with them the engines, only when that command runs)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        local = [node for node in ast.walk(function) if isinstance(node, ast.ImportFrom | ast.Import)
                 and any(target in known for _, target in imports(module, path, known) if _ == node.lineno)]
        said = any("# deferred:" in lines[node.lineno - 1] for node in local)
        if local and not said:
            found.append(f"{module}:{local[0].lineno} ({function.name})")
    return found


def graph() -> dict[str, list[tuple[int, str]]]:
    known = modules()
    return {module: imports(module, path, known) for module, path in known.items()}


def test_every_import_runs_down_the_layers():
    wrong = []
    for module, targets in graph().items():
        here = layer(module)
        for line, target in targets:
            there = layer(target)
            if there != here and RANKS[there] >= RANKS[here]:
                wrong.append(f"{module}:{line} imports {target} ({here} may not import {there})")
    assert not wrong, f"imports against {ORDER}:\n" + "\n".join(wrong)


def test_every_import_of_our_own_inside_a_function_says_why():
    known = modules()
    unsaid = [place for module, path in known.items() for place in deferred_imports_without_reason(module, path, known)]
    assert not unsaid, "function-local imports without a `# deferred:` reason:\n" + "\n".join(unsaid)


def test_no_module_takes_part_in_an_import_cycle():
    edges = {module: {target for _, target in targets if target != module} for module, targets in graph().items()}
    # A package's __init__ is imported with each of its modules: an import of `a.b` runs `a`.
    cycles, state = [], {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(edges[module]):
            if state.get(target) == "open":
                cycles.append(" → ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_every_layer_is_a_package_the_build_lists():
    # pyproject.toml's packages must carry every folder of flows/, or a wheel leaves it out.
    listed = (PACKAGE_ROOT / "pyproject.toml").read_text(encoding="utf-8") if (PACKAGE_ROOT / "pyproject.toml").exists() else None
    if listed is None:  # an installed wheel: nothing to compare against
        return
    for name in RANKS:
        if name.startswith("flows"):
            assert f'"retrieval_eval.{name}"' in listed, name
