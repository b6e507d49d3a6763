"""A stand-in for Qwen Code in a pane, for the fast tier: its screen (the input box between
two rules, "esc to cancel" while busy) and its file channel as the real Qwen Code 0.24.4
has it (tests/fixtures/channels): ``--input-file IN`` takes ``{"type":"submit"}`` lines,
``--json-file OUT`` gets ``system``/``user``/``assistant``/``message_stop`` lines.

Like the real one, a submit that comes while a turn runs gets no ``user`` line and its
answer is glued to the running turn's (what the hub's Qwen channel must avoid). Typed
prompts (Enter) run as turns too, reported the same way. ``[[sleep N]]`` in a prompt
thinks N s (else ``$MADOHUB_STANDIN_THINK_S``); ``[[lines N]]`` answers N lines.

``[[ask CMD]]`` asks to run the shell command CMD first, as the real one does (fixture
qwen-0.24.4-approval-out.jsonl): an ``assistant`` ``tool_use`` message, its
``message_stop``, a ``control_request`` ``can_use_tool``, and the dialog on the screen
(as screens/permission/qwen.txt). It waits for a ``confirmation_response`` line in IN or a
key in the pane (``1`` allows, ``2`` or Esc denies); either way OUT gets the
``control_response`` (the real 0.24.4 mirrors a pane's answer there too: its
``emitControlResponse``), then the tool's result (it runs CMD when allowed) and the answer.
``$STANDIN_QWEN_TURNS``: a file each turn's start is appended to as a JSON line
``{"at": <wall time>, "text": <prompt>, "how": "channel"|"typed"}`` (the benchmark's clock
and count of what the agent received, the same for both ways in). The box shows the
draft's last lines only, as a real composer scrolls (a 100 KB typed draft is not redrawn
whole at every key), and takes bracketed pastes (it asks for them, as the real one does).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import subprocess
import sys
import termios
import time
import tty
import uuid

RULE = "─" * 60
DRAFT_LINES = 8
"""How many of the draft's last lines the box shows."""
PASTE_MARK = re.compile(rb"(\x1b\[20[01]~)")
PLACEHOLDER = "  Type your message or @path/to/file"


