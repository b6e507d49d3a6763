"""The package reads as one straight pipeline: imports point down, never in a circle.

Layers, from the bottom: the words of the system (model, settings, errors,
secrets); the engine (the loop every task runs on), adapters and agent knowledge (io/,
agents/, render); the pipeline; the runtime behind the hub; the hub; the notebook layer. A module
may import its own layer or a lower one, never a higher one, and no module
imports another module's private (``_``) name. ``__init__`` (the public facade),
``demo/`` and ``testing/`` sit outside the layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "madohub_nb"

LAYERS: dict[str, int] = {
    "madohub_nb.errors": 0,
    "madohub_nb.defaults": 0,
    "madohub_nb.model": 0,
    "madohub_nb.secrets": 0,
    "madohub_nb.regex": 0,
    "madohub_nb.stats": 0,  # intervals and tests over numbers (numpy, pandas): exp.summary()  # patterns compiled on first use (agent tables and adapters)
    "madohub_nb.io": 1,
    "madohub_nb.agents": 1,
    "madohub_nb.render": 1,
    "madohub_nb.plot": 1,
    "madohub_nb.engine": 1,  # the loop and its owned tasks: io/ spawns through it too
    "madohub_nb.pipeline": 2,
    "madohub_nb.hub_settings": 0,  # the settings table: words and validators, no adapter
    "madohub_nb.tile_registry": 3,  # the runtime's parts: tile registry, route registry, recorder
    "madohub_nb.tile_table": 3,  # the tile registry's parts: tiles by name and pane, making
    "madohub_nb.tile_factory": 3,  # and adopting them, hooks, worktrees, remote hosts
    "madohub_nb.hook_plumbing": 3,
    "madohub_nb.channel_plumbing": 3,
    "madohub_nb.tile_worktrees": 3,
    "madohub_nb.host_links": 3,
    "madohub_nb.route_registry": 3,
    "madohub_nb.recorder": 3,
    "madohub_nb.parts": 3,  # RuntimeParts: what the runtime's helpers ask of it (a Protocol)
    "madohub_nb.services": 3,
    "madohub_nb.mcp_server": 3,  # hub.mcp: the MCP server joined to the tools' work
    "madohub_nb.shutdown": 3,  # the close: any thread, bounded, at exit; the closed state
    "madohub_nb.tile_start": 3,  # the hub's features, each in its own module: hub.tile's work,
    "madohub_nb.route_start": 3,  # hub.connect / gather's,
    "madohub_nb.workflow_runner": 3,  # hub.workflow() / run(),
    "madohub_nb.by_hand": 3,  # hub.send / keys / replay
    "madohub_nb.runtime": 3,
    "madohub_nb.hub": 4,
    "madohub_nb.experiment_worktrees": 3,  # each run's fresh worktrees
    "madohub_nb.experiment_hosts": 3,  # the hosts an experiment spreads its runs over
    "madohub_nb.experiment": 4,  # runs of a workflow's variants, each on a hub of its own
    "madohub_nb.score": 4,  # scorers of an experiment's runs (mh.score), on the run's open hub
    "madohub_nb.playground": 4,  # transforms tried on logged answers (mh.try_transforms)
    "madohub_nb.notebook": 5,
    "madohub_nb.demo": 5,  # stand-in agents and the demo script, on top of the hub
}
OUTSIDE = ("madohub_nb", "madohub_nb.testing", "madohub_nb.__main__")
MACHINE_SIDE = "madohub_nb.io"
"""The only place that may tell machines apart: everything else asks ``tile.machine``."""
CLASSES_OF_A_PLACE = frozenset(
    {"Tile", "RemoteTile", "Machine", "LocalMachine", "SshMachine", "MemoryMachine", "Process"}
)
"""Classes whose ``isinstance`` test would tell a pane here from one elsewhere (``Process``:
``psutil.Process``, the old local/remote tell)."""
TASK_HOME = "madohub_nb.engine"
"""The one module that makes tasks and threads: everything else calls its ``spawn`` (a task
with an owner), ``aside`` or ``side_by_side`` (a shutdown step waited on for a stated time)."""
TASK_MAKERS_ALLOWED: dict[str, str] = {
    "madohub_nb.testing._http": "a test's local HTTP server (a fake API) runs its own "
    "thread, outside any hub",
    "madohub_nb.testing.fake_opencode": "a test's stand-in OpenCode server runs its HTTP "
    "server and its scripted turns on threads of its own, outside any hub",
    "madohub_nb.testing.fake_codex_app_server": "a test's stand-in codex app-server, a process "
    "of its own (its own asyncio.run), outside any hub",
    "madohub_nb.demo.standin_codex": "the stand-in Codex TUI, a process of its own outside any "
    "hub, reads its app-server (codex --remote) on a thread and loop of its own",
}
"""Modules that may start a task or thread themselves, and why."""
KEPT_APART: tuple[tuple[str, str, str], ...] = (
    (
        "madohub_nb.render",
        "madohub_nb.notebook madohub_nb.hub madohub_nb.plot",
        "core objects import no HTML rendering: the notebook layer attaches their views "
        "(madohub_nb.notebook.display)",
    ),
    (
        "madohub_nb.plot",
        "madohub_nb.notebook",
        "the log (and every core object) imports no plotting: RoundLog.plot draws with the "
        "plotter the notebook layer attaches",
    ),
)
"""(what is imported, the only modules that may import it, why): views kept apart from the
objects they show, type-only imports included. (The settings table imports no adapter: it
is in layer 0, below io/.)"""


COMPOSITION_LIMITS = {"hub.py": 250, "runtime.py": 150}
"""Most lines of the composition root (issue 37, item 6): the hub validates and delegates, the
runtime builds its parts and orders their shutdown; features live in modules of their own."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> int | None:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return LAYERS[prefix]
    return None


