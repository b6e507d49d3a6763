"""Scale over two machines: ``bench_scale.py --tiles 500 --host``.

Run: ``.venv/bin/python benchmarks/bench_scale_hosts.py [--quick]`` (``--quick``: 100 tiles).

250 pairs of tiles, every other pair on a loopback ssh host (a private OpenSSH server on
127.0.0.1 with its own tmux server), 500 routes. Targets: every round checked at its
target, the engine loop's lag p99 < 50 ms, the hub's RSS < 120 MiB (bench_scale.py says
how each is measured).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import run_main  # noqa: E402
from bench_scale import main, parser  # noqa: E402

if __name__ == "__main__":
    args = sys.argv[1:]
    quick = "--quick" in args
    args = [a for a in args if a != "--quick"]
    sys.exit(run_main(main, parser(), [*args, "--tiles", "100" if quick else "500", "--host"]))