class Qwen:
    def __init__(self, in_path: str | None, out_path: str | None) -> None:
        self.in_path, self.out_path = in_path, out_path
        self.offset = 0
        self.history: list[str] = []
        self.draft = ""
        self.session = uuid.uuid4().hex
        self.pending: list[str] = []
        """Submits read from IN, not yet run."""
        self.confirmations: dict[str, bool] = {}
        """``confirmation_response`` lines read from IN: request_id -> allowed."""
        self.asking: str | None = None
        """The request id of the dialog shown now."""

    def out(self, **msg: object) -> None:
        if self.out_path is None:
            return
        msg.setdefault("session_id", self.session)
        msg.setdefault("uuid", uuid.uuid4().hex)
        with contextlib.suppress(OSError), open(self.out_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(msg) + "\n")

    def draw(self, busy: bool, dialog: list[str] | None = None) -> None:
        lines = self.history[-15:]
        if dialog is not None:  # (the real one shows its dialog in place of the input box)
            sys.stdout.write("\x1b[2J\x1b[H" + "\r\n".join([*lines, *dialog]))
            sys.stdout.flush()
            return
        status = ["  ⠋ Thinking… (1s · esc to cancel)"] if busy else []
        shown = "\r\n".join(self.draft.split("\n")[-DRAFT_LINES:])
        box = [RULE, f"> {shown}" if self.draft else f">{PLACEHOLDER}", RULE, "  fake-model"]
        sys.stdout.write("\x1b[2J\x1b[H" + "\r\n".join([*lines, "", *status, *box]))
        sys.stdout.flush()

    def read_in(self) -> None:
        """New whole lines of IN: submits queue up, confirmations are kept by request id."""
        if self.in_path is None or not os.path.isfile(self.in_path):
            return  # (gone, or not a file: a test broke the channel)
        with open(self.in_path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        for raw in data[:end].splitlines():
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            if msg.get("type") == "submit":
                self.pending.append(str(msg.get("text", "")))
            elif msg.get("type") == "confirmation_response":
                rid = str(msg.get("request_id"))
                if rid != self.asking:  # (as the real one: unknown, or already resolved)
                    self.out(
                        type="control_response",
                        response={"subtype": "error", "request_id": rid,
                                  "error": "unknown request_id (already resolved, cancelled, or never issued)"},
                    )  # fmt: skip
                    continue
                self.confirmations[rid] = msg.get("allowed") is True

    def submits(self) -> list[str]:
        self.read_in()
        texts, self.pending = self.pending, []
        return texts

    def ask(self, command: str) -> bool:
        """Ask to run ``command`` as the real one does; True once allowed (IN or the pane)."""
        call = f"call_fake_{uuid.uuid4().hex[:24]}"
        args = {"command": command, "description": f"Run {command}", "is_background": False}
        self.out(
            type="assistant",
            message={
                "type": "message", "role": "assistant", "model": "fake-model",
                "content": [{"type": "tool_use", "id": call, "name": "run_shell_command",
                             "input": args}],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 0},
            },
        )  # fmt: skip
        self.out(type="stream_event", event={"type": "message_stop"})
        request_id = str(uuid.uuid4())
        self.asking = request_id
        self.out(
            type="control_request", request_id=request_id,
            request={
                "subtype": "can_use_tool", "tool_name": "run_shell_command",
                "tool_use_id": call, "input": args,
                "permission_suggestions": [
                    {"type": "allow", "label": "Allow Command", "description": f"Execute: {command}"},
                    {"type": "deny", "label": "Deny", "description": "Block this command execution"},
                ],
                "blocked_path": None,
            },
        )  # fmt: skip
        program = command.split()[0] if command.split() else command
        self.draw(busy=True, dialog=[
            f"  ? Shell {command} (Run {command}) ←", "", f"     {command}", "",
            f"   Allow execution of: '{program}'?", "",
            "   › 1. Yes, allow once", "     2. No, suggest changes (esc)", "", "",
            "  ⠏ Waiting for user confirmation...",
        ])  # fmt: skip
        fd = sys.stdin.fileno()
        allowed: bool | None = None
        while allowed is None:
            self.read_in()
            allowed = self.confirmations.pop(request_id, None)
            if allowed is not None:
                break
            ready, _, _ = select.select([fd], [], [], 0.02)
            if ready:
                keys = os.read(fd, 4096).decode("utf-8", "replace")
                if "1" in keys:
                    allowed = True
                elif "2" in keys or "\x1b" in keys:
                    allowed = False
        self.asking = None
        self.out(
            type="control_response",
            response={"subtype": "success", "request_id": request_id,
                      "response": {"allowed": allowed}},
        )  # fmt: skip
        result = f"Command: {command}\nExit Code: 0"
        if allowed:
            subprocess.run(command, shell=True, check=False)  # noqa: S602 (a test's own command)
        else:
            result = "User denied the command"
        self.out(
            type="user",
            message={"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call, "is_error": not allowed,
                 "content": result},
            ]},
        )  # fmt: skip
        self.history.append(f"  {'✓' if allowed else '✗'} Shell {command}")
        self.draw(busy=True)
        return allowed

    def turn(self, text: str, how: str) -> None:
        stamp = os.environ.get("STANDIN_QWEN_TURNS")
        if stamp:
            record = json.dumps({"at": time.time(), "text": text, "how": how}) + "\n"
            with open(stamp, "a", encoding="utf-8") as f:
                f.write(record)  # (one write: a reader never sees half a line)
        self.out(type="user", message={"role": "user", "content": [{"type": "text", "text": text}]})
        self.history += [f"  > {line}" for line in text.splitlines()]
        self.draw(busy=True)
        asked = re.search(r"\[\[ask ([^\]]+)\]\]", text)
        ran = None if asked is None else self.ask(asked.group(1).strip())
        m = re.search(r"\[\[sleep (\d+(?:\.\d+)?)\]\]", text)
        think = float(m.group(1)) if m else float(os.environ.get("MADOHUB_STANDIN_THINK_S", "0.3"))
        answers = [answer(text)]
        if asked is not None:
            answers = [f"{'Ran' if ran else 'Denied'}: {asked.group(1).strip()}"]
        deadline = time.monotonic() + think
        while time.monotonic() < deadline:  # a submit meanwhile: glued to this turn (as observed)
            answers += [answer(t) for t in self.submits()]
            time.sleep(0.02)
        text_out = "".join(answers)
        self.out(
            type="assistant",
            message={
                "type": "message", "role": "assistant", "model": "fake-model",
                "content": [{"type": "text", "text": text_out}], "stop_reason": None,
                "usage": {"input_tokens": len(text), "output_tokens": len(text_out) // 4,
                          "cache_read_input_tokens": 0},
            },
        )  # fmt: skip
        self.out(type="stream_event", event={"type": "message_stop"})
        self.history += [f"  ◆︎ {line}" for line in text_out.splitlines()]
        self.draw(busy=False)

    def run(self) -> None:
        self.out(type="system", subtype="session_start", data={"version": "stand-in"})
        fd = sys.stdin.fileno()
        old = termios.tcgetattr(fd)
        tty.setraw(fd)
        pending, in_paste = b"", False
        sys.stdout.write("\x1b[?2004h")  # bracketed paste, as the real one asks for
        try:
            self.draw(busy=False)
            while True:
                for text in self.submits():
                    self.turn(text, "channel")
                ready, _, _ = select.select([fd], [], [], 0.05)
                if not ready:
                    continue
                data, pending = pending + os.read(fd, 65536), b""
                cut = data.rfind(b"\x1b")
                if cut != -1 and len(data) - cut < 6:
                    data, pending = data[:cut], data[cut:]  # maybe half a paste marker
                draft = self.draft  # (a local grows in place: a 100 KB draft stays linear)
                for piece in PASTE_MARK.split(data):
                    if piece in (b"\x1b[200~", b"\x1b[201~"):
                        in_paste = piece == b"\x1b[200~"
                        continue
                    for ch in piece.decode("utf-8", "replace"):
                        if ch == "\r" and in_paste:
                            draft += "\n"  # (tmux pastes a line break as CR)
                        elif ch == "\r" and draft.strip():
                            text, draft = draft, ""
                            self.draft = ""
                            self.turn(text, "typed")
                        elif ch in ("\x7f", "\b"):
                            draft = draft[:-1]
                        elif ch == "\x03":
                            return
                        elif ch == "\n":
                            draft += "\n"
                        elif ch.isprintable():
                            draft += ch
                self.draft = draft
                self.draw(busy=False)
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, old)
            self.out(type="system", subtype="session_end", data={})


def answer(prompt: str) -> str:
    m = re.search(r"\[\[lines (\d+)\]\]", prompt)
    if m:
        return "\n".join(f"Line {i} of a long answer" for i in range(1, int(m.group(1)) + 1))
    first = " ".join(prompt.split())
    return f"Done: {first[:40]}"


def main() -> None:
    parser = argparse.ArgumentParser(prog="qwen")
    parser.add_argument("--input-file")
    parser.add_argument("--json-file")
    args, _ = parser.parse_known_args()
    if os.environ.get("STANDIN_QWEN_NO_CHANNEL"):  # an older qwen: the options do nothing
        args.input_file = args.json_file = None
    Qwen(args.input_file, args.json_file).run()


if __name__ == "__main__":
    main()