def _outside(module: str) -> bool:
    return module in OUTSIDE or any(module.startswith(o + ".") for o in OUTSIDE[1:])


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> list[tuple[str, list[str], int, bool]]:
    """(imported module, names, line, type-only) for every package import in ``path``."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    type_only_lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            for inner in ast.walk(node):
                if hasattr(inner, "lineno"):
                    type_only_lines.add(inner.lineno)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("madohub_nb"):
                continue
            names = [a.name for a in node.names]
            if node.module is None:  # from . import x: x is a module
                for name in names:
                    found.append(
                        (f"{target}.{name}", [], node.lineno, node.lineno in type_only_lines)
                    )
            else:
                found.append((target, names, node.lineno, node.lineno in type_only_lines))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("madohub_nb"):
                    found.append((alias.name, [], node.lineno, node.lineno in type_only_lines))
    return found


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _graph(type_only_too: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for target, _, _, type_only in _imports(path):
            if type_only and not type_only_too:
                continue
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != module:
                graph[module].add(target)
            if type_only_too and not type_only:
                # Importing a.b.c runs a.b's __init__ first (the package facades re-export),
                # unless a.b is the importer's own package (run already); not the top facade.
                package = target.rsplit(".", 1)[0]
                while package.count(".") >= 1:
                    if (
                        package in modules
                        and package != module
                        and not module.startswith(package + ".")
                    ):
                        graph[module].add(package)
                    package = package.rsplit(".", 1)[0]
    return graph


def test_every_module_of_the_package_has_a_layer() -> None:
    unplaced = [m for m in _modules() if _layer(m) is None and not _outside(m)]
    assert not unplaced, f"give these modules a layer in LAYERS: {unplaced}"


def test_imports_only_point_down_the_pipeline() -> None:
    upward = []
    for module, path in _modules().items():
        mine = _layer(module)
        if mine is None:
            continue
        for target, _, line, _ in _imports(path):
            theirs = _layer(target)
            if _outside(target) and target != "madohub_nb":
                upward.append(f"{module}:{line} imports {target} (outside the layers)")
            elif theirs is not None and theirs > mine:
                upward.append(f"{module}:{line} (layer {mine}) imports {target} (layer {theirs})")
    assert not upward, "imports that point up:\n" + "\n".join(upward)


def test_no_module_imports_another_modules_private_name() -> None:
    private = []
    for module, path in _modules().items():
        for target, names, line, _ in _imports(path):
            if target == module:
                continue
            private += [f"{module}:{line} imports {target}.{n}" for n in names if n.startswith("_")]
    assert not private, "\n".join(private)


def _package_of(module: str) -> str:
    return (
        module
        if (PACKAGE.parent / module.replace(".", "/")).is_dir()
        else module.rpartition(".")[0]
    )


def test_there_is_no_import_cycle() -> None:
    """No circle among the package's modules, counting type-only imports (under
    ``TYPE_CHECKING``) too: a circle of types is still two modules that need each other.
    A package's ``__init__`` importing its own modules, and they it, is no circle here."""
    graph = _graph(type_only_too=True)
    for module in graph:  # (a module importing its own package's facade)
        graph[module] = {t for t in graph[module] if t != _package_of(module) or t == module}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_hub_and_runtime_stay_small() -> None:
    """``hub.py`` and ``runtime.py`` compose; a feature grown there belongs in its own module."""
    over = {
        name: lines
        for name, most in COMPOSITION_LIMITS.items()
        if (lines := len((PACKAGE / name).read_text().splitlines())) > most
    }
    assert not over, (
        f"{over} lines, at most {COMPOSITION_LIMITS}: move the feature into a module of its own "
        "(the hub validates and delegates; the runtime builds parts and orders their shutdown)"
    )


