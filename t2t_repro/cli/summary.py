"""t2t-summary: print the model's layers and parameter count for a config.

t2t-summary --flagfile=flags/base.cfg --vocab_size=37000
"""

from t2t_repro.cli import common
from t2t_repro.cli.flags import (
    accept_training_flagfiles,
    define_model_flags,
    model_config_from_flags,
)

accept_training_flagfiles()  # e.g. flags/multi30k.cfg
define_model_flags()


def parameter_rows(model):
    """(sub-layer path, weight shapes, parameter count), in creation order."""
    rows: dict[str, tuple[list, int]] = {}
    for weight in model.weights:
        layer_path, _, _ = weight.path.rpartition("/")
        shapes, count = rows.get(layer_path, ([], 0))
        rows[layer_path] = (
            shapes + [tuple(weight.shape)],
            count + int(weight.numpy().size),
        )
    return [(path, shapes, count) for path, (shapes, count) in rows.items()]


def main():
    from t2t_repro.model import Transformer  # keeps --help fast

    model = Transformer(model_config_from_flags(), name="transformer")
    print(f"{'layer':<52} {'weights':<34} {'params':>12}")
    for path, shapes, count in parameter_rows(model):
        shape_text = " ".join("x".join(map(str, s)) for s in shapes)
        print(f"{path:<52} {shape_text:<34} {count:>12,}")
    print(f"total_params: {model.count_params()}")


def run():
    common.run(main)


if __name__ == "__main__":  # python -m t2t_repro.cli.summary
    run()
