"""`python -m t2t_repro.cli TOOL [--flags]` runs t2t-TOOL without the
console scripts (e.g. from a checkout that is not installed)."""

import importlib
import sys

TOOLS = ("attention", "average", "eval", "export", "fetch", "summary",
         "train", "translate")

if len(sys.argv) < 2 or sys.argv[1] not in TOOLS:
    sys.exit(f"usage: python -m t2t_repro.cli {{{','.join(TOOLS)}}} "
             "[--flags]")
tool = sys.argv.pop(1)
sys.argv[0] = f"t2t-{tool}"
importlib.import_module(f"t2t_repro.cli.{tool}").run()