def _class_names(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Tuple):
        return [n for elt in node.elts for n in _class_names(elt)]
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.BinOp):  # isinstance(x, A | B)
        return _class_names(node.left) + _class_names(node.right)
    return []


def test_only_io_tells_tiles_and_machines_apart_by_class() -> None:
    """One tile class on any machine: code outside io/ asks ``tile.machine``, never
    ``isinstance(tile, RemoteTile)`` or ``isinstance(proc, psutil.Process)``."""
    found = []
    for module, path in _modules().items():
        if module == MACHINE_SIDE or module.startswith(MACHINE_SIDE + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
                and len(node.args) == 2
            ):
                continue
            told = CLASSES_OF_A_PLACE.intersection(_class_names(node.args[1]))
            if told:
                found.append(f"{module}:{node.lineno} tests the class {', '.join(sorted(told))}")
    assert not found, "ask tile.machine instead:\n" + "\n".join(found)


def _under(module: str, prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes.split())


def test_views_are_imported_only_from_above() -> None:
    """No core object imports HTML rendering, the log no plotting (each in KEPT_APART)."""
    found = []
    for module, path in _modules().items():
        if _outside(module):
            continue
        for target, _, line, _ in _imports(path):
            for kept, allowed, why in KEPT_APART:
                if _under(target, kept) and not _under(module, kept + " " + allowed):
                    found.append(f"{module}:{line} imports {target} ({why})")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("planted_in", "source", "check", "expected"),
    [
        (
            "pipeline/tile.py",
            "from ..render import html_for_tile\n",
            "test_views_are_imported_only_from_above",
            "tile:\\d+ imports madohub_nb.render",
        ),
        (
            "route_registry.py",
            "from .render import html_for_route\n",
            "test_views_are_imported_only_from_above",
            "route_registry:\\d+ imports madohub_nb.render",
        ),
        (
            "io/log.py",
            "from ..plot import timeline_figure\n",
            "test_views_are_imported_only_from_above",
            "io.log:\\d+ imports madohub_nb.plot",
        ),
        (
            "io/log.py",
            "if TYPE_CHECKING:\n    from ..plot import TimelineFigure\n",
            "test_views_are_imported_only_from_above",
            "io.log:\\d+ imports madohub_nb.plot",
        ),
        (
            "hub_settings.py",
            "from .io.tmux import check_socket_name\n",
            "test_imports_only_point_down_the_pipeline",
            "hub_settings:\\d+ \\(layer 0\\) imports madohub_nb.io.tmux",
        ),
    ],
)
def test_a_view_or_adapter_imported_from_below_is_caught(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    planted_in: str,
    source: str,
    check: str,
    expected: str,
) -> None:
    """HTML rendering imported by a core object, plotting by the log, an adapter by the
    settings table (appended to the real module): the check fails."""
    import shutil

    copy = tmp_path / "madohub_nb"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(f"{__name__}.PACKAGE", copy)
    globals()[check]()
    with (copy / planted_in).open("a") as module:
        module.write("\n" + source)
    with pytest.raises(AssertionError, match=expected):
        globals()[check]()


