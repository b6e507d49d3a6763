"""Workflow files (issue 27, item 1): a hub's tiles and routes saved as TOML, loaded in a
fresh process and run there with the same tiles, routes and prompts (checked at the target's
own transcript); bad files refused before anything starts, naming ``file:table.key``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tomllib
from conftest import FAST_IDLE_MS, log_rows, start_standin, user_prompts, wait_until
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from test_magics import hub_ip, ip  # noqa: F401  (the shell fixtures, over a real hub)

import madohub_nb as mh
from madohub_nb.io.log import ROUND_COLUMNS
from madohub_nb.pipeline.workflow import (
    GATHER_OPTIONS,
    ROUTE_OPTIONS,
    TILE_OPTIONS,
    RouteSpec,
    Workflow,
    toml_string,
)

TESTS = Path(__file__).resolve().parent

# Pure parts ---------------------------------------------------------------------------

# A value of each option that is not its default (the tables are the one list of options).
TILE_VALUES: dict[str, Any] = {
    "agent": "claude", "command": "claude --model x", "cwd": "/tmp", "env": {"A": "1", "B_2": "x y"},
    "ready_quiet_ms": 1500, "ready_pattern": r"\$ $", "completion_pattern": "DONE",
    "host": "box", "hooks": False, "worktree": "madohub/w-1", "mcp": ["r1", "r2"],
    "allow_shell": True, "mcp_max_rounds": 3, "mcp_cooldown_ms": 2500, "channel": False,
}  # fmt: skip
ROUTE_VALUES: dict[str, Any] = {
    "trigger": "on-keyword", "transform": "full-output", "template": 'Say "hi":\n\t{output}\\',
    "max_rounds": 7, "cooldown_ms": 2000, "stop_keyword": "LGTM", "dispatch": "shadow",
    "pattern": "READY", "allow_shell": True, "delivery": "paste", "model": "claude-x",
    "completion_pattern": "END", "max_cost_usd": 0.5, "max_tokens": 9000, "when": r"\bok\b",
    "unless": "no", "approve": True, "approve_timeout_s": 90.5, "timeout_s": 600,
}  # fmt: skip


def test_the_option_tables_name_every_keyword_of_tile_connect_and_gather() -> None:
    import inspect

    def keywords(method: Any, skip: set[str]) -> set[str]:
        return set(inspect.signature(method).parameters) - skip

    assert {o.name for o in TILE_OPTIONS} == keywords(mh.Hub.tile, {"self", "name", "pane"})
    assert {o.name for o in ROUTE_OPTIONS} == keywords(mh.Hub.connect, {"self", "source", "target"})
    assert {o.name for o in GATHER_OPTIONS} == keywords(
        mh.Hub.gather, {"self", "sources", "target"}
    )
    for table, method in ((ROUTE_OPTIONS, mh.Hub.connect), (GATHER_OPTIONS, mh.Hub.gather)):
        params = inspect.signature(method).parameters
        assert {o.name: o.default for o in table} == {o.name: params[o.name].default for o in table}


def test_every_option_round_trips_through_the_file(tmp_path: Path) -> None:
    assert set(TILE_VALUES) == {o.name for o in TILE_OPTIONS}
    assert set(ROUTE_VALUES) == {o.name for o in GATHER_OPTIONS}
    connect = {k: v for k, v in ROUTE_VALUES.items() if k != "timeout_s"}
    wf = Workflow(
        "review",
        {"writer": dict(TILE_VALUES), "r1": {"command": "x"}, "r2": {"command": "y"}},
        [
            RouteSpec(["writer"], "r1", connect),
            RouteSpec(["writer"], "r1", {"template": "second"}),  # the same pair again: #2
            RouteSpec(["r1", "r2"], "writer", dict(ROUTE_VALUES), gather=True),
            RouteSpec(["r2"], "writer", {"timeout_s": 1.5}, gather=True),  # a one-source gather
        ],
    )
    digest = wf.save(tmp_path / "review.toml")
    again = Workflow.load(tmp_path / "review.toml")
    assert (again.name, again.tiles, again.routes) == (wf.name, wf.tiles, wf.routes)
    assert again.route_keys() == ["writer->r1", "writer->r1#2", "r1+r2->writer", "r2->writer"]
    assert again.hash == digest and len(digest) == 64
    assert again.dumps() == wf.dumps()  # stable: the same workflow writes the same bytes


def test_the_file_leaves_defaults_out_and_keeps_the_order_made() -> None:
    wf = Workflow(
        "w",
        {"b": {"command": "x"}, "a": {"command": "y"}},
        [RouteSpec(["b"], "a", {"max_rounds": 5, "template": "T {output}"})],
    )
    assert wf.dumps() == textwrap.dedent(
        """\
        name = "w"

        [tiles.b]
        command = "x"

        [tiles.a]
        command = "y"

        [routes."b->a"]
        template = "T {output}"
        """
    )


@pytest.mark.parametrize(
    "text", ["", 'a"b', "back\\slash", "line\nbreak\r\n", "tab\tbell\x07del\x7f", "ünï 🎉", "'''"]
)
def test_toml_strings_read_back_as_written(text: str) -> None:
    assert tomllib.loads(f"v = {toml_string(text)}")["v"] == text


TILES = '[tiles.writer]\ncommand = "w"\n\n[tiles.reviewer]\ncommand = "r"\n'


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        ('colour = "red"\n' + TILES, "colour", "unknown key; allowed: name, tiles, routes"),
        (TILES + "comand = 1\n", "tiles.reviewer.comand", "unknown key; allowed: agent, command"),
        (TILES.replace('"r"', "3"), "tiles.reviewer.command", "must be str, got 3"),
        ('[tiles.w]\nagent = "clod"\n', "tiles.w.agent", "unknown agent 'clod'; allowed: claude"),
        ('[tiles.w]\nhooks = "yes"\n', "tiles.w.hooks", "must be bool"),
        ('[tiles."9x"]\ncommand = "x"\n', "tiles.9x", "tile name '9x' is not allowed"),
        (TILES + '[tiles.writer]\ncommand = "again"\n', "tiles.writer", "named twice"),
        (TILES + '[routes."writer->reviewer"]\nmax_rounds = 99\n',
         "routes.writer->reviewer.max_rounds", "must be from 1 to 20, got 99"),
        (TILES + '[routes."writer->reviewer"]\ntrigger = "sometimes"\n',
         "routes.writer->reviewer.trigger", "unknown trigger 'sometimes'; allowed: on-idle"),
        (TILES + '[routes."writer->reviewer"]\nwhen = "("\n',
         "routes.writer->reviewer.when", "not a valid regular expression"),
        (TILES + '[routes."writer->reviewer"]\ntimeout_s = 5\n',
         "routes.writer->reviewer.timeout_s", "unknown key"),  # a gather's, not a connect's
        (TILES + '[routes."writer->shipper"]\n',
         "routes.writer->shipper", "names tile 'shipper', which the workflow does not have"),
        (TILES + '[routes."writer=>reviewer"]\n', "routes.writer=>reviewer", "named by its id"),
        (TILES + '[routes."writer->writer"]\n', "routes.writer->writer", "to itself"),
        (TILES + '[routes."writer->reviewer#2"]\n', "routes.writer->reviewer#2", "numbered"),
        (TILES + '[tiles.writer.env]\nANTHROPIC_API_KEY = "abc"\n',
         "tiles.writer.env.ANTHROPIC_API_KEY", "holds an API key"),
        (TILES + '[tiles.reviewer.env]\nMY_TOKEN = "sk-ant-api03-abcdefghijklmnop"\n',
         "tiles.reviewer.env.MY_TOKEN", "holds an API key"),
        (TILES.replace('"r"', '"claude --key sk-ant-api03-abcdefghij"'),
         "tiles.reviewer.command", "holds an API key"),
        (TILES + '[routes."writer->reviewer"]\ntemplate = "sk-ant-api03-abcdefgh {output}"\n',
         "routes.writer->reviewer.template", "holds an API key"),
        ("tiles = 3\n", "tiles", "must be a table of tables"),
        ("[tiles\n", "", "not a valid TOML file"),
    ],
)  # fmt: skip
def test_a_bad_workflow_file_is_an_error_naming_file_table_key(
    tmp_path: Path, text: str, where: str, says: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(mh.MadohubValueError) as caught:
        Workflow.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{where}:" if where else f"{path}: "), message
    assert says in message, message


def test_a_workflow_holding_a_key_is_refused_when_made_too() -> None:
    with pytest.raises(mh.MadohubValueError, match=r"tiles\.w\.env\.OPENAI_API_KEY: holds an API"):
        Workflow("w", {"w": {"command": "x", "env": {"OPENAI_API_KEY": "not-a-real-one"}}})


# On a real hub ---------------------------------------------------------------------------


def _wire(hub: Any, project: Path) -> tuple[Any, Any]:
    writer = start_standin(hub, "writer", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project)
    route = hub.connect(
        "writer", "reviewer", template="Review this:\n{output}", max_rounds=3, stop_keyword="LGTM"
    )
    return writer, reviewer, route  # type: ignore[return-value]


def test_hub_workflow_is_todays_tiles_and_routes_with_the_options_given(
    hub: Any, project: Path
) -> None:
    _wire(hub, project)
    start_standin(hub, "r2", cwd=project)
    hub.gather(["reviewer", "r2"], "writer", template="All:\n{answers}", timeout_s=60)
    stopped = hub.connect("r2", "reviewer")
    stopped.stop()
    wf = hub.workflow("review")
    assert list(wf.tiles) == ["writer", "reviewer", "r2"]
    assert wf.tiles["writer"]["cwd"] == str(project) and wf.tiles["writer"]["agent"] == "claude"
    assert wf.tiles["writer"]["env"] == {"MADOHUB_STANDIN_THINK_S": "0.3"}
    assert wf.route_keys() == ["writer->reviewer", "reviewer+r2->writer"]  # the stopped one out
    assert wf.routes[0].options == {
        "template": "Review this:\n{output}", "max_rounds": 3, "stop_keyword": "LGTM"
    }  # fmt: skip
    assert wf.routes[1].gather and wf.routes[1].options["timeout_s"] == 60


def test_an_adopted_pane_cannot_be_kept_in_a_workflow(hub: Any) -> None:
    from conftest import bash_pane

    pane = bash_pane(hub, "sh")
    hub.tile("sh", agent="shell", pane=pane)
    with pytest.raises(mh.MadohubValueError, match="tile 'sh' adopted a pane"):
        hub.workflow()


RUN_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
import madohub_nb as mh
from conftest import user_prompts, wait_until, log_rows

wf = mh.Workflow.load({path!r})
with mh.Hub(socket_name={socket!r}, idle_delay_ms={idle}, log_path={log!r}) as hub:
    routes = hub.run(wf)
    writer, reviewer = hub.tiles["writer"], hub.tiles["reviewer"]
    wait_until(lambda: writer.state == "idle" and reviewer.state == "idle", 20, what="idle")
    wait_until(lambda: routes[0].ready.is_set(), 10)
    hub.send("writer", "Write a slug function.").result(30)
    wait_until(lambda: routes[0].rounds == 1 and routes[0].last_status, 40, what="a round")
    rows = log_rows(hub, routes[0])
    print(json.dumps({{
        "tiles": {{n: [t.agent, t.pane_path()] for n, t in hub.tiles.items()}},
        "routes": [r.id for r in routes],
        "reviewer_prompts": user_prompts(reviewer),
        "writer_prompts": user_prompts(writer),
        "rows": [{{k: r[k] for k in ("status", "workflow", "workflow_hash", "template")}}
                 for r in rows],
    }}))
"""


