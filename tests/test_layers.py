"""The layers: no layer imports the one that wires it.

From the bottom up: ``messages/`` and ``runtime/``; ``chain/``, ``ledger/``, ``logs/``,
``devnet/``, ``capture/``, ``monitoring/`` and ``replay/``; ``actors/``; then ``sidecar/``
(the wiring) and ``run.py``; on top, what only checks and measures the
program: ``audit/``, ``tests/`` and ``bench/``. A lower layer never imports
a higher one, so each part can be read, tested and reused without the
program around it.

The imports are read from the source with ``ast``, every one of them
(inside functions too, where a late import would otherwise hide), so the
check does not depend on what a test happened to import first. What only
shows when the code runs (the loader finding sections) is checked in a
fresh interpreter.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent

BOTTOM = ("messages", "runtime")
BELOW_THE_WIRING = (*BOTTOM, "chain", "ledger", "devnet", "capture", "logs", "monitoring", "replay", "actors")
WIRING = "sidecar"
PROJECT = (*BELOW_THE_WIRING, WIRING)
#: What checks and measures the program; nothing the program runs may import it.
ABOVE = ("audit", "tests", "bench")


def sources(*packages: str) -> Iterator[Path]:
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every module ``path`` imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if base else alias.name
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Name) and node.func.id == "__import__")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            )
        ):
            yield node.lineno, node.args[0].value


def offences(packages: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in sources(*packages):
        for line, module in imports(path):
            if module.split(".")[0] in forbidden:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return found


def test_no_layer_below_the_wiring_imports_it() -> None:
    found = offences(BELOW_THE_WIRING, (WIRING,))
    assert found == [], "\n".join(found)


def test_nothing_the_sidecar_runs_imports_the_audit_the_tests_or_the_benchmarks() -> None:
    found = offences(PROJECT, ABOVE)
    assert found == [], "\n".join(found)


def test_the_bottom_imports_no_layer_above_it() -> None:
    found = offences(BOTTOM, tuple(p for p in PROJECT if p not in BOTTOM))
    assert found == [], "\n".join(found)


def declared_sections() -> dict[str, str]:
    """Every ``@section("name")`` in the project's source: name -> module."""
    found = {}
    for path in sources(*PROJECT):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                for deco in node.decorator_list:
                    if (
                        isinstance(deco, ast.Call)
                        and isinstance(deco.func, ast.Name)
                        and deco.func.id == "section"
                        and isinstance(deco.args[0], ast.Constant)
                    ):
                        found[deco.args[0].value] = module_name(path)
    return found


def in_a_fresh_interpreter(code: str) -> object:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(out.stdout)


def test_the_loader_imports_nothing_above_it_and_knows_no_section_by_itself() -> None:
    seen = in_a_fresh_interpreter(
        "import json, sys; import runtime.config as c; "
        f"print(json.dumps([sorted(c.sections()), sorted(m for m in sys.modules if m.split('.')[0] in {list(PROJECT)!r})]))"
    )
    sections, modules = seen
    assert sections == []
    assert "runtime.config" in modules
    assert [m for m in modules if m.split(".")[0] != "runtime"] == []


def test_the_wiring_registers_every_section_declared_anywhere() -> None:
    declared = declared_sections()
    assert {"scheduler", "provider", "chain", "demo", "node", "devnet", "ledger", "capture", "listener"} <= set(declared)
    registered = in_a_fresh_interpreter(
        "import json; import sidecar.settings; from runtime.config import sections; "
        "print(json.dumps(sorted(sections())))"
    )
    missing = {name: module for name, module in declared.items() if name not in registered}
    assert missing == {}, f"import these modules in sidecar/settings.py: {missing}"
    assert sorted(declared) == registered