def _task_makers(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every ``create_task``/``ensure_future`` call and thread made."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("create_task", "ensure_future", "Thread"):
            found.append((node.lineno, name))
        elif isinstance(func, ast.Attribute) and func.attr == "run" and node.args:
            # context.run(loop.create_task, ...): a task made all the same
            first = node.args[0]
            if isinstance(first, ast.Attribute) and first.attr == "create_task":
                found.append((node.lineno, "create_task"))
    return found


def test_only_the_engine_makes_tasks_and_threads() -> None:
    """Every task has an owner (the engine's ``spawn``) and every blocking shutdown step a
    stated wait (its ``aside``/``side_by_side``): no module makes its own, unless allowed."""
    found = []
    for module, path in _modules().items():
        if module == TASK_HOME or module in TASK_MAKERS_ALLOWED:
            continue
        for line, what in _task_makers(ast.parse(path.read_text(), str(path))):
            found.append(f"{module}:{line} makes a task or thread ({what})")
    assert not found, (
        "spawn it with madohub_nb.engine.spawn (or aside/side_by_side for a shutdown step), "
        "or add the module to TASK_MAKERS_ALLOWED with why:\n" + "\n".join(found)
    )


def test_the_shipped_kinds_are_the_registrys() -> None:
    """The kinds are the modules of ``agents/kinds/`` that export ``KIND``, found there (no
    list to keep beside them: ``model.py``, the words layer, names no kind), in their order."""
    from madohub_nb import model
    from madohub_nb.agents.kinds import KINDS, SHIPPED_KINDS

    modules = {
        p.stem
        for p in (PACKAGE / "agents" / "kinds").glob("*.py")
        if "\nKIND: Final = " in p.read_text()
    }
    assert set(SHIPPED_KINDS) == modules
    assert not hasattr(model, "AGENT_KINDS")
    orders = [(KINDS[n].order, n) for n in SHIPPED_KINDS]
    assert orders == sorted(orders)
    assert SHIPPED_KINDS[:2] == ("claude", "codex") and SHIPPED_KINDS[-2:] == ("shell", "terminal")


PLANTED_KIND = """from dataclasses import replace

from .base import AgentKind
from .terminal import PROFILE as _TERMINAL

KIND = AgentKind(replace(_TERMINAL, kind="planted"))
"""


def test_a_module_dropped_into_the_kinds_is_a_kind(tmp_path: Path) -> None:
    """In a copy of the package, one new module in ``agents/kinds/`` is a kind: listed
    before the shell and the terminal, accepted by ``agent=``; nothing else was edited."""
    import shutil
    import subprocess
    import sys

    copy = tmp_path / "madohub_nb"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "agents" / "kinds" / "planted.py").write_text(PLANTED_KIND)
    code = (
        "from madohub_nb.agents.kinds import SHIPPED_KINDS\n"
        "from madohub_nb.agents.profiles import get_profile\n"
        "print(','.join(SHIPPED_KINDS), get_profile('planted').kind)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    kinds, profile = done.stdout.split()
    assert kinds.split(",")[-3:] == ["planted", "shell", "terminal"] and profile == "planted"


KIND_HOMES = (
    "madohub_nb.agents.kinds",
    "madohub_nb.io.agent_records",
    "madohub_nb.demo",
    "madohub_nb.testing",
)
"""Where an agent kind may be named in a comparison: the kinds' own modules and the readers
of the formats the agents write (``io/agent_records/<kind>.py`` and its table of formats); and the stand-ins and fakes of particular agents
(``demo/``, ``testing/``), whose demo picks a real Claude Code by name."""
EXTRACTOR_WORDS = ("jsonl", "rollout")
"""Extraction methods that name one kind's format (``profile.extractor == "jsonl"``)."""
METHOD_WORDS = ("method", "extractor")
"""``x.method != "terminal"`` names an extraction method (the screen), not the kind."""


def _kind_words(node: ast.expr) -> list[str]:
    from madohub_nb.agents.kinds import SHIPPED_KINDS

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        words = (*SHIPPED_KINDS, *EXTRACTOR_WORDS)
        return [node.value] if node.value in words else []
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [w for elt in node.elts for w in _kind_words(elt)]
    return []


def test_no_agent_kind_is_compared_outside_its_module() -> None:
    """No ``agent == "claude"``, ``kind in ("codex", ...)`` or ``profile.extractor ==
    "jsonl"`` outside ``agents/kinds/``: what differs by kind is asked of the kind."""
    found = []
    for module, path in _modules().items():
        if _outside(module) or any(module == h or module.startswith(h + ".") for h in KIND_HOMES):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                words = []
                for i, operand in enumerate(operands):
                    others = [ast.unparse(o) for j, o in enumerate(operands) if j != i]
                    for word in _kind_words(operand):
                        if word == "terminal" and all(o.endswith(METHOD_WORDS) for o in others):
                            continue
                        words.append(word)
                if words:
                    found.append(f"{module}:{node.lineno} compares {ast.unparse(node)}")
            elif isinstance(node, ast.MatchValue) and _kind_words(node.value):
                found.append(f"{module}:{node.lineno} matches {ast.unparse(node.value)}")
    assert not found, "ask the agent's kind (agents/kinds/<kind>.py):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "import asyncio\nasync def f() -> None:\n    asyncio.get_running_loop().create_task(f())\n",
        "import asyncio\nasync def f() -> None:\n    asyncio.ensure_future(f())\n",
        "import threading\ndef f() -> None:\n    threading.Thread(target=f).start()\n",
        "from threading import Thread\ndef f() -> None:\n    Thread(target=f).start()\n",
    ],
)
def test_the_task_rule_catches_a_planted_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """Planted in pipeline/, a task or thread made by hand fails the rule."""
    import shutil

    copy = tmp_path / "madohub_nb"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(f"{__name__}.PACKAGE", copy)
    test_only_the_engine_makes_tasks_and_threads()
    (copy / "pipeline" / "planted.py").write_text(source)
    with pytest.raises(AssertionError, match="madohub_nb.pipeline.planted:[23] makes a task"):
        test_only_the_engine_makes_tasks_and_threads()


