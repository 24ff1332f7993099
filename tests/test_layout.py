"""The house rules of docs/layout.md, each held here: scripts are doors into packages, imports point
one way, rooms stay small.

Read with `ast`, never by importing, so a cycle shows up here as a failing test rather than an
ImportError.
"""

import ast
import re
from pathlib import Path

from conftest import REPO_ROOT

SCRIPTS = sorted(p.stem for p in REPO_ROOT.glob("*.py"))
# the top-level packages
PACKAGES = sorted(
    p.parent.name for p in REPO_ROOT.glob("*/__init__.py") if p.parent.name != "tests"
)
SCRIPT_LINES = 180  # docs/layout.md, rule 4: a script is a door
TRAIN_LINES = 200  # docs/layout.md, rule 4: train.py, the outline of a run with its step in sight
MODULE_LINES = 300  # docs/layout.md, rule 4: a module reads in one sitting
FOLDER_MODULES = 12  # docs/layout.md, rule 5: no folder a flat drawer


def imported_modules(path: Path) -> set[str]:
    """Every project module that a file imports, at any depth (function bodies too), as dotted
    names.
    """
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            # `from harness import step`
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.split(".")[0] in SCRIPTS + PACKAGES}


def module_files() -> dict[str, Path]:
    """Dotted name -> file, for every module of the packages (a package's __init__ under the
    package's name).
    """
    files = {}
    for package in PACKAGES:
        for path in (REPO_ROOT / package).rglob("*.py"):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def test_the_layout_test_sees_the_scripts_and_packages():
    assert {"train", "sample", "inspect_attention", "compare", "bench"} <= set(SCRIPTS)
    assert {"model", "data", "configs", "harness"} <= set(PACKAGES)
    assert "harness.training.runtime" in imported_modules(REPO_ROOT / "train.py")


def test_no_script_imports_another_script():
    offenders = {
        script: sorted(imported_modules(REPO_ROOT / f"{script}.py") & set(SCRIPTS))
        for script in SCRIPTS
    }
    assert not {s: found for s, found in offenders.items() if found}, (
        "scripts import packages only (docs/layout.md, rule 1)"
    )


def test_packages_never_import_a_script():
    offenders = {
        name: sorted(imported_modules(path) & set(SCRIPTS)) for name, path in module_files().items()
    }
    assert not {n: found for n, found in offenders.items() if found}


def test_model_imports_nothing_else_of_the_project():
    outside = {
        name: sorted(m for m in imported_modules(path) if not m.startswith("model"))
        for name, path in module_files().items()
    }
    assert not {n: found for n, found in outside.items() if n.startswith("model") and found}


def test_the_module_graph_has_no_cycle():
    files = module_files()
    graph = {
        name: {m for m in imported_modules(path) if m in files and m != name}
        for name, path in files.items()
    }
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


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_every_script_is_a_door():
    """A script parses, calls and prints (train.py: the outline of a run); its library code lives in
    a package.
    """
    caps = {script: TRAIN_LINES if script == "train" else SCRIPT_LINES for script in SCRIPTS}
    long = {
        f"{script}.py": n
        for script in SCRIPTS
        if (n := line_count(REPO_ROOT / f"{script}.py")) > caps[script]
    }
    assert not long, (
        f"scripts over {SCRIPT_LINES} lines (train.py {TRAIN_LINES}): {long}; move their library "
        "code into a package"
    )


def test_every_module_reads_in_one_sitting():
    long = {
        name: n for name, path in module_files().items() if (n := line_count(path)) > MODULE_LINES
    }
    assert not long, f"modules over {MODULE_LINES} lines: {long}"


def test_no_folder_is_a_flat_drawer():
    """A package folder holds at most FOLDER_MODULES modules; past that it splits into rooms named
    by their callers.
    """
    crowded = {}
    for init in REPO_ROOT.glob("*/**/__init__.py"):
        if init.parent.name != "tests":
            count = sum(1 for p in init.parent.glob("*.py") if p.stem != "__init__")
            if count > FOLDER_MODULES:
                crowded[str(init.parent.relative_to(REPO_ROOT))] = count
    assert not crowded, f"folders over {FOLDER_MODULES} modules: {crowded}"
    assert "harness.training.step" in module_files()  # sub-packages are seen


