"""A tool's --help.

`--help` (also -h, -? and --helpshort) shows the tool's docstring and the
flags it reads, grouped by topic: the tool's own flags under its
name, then those of `flags.py` under their topic's heading
(`flags.TOPICS`, in the order of `flags.TOPIC_ORDER`), each heading's
flags in name order and absl's format. The flags it reads are the "key
flags" of the main module (absl's short help; for a console script the
main module is the script wrapper): the tool's flags are registered as
its key flags; the training flags a tool defines only to parse a
training flagfile are not, see `flags.SHOWN`. --helpfull is absl's.
"""

import os
import sys

from absl import app, flags

from t2t_repro.cli import flags as cli_flags

FLAGS = flags.FLAGS


def register_key_flags():
    """Makes the package's flags that the tool reads the main module's key
    flags: those of `cli/flags.py` it shows, every other module's."""
    main_module = sys.argv[0]
    for module, module_flags in FLAGS.flags_by_module_dict().items():
        if module.startswith("t2t_repro"):
            for flag in module_flags:
                if module != cli_flags.__name__ or flag.name in cli_flags.SHOWN:
                    FLAGS.register_key_flag_for_module(main_module, flag)


def _flags_by_topic():
    """[(heading, the tool's flags under it in name order)], the headings
    in order: the tool's own flags (its module's, `streaming.py`'s) under
    the tool's name, then those of `cli/flags.py` under their topics."""
    tool = sys.argv[0]
    groups: dict[str, dict] = {}
    for flag in FLAGS.get_key_flags_for_module(tool):
        if flag.name not in FLAGS or FLAGS[flag.name] is not flag:
            continue  # overridden since (absl's help skips it too)
        topic = tool
        if FLAGS.find_module_defining_flag(flag.name) == cli_flags.__name__:
            topic = cli_flags.TOPICS.get(flag.name, tool)
        groups.setdefault(topic, {})[flag.name] = flag
    order = [tool, *cli_flags.TOPIC_ORDER]
    order += sorted(set(groups) - set(order))
    return [
        (topic, [groups[topic][name] for name in sorted(groups[topic])])
        for topic in order
        if topic in groups
    ]


def _flag_help(flag):
    """A flag's entry in --help, as absl writes it: '  --name: help',
    wrapped, then its default and the values it takes."""
    name = f"--[no]{flag.name}" if flag.boolean else f"--{flag.name}"
    if flag.short_name:
        name = f"-{flag.short_name},{name}"
    lines = [
        flags.text_wrap(
            f"{name}: {flag.help or ''}", indent="    ", firstline_indent="  "
        )
    ]
    if flag.default_as_str:
        lines.append(
            flags.text_wrap(f"(default: {flag.default_as_str})", indent="    ")
        )
    if flag.parser.syntactic_help:
        lines.append(flags.text_wrap(f"({flag.parser.syntactic_help})", indent="    "))
    return "\n".join(lines)


def help_text():
    """The tool's --help: its docstring, then its flags by topic."""
    doc = sys.modules["__main__"].__doc__ or f"\nUSAGE: {sys.argv[0]} [flags]\n"
    sections = [
        f"{topic}:\n" + "\n".join(map(_flag_help, topic_flags))
        for topic, topic_flags in _flags_by_topic()
    ]
    text = doc
    if sections:
        text += "\nflags:\n\n" + "\n\n".join(sections) + "\n"
    return text + "\nTry --helpfull to get a list of all flags.\n"


class _HelpFlag(flags.BooleanFlag):
    """absl's --help and --helpshort (exit status 1 after the help, as
    absl's), writing `help_text()`."""

    def __init__(self, name, short_name):
        super().__init__(
            name,
            False,
            "show this help",
            short_name=short_name,
            allow_hide_cpp=True,
            allow_override=True,
        )

    def parse(self, argument):
        super().parse(argument)
        if self.value:
            try:
                sys.stdout.write(help_text())
                sys.stdout.flush()
            except BrokenPipeError:  # e.g. `t2t-train --help | head`
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)


def define_help_flags():
    """absl's help flags, with --help (-?) and --helpshort (-h) ours."""
    app.define_help_flags()  # idempotent: app.run keeps ours
    for name, short_name in (("help", "?"), ("helpshort", "h")):
        flags.DEFINE_flag(_HelpFlag(name, short_name), module_name=app.__name__)
