"""Wall time of the ``shapelint`` commands that lint nothing (``--help``, ``--version``,
``--list-rules``, ``rule SL501``, ``rule --all``, ``--show-settings``), each in a fresh
process, and whether each imported torch (they must not: importing it takes 2-3 s).
``python -c 'import torch'`` is timed beside them as the reference.

    python benchmarks/cli_startup.py [--repeat 5] [--out benchmarks/results/cli_startup.json]

Each number is the median of --repeat fresh processes. Target: ``--list-rules`` under
0.5 s (it took 2.7 s when it imported the rule modules, and torch with them).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
    "--help": ["--help"],
    "--version": ["--version"],
    "--list-rules": ["--list-rules"],
    "rule SL501": ["rule", "SL501"],
    "rule --all": ["rule", "--all"],
    "--show-settings": ["--show-settings"],
}
#: runs the command as the console script does and reports whether torch was imported
PROBE = ("import sys, time\nfrom shapelint.app.cli import main\nt = time.perf_counter()\ntry:\n    main(sys.argv[1:])\n"
         "except SystemExit:\n    pass\nprint('TORCH', 'torch' in sys.modules, file=sys.stderr)\n")


def timed(argv: list[str], cwd: str) -> tuple[float, bool]:
    """Wall seconds of one fresh process, and whether it imported torch."""
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    return wall, "TORCH True" in proc.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/cli_startup.json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as cwd:  # no configuration file found upwards
        for name, argv in {**{k: [sys.executable, "-c", PROBE, *v] for k, v in COMMANDS.items()},
                           "python -c 'import torch'": [sys.executable, "-c", "import torch"]}.items():
            runs = [timed(argv, cwd) for _ in range(args.repeat)]
            reference = not name.startswith("-") and not name.startswith("rule")
            rows.append({"command": name, "median_s": round(statistics.median(w for w, _ in runs), 3),
                         "imports_torch": True if reference else any(t for _, t in runs)})
    print(f"{'command':28} {'median s':>9}  imports torch")
    for row in rows:
        print(f"{row['command']:28} {row['median_s']:9.3f}  {row['imports_torch']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.node(), "python": platform.python_version(),
                               "date": time.strftime("%Y-%m-%d", time.gmtime()), "repeat": args.repeat, "rows": rows},
                              indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