@pytest.mark.parametrize(
    ("source", "check", "expected"),
    [
        (
            "from ..hub import Hub\n",
            "test_imports_only_point_down_the_pipeline",
            "imports madohub_nb.hub",
        ),
        (
            "from .log import _record\n",
            "test_no_module_imports_another_modules_private_name",
            "_record",
        ),
        (
            "from ..pipeline import round\n",
            "test_imports_only_point_down_the_pipeline",
            "imports madohub_nb.pipeline",
        ),
        ("from . import log\n", "test_there_is_no_import_cycle", "io.log -> madohub_nb.io.planted"),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .log import RoundLog\n",
            "test_there_is_no_import_cycle",
            "io.log -> madohub_nb.io.planted",
        ),
    ],
)
def test_the_checks_catch_what_they_look_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, check: str, expected: str
) -> None:
    """Plant an offending module in a copy of the package: the checks must fail."""
    import shutil

    copy = tmp_path / "madohub_nb"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "io" / "planted.py").write_text(source)
    with (copy / "io" / "log.py").open("a") as log:  # for the cycle: log imports planted
        log.write("\nfrom . import planted  # noqa\n")
    monkeypatch.setattr(f"{__name__}.PACKAGE", copy)
    with pytest.raises(AssertionError, match=expected):
        globals()[check]()


@pytest.mark.parametrize(
    "source",
    [
        "def f(t: object) -> bool:\n    return isinstance(t, RemoteTile)\n",
        "import psutil\ndef f(p: object) -> bool:\n    return isinstance(p, psutil.Process)\n",
        "def f(m: object) -> bool:\n    return isinstance(m, (int, SshMachine))\n",
        "def f(m: object) -> bool:\n    return isinstance(m, LocalMachine | None)\n",
    ],
)
def test_the_class_rule_catches_a_planted_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """Planted outside io/ (in pipeline/), an isinstance test of a place's class fails the
    rule; the same code inside io/ does not."""
    import shutil

    copy = tmp_path / "madohub_nb"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(f"{__name__}.PACKAGE", copy)
    (copy / "io" / "planted.py").write_text(source)
    test_only_io_tells_tiles_and_machines_apart_by_class()
    (copy / "pipeline" / "planted.py").write_text(source)
    with pytest.raises(AssertionError, match="madohub_nb.pipeline.planted:[23] tests the class"):
        test_only_io_tells_tiles_and_machines_apart_by_class()


