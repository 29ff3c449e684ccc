"""Every command renders through one place: the modules under ``pipesim/cli/render/``
build all text and file content in memory, and ``pipesim/cli/output.py`` writes it. A
command module parses, calls the library and hands the result on; it never prints."""

import ast
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "pipesim" / "cli"
RENDER = CLI / "render"
OUTPUT = CLI / "output.py"
PROGRESS = CLI / "progress.py"  # tqdm's bar is drawn on stderr; it is not output
MODULES = sorted(CLI.rglob("*.py"))
COMMANDS = [p for p in MODULES if RENDER not in p.parents and p not in (OUTPUT, PROGRESS)]

PRINTERS = {"echo", "secho", "echo_via_pager", "get_text_stream", "get_binary_stream"}
RENDERERS = {"dumps", "safe_dump", "dump", "to_csv", "to_json", "to_parquet"}


def name(path: Path) -> str:
    return str(path.relative_to(CLI.parent))


def calls(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, text)`` of every call and attribute that writes or renders."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner, attr = node.value.id, node.attr
            if owner == "click" and attr in PRINTERS:
                found.append((node.lineno, f"click.{attr}"))
            if owner == "sys" and attr in ("stdout", "stderr"):
                found.append((node.lineno, f"sys.{attr}"))
        if isinstance(node, ast.ImportFrom) and node.module == "click":
            found += [(node.lineno, f"click.{a.name}") for a in node.names if a.name in PRINTERS]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "print":
                found.append((node.lineno, "print"))
    return found


def renders(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, text)`` of every call that turns a result into text, bytes or a figure."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called in RENDERERS or called.endswith("_figure") or called == "figure_bytes":
            found.append((node.lineno, called))
    return found


@pytest.mark.parametrize("path", [p for p in MODULES if p != OUTPUT], ids=name)
def test_only_output_writes_to_the_terminal(path: Path):
    found = calls(ast.parse(path.read_text()))
    if path == PROGRESS:
        found = [(line, text) for line, text in found if text != "sys.stderr"]
    assert not found, f"{name(path)} writes itself: {found}; hand the text to cli/output.py"


@pytest.mark.parametrize("path", COMMANDS, ids=name)
def test_command_modules_leave_rendering_to_the_render_modules(path: Path):
    found = renders(ast.parse(path.read_text()))
    assert not found, f"{name(path)} renders itself: {found}; move it to cli/render/"


def defines_a_command(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Attribute) and target.attr == "command":
                    return True
    return False


COMMAND_MODULES = [p for p in COMMANDS if defines_a_command(ast.parse(p.read_text()))]


def test_every_command_has_a_module():
    stems = {p.stem for p in COMMAND_MODULES}
    assert {"run", "validate", "schedules", "compare", "sweep", "explain"} <= stems
    assert {"plan", "serve", "calibrate"} <= stems


@pytest.mark.parametrize("path", COMMAND_MODULES, ids=name)
def test_a_command_module_renders_and_writes_through_the_one_place(path: Path):
    imported = {
        (node.module, alias.name)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    assert ("pipesim.cli.output", "write_outputs") in imported
    assert any(module.startswith("pipesim.cli.render.") for module, _ in imported)
