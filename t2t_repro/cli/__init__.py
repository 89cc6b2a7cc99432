"""The command-line tools, one absl app a module (t2t-train is `train`,
and so on): each reads its flags (`flags.py`, generated from
`t2t_repro/config.py`), calls the library and prints. Nothing in the
library imports this package. `common.run` gives every tool the same
--help, quiet TensorFlow start-up and one-line errors."""

# Every tool's console script is this prefix and its module's name
# (t2t-train: t2t_repro.cli.train).
TOOL_PREFIX = "t2t-"