def test_no_test_cites_a_file_the_project_lacks():
    """Tests cite the house rules where the project keeps them (docs/layout.md), never a file
    outside it.
    """
    cited = {}
    for path in (REPO_ROOT / "tests").glob("*.py"):
        for name in re.findall(r"\b([A-Za-z_][\w/.-]*\.md)\b", path.read_text(encoding="utf-8")):
            if not (REPO_ROOT / name).exists() and not (REPO_ROOT / "docs" / name).exists():
                cited.setdefault(path.name, set()).add(name)
    assert not cited, f"tests cite files the project does not have: {cited}"


def code_files() -> dict[str, Path]:
    """Every script and package module (not the tests), by dotted name."""
    return {**{script: REPO_ROOT / f"{script}.py" for script in SCRIPTS}, **module_files()}


def where(predicate) -> set[str]:
    """The code files with at least one AST node for which predicate(node) holds."""
    return {
        name
        for name, path in code_files().items()
        if any(predicate(node) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
    }


def calls(name: str):
    """A predicate: a call of a function or method called `name` (f(...) or x.f(...))."""

    def predicate(node: ast.AST) -> bool:
        func = getattr(node, "func", None) if isinstance(node, ast.Call) else None
        return (isinstance(func, ast.Name) and func.id == name) or (
            isinstance(func, ast.Attribute) and func.attr == name
        )

    return predicate


def test_the_loss_is_computed_in_one_place():
    """Training, evaluation, the honest loss and scoring all call model/gpt.py's lm_loss."""
    assert where(calls("cross_entropy")) == {"model.gpt"}


def test_the_measurements_live_in_one_module_that_imports_only_the_model():
    imports = imported_modules(REPO_ROOT / "model" / "measurements.py")
    assert imports and all(name.startswith("model.") for name in imports), imports
    defined = {
        node.name
        for node in ast.parse((REPO_ROOT / "model" / "measurements.py").read_text()).body
        if isinstance(node, ast.FunctionDef)
    }
    assert {"honest_loss", "leak", "head_statistics", "attention_summary", "order_use"} <= defined
    for measurement in (
        "honest_loss",
        "leak",
        "head_statistics",
        "normalized_entropy",
        "future_mass",
    ):
        assert where(
            lambda node, m=measurement: isinstance(node, ast.FunctionDef) and node.name == m
        ) == {"model.measurements"}, measurement


# the changes' names, flags and labels; "rope", "softcap", "window", "gate", "sink" alone are also
# fields
ABLATION_WORDS = {
    *(
        f"{dashes}{name}"
        for name in ("no-mask", "no-scale", "no-pos", "qk-norm", "kv-heads")
        for dashes in ("", "-", "--")
    ),
    *(
        f"{dashes}{name}"
        for name in ("softcap", "rope", "window", "gate", "sink")
        for dashes in ("-", "--")
    ),
    *(
        "NO MASK",
        "NO SCALE",
        "NO POS",
        "QK-NORM",
        "SOFTCAP",
        "ROPE",
        "KV-HEADS",
        "WINDOW",
        "GATE",
        "SINK",
    ),
}


def test_the_ablations_are_defined_once():
    """Run names, labels, flags and every command's variants derive from model/ablations.py: no
    other code spells one.
    """
    spelled = where(
        lambda node: isinstance(node, ast.Constant) and node.value in ABLATION_WORDS
    ) - {"model.ablations"}
    assert spelled == set(), (
        f"names of ablations, cures or rope spelled outside model/ablations.py: {sorted(spelled)}"
    )
    switches = where(
        lambda node: (
            isinstance(node, ast.Dict)
            and any(
                isinstance(k, ast.Constant) and k.value in ("causal", "scaled", "positions")
                for k in node.keys
            )
            and any(isinstance(v, ast.Constant) and v.value is False for v in node.values)
        )
    )
    assert switches == set(), f"ablation switches written out in {sorted(switches)}"
    assert "model.ablations" in imported_modules(REPO_ROOT / "configs" / "schema.py")  # run names
    # --no-mask, --no-scale, --no-pos
    assert "model.ablations" in imported_modules(REPO_ROOT / "configs" / "loader.py")


def test_every_script_parses_its_command_line_one_way():
    """One parser class (harness/cli.py's OneLineParser, one-line errors) in every script; no
    hand-made argv scanning.
    """
    # OneLineParser subclasses it in harness.cli, the one place
    assert where(calls("ArgumentParser")) == set()
    doors = {
        script
        for script in SCRIPTS
        if "__main__" in (REPO_ROOT / f"{script}.py").read_text(encoding="utf-8")
    }
    assert doors == set(SCRIPTS)
    assert doors <= where(calls("OneLineParser")), sorted(doors - where(calls("OneLineParser")))
    assert doors <= where(calls("run_command")), sorted(doors - where(calls("run_command")))


def test_each_generic_utility_has_one_home():
    """Atomic writes and hashing live in data/files.py; everyone else calls them."""
    assert where(calls("fsync")) == {"data.files"}
    assert where(
        lambda node: isinstance(node, ast.Import) and any(a.name == "hashlib" for a in node.names)
    ) == {"data.files"}


def top_level_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_optional_libraries_are_imported_where_they_are_used():
    """circuitsvis (one script's page), pyplot (compare's curves) and tensorboard (the run logger's
    writer) load on use.
    """
    for name, path in code_files().items():
        eager = {
            m
            for m in top_level_imports(path)
            if m.split(".")[0] == "circuitsvis"
            or m in ("matplotlib.pyplot", "torch.utils.tensorboard")
        }
        assert not eager, f"{name} imports {sorted(eager)} at the top"


def test_readme_first_screen_finds_attention_the_loss_the_measurements_and_the_ablations():
    first_screen = "\n".join(
        (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:40]
    )
    for path in (
        "model/attention.py",
        "model/gpt.py",
        "model/measurements.py",
        "model/ablations.py",
    ):
        assert f"({path})" in first_screen, f"README's first 40 lines link no {path}"


def test_the_walk_of_a_step_names_the_lines_of_train_py():
    """docs/layout.md's walk of one step cites train.py:N followed by the code on line N, and
    README's reading order cites the step's lines: a change that moves the step fails here until
    the numbers move with it."""
    walk = (REPO_ROOT / "docs" / "layout.md").read_text()
    lines = (REPO_ROOT / "train.py").read_text().splitlines()
    cited = re.findall(r"\[train\.py:(\d+)\]\(\.\./train\.py#L(\d+)\)\s+`([^`]+)`", walk)
    named = {code for _, _, code in cited}
    for must in ("zero_grad", ".backward()", "optimizer.step()", "clip_grad_norm_", "check_finite"):
        assert any(must in code for code in named), f"the walk names no line with {must}"
    for text_n, link_n, code in cited:
        assert text_n == link_n, f"train.py:{text_n} links to line {link_n}"
        assert code in lines[int(text_n) - 1], f"train.py:{text_n} is not `{code}`"
    first = next(n for n, line in enumerate(lines, 1) if "# The step:" in line)
    last = next(n for n, line in enumerate(lines, 1) if line.strip() == "optimizer.step()")
    readme = (REPO_ROOT / "README.md").read_text()
    assert f"[train.py:{first}-{last}](train.py#L{first}-L{last})" in readme


def test_a_statement_is_a_statement():
    """A conditional expression or an `and`/`or` chain is never a statement of its own: an `if`
    says it (rule 4)."""
    found = []
    for path in sorted(REPO_ROOT.glob("**/*.py")):
        if any(
            part.startswith(".") or part == "runs" for part in path.relative_to(REPO_ROOT).parts
        ):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.IfExp | ast.BoolOp):
                found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not found, f"write these as if statements: {found}"
