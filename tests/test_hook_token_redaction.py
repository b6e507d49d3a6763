"""A tile's hook token is redacted from the round log, as MCP tokens are (issue 38 item 11).

The token lets whoever holds it speak for the tile on the hub's hook channel; an agent
that prints it (its pane's environment holds it) must not put it into the log, its
views or its exports.
"""

from __future__ import annotations

from pathlib import Path

from conftest import log_rows, start_standin, wait_until

import madohub_nb as mh


def test_a_round_whose_answer_holds_the_sources_hook_token_is_logged_without_it(
    hub: mh.Hub, project: Path, tmp_path: Path
) -> None:
    writer = start_standin(hub, "writer", cwd=project)
    start_standin(hub, "reviewer", cwd=project, hooks=False)
    assert writer.hooks is not None
    token = writer.hooks.token
    route = hub.connect("writer", "reviewer", template="Review: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", token).result(30)  # (the echo persona answers 40 characters)
    wait_until(lambda: route.rounds == 1 and route.last_status, 20, what="the round")
    (row,) = log_rows(hub, route.id)
    assert row["extracted"] == "Done: [redacted]"
    assert row["prompt"] == "Review: Done: [redacted]"
    assert token not in repr(row)
    assert token not in hub.log.df.to_csv()
    assert token not in hub.log.redact_text(f"error: {token}")
    hub.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("*.sqlite3*"))
    assert stored and token.encode() not in stored
