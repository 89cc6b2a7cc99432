"""t2t: every t2t-* tool under one command.

    t2t TOOL [--flags]                   runs t2t-TOOL
    python -m t2t_repro.cli TOOL [--flags]   the same
    t2t --help                           lists the tools

The tools are the package's console scripts ([project.scripts] in
pyproject.toml, read from the installed package's entry points), each
described by its docstring's first paragraph.
"""

import ast
import importlib.util
import sys
from importlib import metadata

from t2t_repro.cli import TOOL_PREFIX


def tools():
    """{tool name: console-script entry point}, e.g. "train": t2t-train's,
    in name order."""
    scripts = {}
    for entry_point in metadata.entry_points(group="console_scripts"):
        if entry_point.name.startswith(TOOL_PREFIX) and entry_point.value.startswith(
            "t2t_repro.cli."
        ):
            scripts[entry_point.name[len(TOOL_PREFIX) :]] = entry_point
    return dict(sorted(scripts.items()))


def summary(entry_point):
    """The tool's docstring's first paragraph on one line, without its
    "t2t-NAME: " lead; read from the source, since importing every tool
    would start each one's flags (and --help must stay fast)."""
    spec = importlib.util.find_spec(entry_point.module)
    assert spec is not None and spec.origin is not None, entry_point.module
    path = spec.origin
    with open(path, encoding="utf-8") as handle:
        docstring = ast.get_docstring(ast.parse(handle.read())) or ""
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    return paragraph.removeprefix(f"{entry_point.name}: ")


def usage(scripts):
    width = max(map(len, scripts))
    lines = [
        ("usage: t2t TOOL [--flags]   (or: python -m t2t_repro.cli TOOL [--flags])"),
        "runs t2t-TOOL; `t2t TOOL --help` lists its flags.",
        "",
        "tools:",
    ]
    lines += [
        f"  {name:<{width}}  {summary(entry_point)}"
        for name, entry_point in scripts.items()
    ]
    return "\n".join(lines) + "\n"


def main():
    scripts = tools()
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        # Without a tool, the list is the answer to a usage error.
        asked = len(sys.argv) > 1
        (sys.stdout if asked else sys.stderr).write(usage(scripts))
        sys.exit(0 if asked else 2)
    name = sys.argv[1]
    if name not in scripts:
        sys.stderr.write(
            f"t2t: error: no tool {name!r}; the tools: "
            f"{', '.join(scripts)} (t2t --help)\n"
        )
        sys.exit(2)
    sys.argv[:2] = [scripts[name].name]
    scripts[name].load()()


if __name__ == "__main__":
    main()
