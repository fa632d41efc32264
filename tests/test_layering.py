"""The import rules of the design handbook (shared/DESIGN.md, "Rules of the house"):

- `topologies`, `workloads` and `reports` never import another project package;
- `simpy` is imported only inside `simulator`;
- `matplotlib` only inside `reports`.

Every .py file of the four packages is parsed with `ast` (nothing is imported), so an import
inside a function or under `if TYPE_CHECKING:` counts too. Tests and benchmarks are not
packages and may import anything.
"""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = ("simulator", "topologies", "workloads", "reports")
LEAF_PACKAGES = ("topologies", "workloads", "reports")
ONLY_INSIDE = {"simpy": "simulator", "matplotlib": "reports"}


def imported_modules(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, absolute module name) of every import statement; relative imports
    (`from . import x`) stay inside their own package and are left out."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def top_level(module: str) -> str:
    return module.split(".", 1)[0]


def package_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def violations(package: str, path: Path, source: str) -> list[str]:
    """One line per import that breaks a rule, naming the file, the line and the module."""
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    problems = []
    for line, module in imported_modules(source, str(path)):
        root = top_level(module)
        if package in LEAF_PACKAGES and root in PROJECT_PACKAGES and root != package:
            problems.append(f"{where}:{line}: {package} imports project package {module!r}")
        if root in ONLY_INSIDE and ONLY_INSIDE[root] != package:
            problems.append(f"{where}:{line}: {package} imports {module!r}, allowed only "
                            f"inside {ONLY_INSIDE[root]}")
    return problems


def test_the_packages_are_the_ones_setup_cfg_declares():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    declared = {name.strip() for name in config["options"]["packages"].split(",")}
    assert declared == set(PROJECT_PACKAGES)
    for package in PROJECT_PACKAGES:
        assert (ROOT / package / "__init__.py").is_file(), package


@pytest.mark.parametrize("package", PROJECT_PACKAGES)
def test_package_imports_follow_the_rules_of_the_house(package):
    files = package_files(package)
    assert files, f"no .py files under {package}/"
    problems = [problem for path in files
                for problem in violations(package, path, path.read_text(encoding="utf-8"))]
    assert not problems, "import rules broken:\n" + "\n".join(problems)


def test_the_simulator_is_where_simpy_lives():
    modules = {top_level(module) for path in package_files("simulator")
               for _, module in imported_modules(path.read_text(encoding="utf-8"))}
    assert "simpy" in modules


@pytest.mark.parametrize("package, source, offending", [
    ("workloads", "import simulator.engine\n", "'simulator.engine'"),
    ("topologies", "from workloads.graph import Task\n", "'workloads.graph'"),
    ("reports", "def f():\n    from simulator import metrics\n", "'simulator'"),
    ("topologies", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                   "    from reports import plots\n", "'reports'"),
    ("workloads", "import simpy\n", "'simpy'"),
    ("simulator", "import matplotlib.pyplot as plt\n", "'matplotlib.pyplot'"),
    ("reports", "import simpy.resources\n", "'simpy.resources'"),
], ids=["workloads-simulator", "topologies-workloads", "reports-lazy-simulator",
        "topologies-type-checking-reports", "workloads-simpy", "simulator-matplotlib",
        "reports-simpy"])
def test_the_checker_names_the_file_and_the_offending_import(package, source, offending):
    path = ROOT / package / "example.py"
    problems = violations(package, path, source)
    assert len(problems) == 1
    assert problems[0].startswith(f"{package}/example.py:") and offending in problems[0]


@pytest.mark.parametrize("package, source", [
    ("workloads", "from workloads import flops\nfrom . import graph\nimport networkx\n"),
    ("reports", "import matplotlib\nfrom reports.files import write_json\n"),
    ("simulator", "import simpy\nfrom topologies.topology import Topology\n"
                  "from workloads.graph import Task\nfrom reports import files\n"),
], ids=["workloads-own-and-relative", "reports-matplotlib", "simulator-hub"])
def test_the_checker_allows_what_the_rules_allow(package, source):
    assert violations(package, ROOT / package / "example.py", source) == []