OPTIONS_HOME = "madohub_nb.pipeline.options"
"""The one table of the options of ``hub.tile`` / ``connect`` / ``gather`` (issue 37, item 4)."""
OPTION_TAKERS = frozenset(
    {"tile", "connect", "gather", "build_route", "build_gather", "make_route"}
)
"""The calls that take those options: they read the table, they declare none of them (the
``%madohub`` flags are checked against the table in tests/test_options_table.py)."""


def test_options_are_declared_only_in_their_table() -> None:
    """No call that takes options declares one as a parameter: a new option is one row."""
    from madohub_nb.pipeline.options import ROUTE, TILE

    names = {o.name for o in (*ROUTE, *TILE)}
    found = []
    for module, path in _modules().items():
        if module == OPTIONS_HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                node.name in OPTION_TAKERS
            ):
                a = node.args
                declared = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                if again := [p for p in declared if p in names]:
                    found.append(f"{module}:{node.lineno} {node.name}() declares {again}")
    assert not found, "options declared outside their table (add a row to it instead):\n" + (
        "\n".join(found)
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "def connect(self, source, target, trigger='on-idle', **options): ...\n",
            r"planted:1 connect\(\) declares \['trigger'\]",
        ),
        (
            "async def build_route(context, *, cooldown_ms: int = 3000): ...\n",
            r"planted:1 build_route\(\) declares \['cooldown_ms'\]",
        ),
    ],
)
def test_the_options_rule_catches_a_planted_declaration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, expected: str
) -> None:
    """An option declared again outside its table, planted in a copy: the rule fails."""
    import shutil

    copy = tmp_path / "madohub_nb"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(f"{__name__}.PACKAGE", copy)
    test_options_are_declared_only_in_their_table()
    (copy / "pipeline" / "planted.py").write_text(source)
    with pytest.raises(AssertionError, match=expected):
        test_options_are_declared_only_in_their_table()