def test_a_saved_workflow_runs_in_a_fresh_process_with_the_same_tiles_routes_and_prompts(
    hub: Any, project: Path, tmp_path: Path, tmux_socket: str
) -> None:
    _wire(hub, project)
    path = tmp_path / "review.toml"
    digest = hub.workflow("review").save(path)
    hub.close()  # the first hub's tiles are gone: only the file carries the wiring over

    script = RUN_SCRIPT.format(
        tests=str(TESTS), path=str(path), socket=tmux_socket, idle=FAST_IDLE_MS,
        log=str(tmp_path / "fresh.sqlite3"),
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["tiles"] == {
        "writer": ["claude", str(project)],
        "reviewer": ["claude", str(project)],
    }
    assert got["routes"] == ["writer->reviewer#1"]
    assert got["writer_prompts"] == ["Write a slug function."]
    # The echo stand-in answers "Done: <prompt>"; the template came from the file.
    assert got["reviewer_prompts"] == ["Review this:\nDone: Write a slug function."]
    assert got["rows"] == [
        {"status": "delivered", "workflow": "review", "workflow_hash": digest,
         "template": "Review this:\n{output}"}
    ]  # fmt: skip


def test_rounds_of_routes_made_in_cells_have_no_workflow(hub: Any, project: Path) -> None:
    assert {"workflow", "workflow_hash"} <= set(ROUND_COLUMNS)
    _, reviewer, route = _wire(hub, project)
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", "hi").result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 30, what="one round")
    row = log_rows(hub, route)[-1]
    assert row["status"] == "delivered" and row["workflow"] is None
    assert user_prompts(reviewer) == ["Review this:\nDone: hi"]


def test_run_refuses_a_workflow_before_starting_anything(
    hub: Any, project: Path, tmp_path: Path
) -> None:
    start_standin(hub, "writer", cwd=project)
    clash = Workflow("w", {"reviewer": {"command": "x"}, "writer": {"command": "y"}})
    with pytest.raises(mh.MadohubValueError, match=r"^w:tiles\.writer: this hub already has"):
        hub.run(clash)
    missing = tmp_path / "gone.toml"
    Workflow("w", {"a": {"command": "x", "cwd": str(tmp_path / "nowhere")}}).save(missing)
    with pytest.raises(mh.MadohubValueError, match=rf"^{missing}:tiles\.a: cwd .* not an existing"):
        hub.run(Workflow.load(missing))
    ai = Workflow(
        "w", {"a": {"command": "x"}, "b": {"command": "y"}},
        [RouteSpec(["a"], "b", {"transform": "summary"})],
    )  # fmt: skip
    hub.api_key = None
    with pytest.raises(mh.MadohubValueError, match=r"^w:routes\.a->b: .*no API key"):
        hub.run(ai)
    assert list(hub.tiles) == ["writer"] and len(hub.routes) == 0  # nothing half made


@pytest.mark.usefixtures("hub_ip")
def test_the_workflow_magic_saves_loads_and_runs_a_file(project: Path, tmp_path: Path) -> None:
    from madohub_nb import get_hub

    hub, shell = get_hub(), InteractiveShell.instance()
    _wire(hub, project)
    path = tmp_path / "magic.toml"
    shell.run_line_magic("madohub", f"workflow save {path}")
    assert tomllib.loads(path.read_text())["name"] == "magic"
    loaded = shell.run_line_magic("madohub", f"workflow load {path}")
    assert isinstance(loaded, mh.Workflow) and loaded.route_keys() == ["writer->reviewer"]
    shell.run_line_magic("madohub", "close")
    routes = shell.run_line_magic("madohub", f"workflow run {path}")
    fresh = get_hub()
    assert fresh is not hub and list(fresh.tiles) == ["writer", "reviewer"]
    assert [r.id for r in routes] == ["writer->reviewer#1"]
    with pytest.raises(UsageError, match="madohub: .*this hub already has a tile 'writer'"):
        shell.run_line_magic("madohub", f"workflow run {path}")
    with pytest.raises(UsageError, match="invalid choice: 'fly'"):
        shell.run_line_magic("madohub", f"workflow fly {path}")
