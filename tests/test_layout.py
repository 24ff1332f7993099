"""The layout STYLE.md describes: scripts are doors into packages, imports point one way, train.py is an outline.

Read with `ast`, never by importing, so a cycle shows up here as a failing test rather than an ImportError.
"""

import ast
from pathlib import Path

from conftest import REPO_ROOT

SCRIPTS = sorted(p.stem for p in REPO_ROOT.glob("*.py"))
PACKAGES = sorted(p.parent.name for p in REPO_ROOT.glob("*/__init__.py") if p.parent.name != "tests")


def imported_modules(path: Path) -> set[str]:
    """Every project module that a file imports, at any depth (function bodies too), as dotted names."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from engine import step`
    return {name for name in names if name.split(".")[0] in SCRIPTS + PACKAGES}


def module_files() -> dict[str, Path]:
    """Dotted name -> file, for every module of the packages (a package's __init__ under the package's name)."""
    files = {}
    for package in PACKAGES:
        for path in (REPO_ROOT / package).glob("*.py"):
            files[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return files


def test_the_layout_test_sees_the_scripts_and_packages():
    assert {"train", "sample", "inspect_attention", "compare", "bench"} <= set(SCRIPTS)
    assert {"model", "data", "configs", "engine"} <= set(PACKAGES)
    assert "engine.runtime" in imported_modules(REPO_ROOT / "train.py")


def test_no_script_imports_another_script():
    offenders = {script: sorted(imported_modules(REPO_ROOT / f"{script}.py") & set(SCRIPTS)) for script in SCRIPTS}
    assert not {s: found for s, found in offenders.items() if found}, "scripts import packages only (STYLE.md section 1)"


def test_packages_never_import_a_script():
    offenders = {name: sorted(imported_modules(path) & set(SCRIPTS)) for name, path in module_files().items()}
    assert not {n: found for n, found in offenders.items() if found}


def test_model_imports_nothing_else_of_the_project():
    outside = {name: sorted(m for m in imported_modules(path) if not m.startswith("model")) for name, path in module_files().items()}
    assert not {n: found for n, found in outside.items() if n.startswith("model") and found}


def test_the_module_graph_has_no_cycle():
    files = module_files()
    graph = {name: {m for m in imported_modules(path) if m in files and m != name} for name, path in files.items()}
    state = {}  # name -> "visiting" or "done"

    def visit(name: str, trail: list[str]) -> None:
        if state.get(name) == "done":
            return
        assert state.get(name) != "visiting", "import cycle: " + " -> ".join([*trail, name])
        state[name] = "visiting"
        for other in sorted(graph[name]):
            visit(other, [*trail, name])
        state[name] = "done"

    for name in sorted(graph):
        visit(name, [])


def test_train_py_is_an_outline():
    lines = (REPO_ROOT / "train.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"train.py has {len(lines)} lines; move a job into a module of engine/"


def test_every_engine_module_reads_in_one_sitting():
    long = {path.name: n for path in (REPO_ROOT / "engine").glob("*.py") if (n := len(path.read_text().splitlines())) > 250}
    assert not long, f"modules over 250 lines: {long}"
