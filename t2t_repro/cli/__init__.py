"""The command-line tools, one absl app a module (t2t-train is `train`,
and so on): each reads its flags (`flags.py`, generated from
`t2t_repro/config.py`), calls the library and prints. Nothing in the
library imports this package. `common.run` gives every tool the same
--help, quiet TensorFlow start-up and one-line errors."""
