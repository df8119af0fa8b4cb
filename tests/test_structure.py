"""The package's structure: no import cycles, imports only downward, every import followable.

Read from the source as text (nothing is imported), so an import inside a
function counts like one at the top of a module. The layers, lowest first:
`schemas` (what a row must be; no Beam) <- `transforms` (where rows come from
and the Beam steps) <- `pipelines` (what a build is, publishing, the CLI).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "recordforge"
LAYERS = ("schemas", "transforms", "pipelines")


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for the package root and its code folders."""
    modules = {PACKAGE: REPO / "__init__.py"}
    for folder in (*LAYERS, "configs"):
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((PACKAGE, *parts))] = path
    return modules


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _imports(name: str, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported module, line) for every import of a module of the package,
    wherever it stands in the file."""
    path = modules[name]
    package = name if _is_package(name, modules) else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if not (base == PACKAGE or base.startswith(PACKAGE + ".")):
                continue
            targets = [f"{base}.{alias.name}" for alias in node.names]
            submodules = [t for t in targets if t in modules]
            found.extend((t, node.lineno) for t in (submodules or [base]))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names
                         if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."))
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {target for target, _ in _imports(name, modules) if target in modules}
            for name in modules}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph[node]):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_cycle_detection_finds_a_cycle_hidden_in_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def _layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_imports_go_only_down_the_layers():
    modules = _modules()
    upward = []
    for name in modules:
        own = _layer(name)
        for target, line in _imports(name, modules):
            theirs = _layer(target)
            if own is not None and theirs is not None and theirs > own:
                upward.append(f"{modules[name].relative_to(REPO)}:{line} imports {target}")
    assert upward == []


# Wings: packages that do one big job behind one door (docs/DESIGN.md). Code
# outside a wing imports its `__init__`, never one of its modules, so the
# modules can be split or renamed without touching their users. Tests and
# benchmarks may open the room they measure.
WINGS = ("recordforge.transforms.tfrecord", "recordforge.transforms.writer",
         "recordforge.transforms.array_record", "recordforge.schemas.stats",
         "recordforge.pipelines.init")


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _rooms_entered(imports: dict[str, list[tuple[str, int]]], wings=WINGS) -> list[str]:
    """``importer:line imports room`` for every import, by a module outside
    a wing, of a module inside it other than its door. imports: importing
    module (dotted name, or a file for code outside the package) -> (imported
    module, line)."""
    entered = []
    for name, targets in imports.items():
        for target, line in targets:
            entered += [f"{name}:{line} imports {target}" for wing in wings
                        if _inside(target, wing) and target != wing and not _inside(name, wing)]
    return entered


def test_code_outside_a_wing_imports_only_its_door():
    modules = _modules()
    imports = {name: _imports(name, modules) for name in modules}
    assert _rooms_entered(imports) == []


@given(st.sampled_from(["framing", "damage", "reading", "writer", "gzip_members", "a.b"]),
       st.sampled_from(["recordforge.transforms.shards", "recordforge.pipelines.build",
                        "benchmarks/bench_codec.py", "recordforge.transforms"]),
       st.integers(1, 10_000))
def test_a_room_entered_from_outside_its_wing_is_found(room, importer, line):
    wing = "recordforge.transforms.tfrecord"
    room = f"{wing}.{room}"
    imports = {importer: [(wing, 1), (room, line)],
               f"{wing}.reading": [(room, 3), (wing, 4)],  # rooms may use each other
               "recordforge.transforms.tfrecords": [(room.replace(wing, wing + "s"), 5)]}
    assert _rooms_entered(imports, (wing,)) == [f"{importer}:{line} imports {room}"]


@pytest.mark.parametrize("folder", LAYERS)
def test_imports_inside_the_package_are_relative(folder):
    """An import a reader can follow from the file alone: `from .x import`,
    `from ..schemas.y import`, never `recordforge.` spelled out."""
    absolute = []
    for path in sorted((REPO / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            absolute += [f"{path.relative_to(REPO)}:{node.lineno}" for n in names
                         if n == PACKAGE or n.startswith(PACKAGE + ".")]
    assert absolute == []


def test_every_relative_import_leads_to_a_file():
    modules = _modules()
    broken = []
    for name in modules:
        for target, line in _imports(name, modules):
            if target not in modules:
                broken.append(f"{modules[name].relative_to(REPO)}:{line} -> {target}")
    assert broken == []


def test_a_checkout_in_any_folder_runs_its_tests(tmp_path):
    """pytest collects the repository root as a package (it holds
    `__init__.py`) named after its folder, which a clone may name anything,
    e.g. ``my-repo``: the root `__init__.py` must import even then, so it
    imports absolutely and nothing relatively."""
    import shutil
    import subprocess
    import sys

    clone = tmp_path / "a-checkout"
    (clone / "tests").mkdir(parents=True)
    shutil.copy(REPO / "__init__.py", clone / "__init__.py")
    shutil.copy(REPO / "pytest.ini", clone / "pytest.ini")
    (clone / "tests" / "test_one.py").write_text("def test_one():\n    assert True\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly"], cwd=clone,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