@pytest.mark.parametrize(
    "source",
    [
        'def f(agent: str) -> bool:\n    return agent == "claude"\n',
        'def f(agent: str) -> bool:\n    return agent not in ("codex", "gemini")\n',
        'def f(p: object) -> bool:\n    return p.extractor == "jsonl"  # type: ignore\n',
        'def f(agent: str) -> int:\n    match agent:\n        case "pi":\n            return 1\n'
        "    return 0\n",
    ],
)
def test_the_kind_rule_catches_a_planted_comparison(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """Planted in agents/kinds/ the comparison passes; in pipeline/ it fails the rule. A
    comparison with an extraction method (``x.method != "terminal"``) is no kind's."""
    import shutil

    copy = tmp_path / "madohub_nb"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(f"{__name__}.PACKAGE", copy)
    (copy / "agents" / "kinds" / "planted.py").write_text(source)
    (copy / "pipeline" / "method.py").write_text(
        'def f(x: object) -> bool:\n    return x.method != "terminal"  # type: ignore\n'
    )
    test_no_agent_kind_is_compared_outside_its_module()
    (copy / "pipeline" / "planted.py").write_text(source)
    with pytest.raises(
        AssertionError, match=r"madohub_nb.pipeline.planted:[234] (compares|matches)"
    ):
        test_no_agent_kind_is_compared_outside_its_module()


RECORDS_HOME = "madohub_nb.io.agent_records"
"""The one home of agent records: every reader of an agent's own record, and what they share."""
RECORD_READING = {
    f"{RECORDS_HOME}.base": frozenset(
        {"iter_lines_backwards", "open_regular", "json_records", "check_path"}
    ),
    f"{RECORDS_HOME}.common": None,  # the session-record readers' shared parts: all of it
    f"{RECORDS_HOME}.transcript": None,  # Claude's and Codex's shared parts: all of it
}
"""What reads a record's bytes (module -> its reading names, None: the whole module). Outside
the home, code asks a reader (``agent_records.read_last_response``, ``turn_finished``, a
kind's record reader) and uses the answer's types (``base.Extraction``, ``TurnUsage``)."""
FORMER_HOMES = ("madohub_nb.io.records", "madohub_nb.io.transcripts", "madohub_nb.io.hookcall")
"""Where records and hooks lived before they had one home each (issue 37, item 6)."""
HOOK_COMMAND = "madohub_nb.io.hooks.command"
"""The hook command agents run by path (``python -I -S …/command.py``), also as a lone copy
on a host: the standard library is all it may import."""


def test_an_agent_record_is_read_only_in_its_home() -> None:
    """Only ``io/agent_records/`` reads an agent's record (its bytes, lines, JSON records):
    "where is the answer read?" has one answer. The old homes are gone, no shim left."""
    modules = _modules()
    found = [f"{m} still exists" for m in FORMER_HOMES if m in modules]
    if modules.get("madohub_nb.io.hooks", PACKAGE).name != "__init__.py":
        found.append("madohub_nb.io.hooks is a module again (its home is the package io/hooks/)")
    for module, path in modules.items():
        if module == RECORDS_HOME or module.startswith(RECORDS_HOME + "."):
            continue
        for target, names, line, _ in _imports(path):
            if target not in RECORD_READING:
                continue
            reading = RECORD_READING[target]
            hits = names if reading is None else sorted(reading & set(names))
            if hits or reading is None:
                found.append(f"{module}:{line} reads records itself ({target} {hits or ''})")
    assert not found, (
        f"ask a reader of {RECORDS_HOME} (read_last_response, turn_finished, a kind's "
        "record reader) instead:\n" + "\n".join(found)
    )


def test_the_hook_command_imports_only_the_standard_library() -> None:
    """``io/hooks/command.py`` runs by its path with ``-I -S`` (here, and as a copy of that
    one file on a host, where the package is not installed): no relative import, no import
    of the package, nothing outside the standard library."""
    import sys

    path = _modules()[HOOK_COMMAND]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith(".") or name.split(".")[0] not in sys.stdlib_module_names:
                found.append(f"{HOOK_COMMAND}:{node.lineno} imports {name}")
    assert not found, "the hook command runs alone, by path:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("planted_in", "source", "check", "expected"),
    [
        (
            "pipeline/planted.py",
            "from ..io.agent_records.base import Extraction, iter_lines_backwards\n",
            "test_an_agent_record_is_read_only_in_its_home",
            r"pipeline.planted:\d+ reads records itself .*\['iter_lines_backwards'\]",
        ),
        (
            "agents/kinds/planted.py",
            "from ...io.agent_records.transcript import tidy\n",
            "test_an_agent_record_is_read_only_in_its_home",
            r"kinds.planted:\d+ reads records itself",
        ),
        (
            "io/transcripts.py",
            "from .agent_records import read_last_response  # noqa: F401\n",
            "test_an_agent_record_is_read_only_in_its_home",
            "madohub_nb.io.transcripts still exists",
        ),
        (
            "io/hooks/command.py",
            "from .channel import HookEvent  # noqa\n",
            "test_the_hook_command_imports_only_the_standard_library",
            r"command:\d+ imports \.channel",
        ),
        (
            "io/hooks/command.py",
            "import psutil  # noqa\n",
            "test_the_hook_command_imports_only_the_standard_library",
            r"command:\d+ imports psutil",
        ),
    ],
)
def test_the_one_home_rules_catch_a_planted_offender(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    planted_in: str,
    source: str,
    check: str,
    expected: str,
) -> None:
    """Planted in a copy of the package, a record read outside its home, an old home back, or
    a package import in the hook command fails its rule; the copy as it is passes."""
    import shutil

    copy = tmp_path / "madohub_nb"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(f"{__name__}.PACKAGE", copy)
    globals()[check]()
    with (copy / planted_in).open("a") as module:
        module.write("\n" + source)
    with pytest.raises(AssertionError, match=expected):
        globals()[check]()
