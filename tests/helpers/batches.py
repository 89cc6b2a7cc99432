"""Token statistics over batches of the training pipeline."""

import dataclasses

from t2t_repro.data import pipeline


@dataclasses.dataclass
class BatchReport:
    """Token statistics over batches."""

    batches: int = 0
    pairs: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0

    @property
    def padding_efficiency(self):
        return self.real_tokens / max(self.padded_tokens, 1)


def report_batches(batches):
    """Counts pairs and real vs padded tokens over finite `batches`."""
    report = BatchReport()
    for (source, _), target in batches:
        real, padded = pipeline.real_and_padded_tokens(source, target)
        report.batches += 1
        report.pairs += int(source.shape[0])
        report.real_tokens += int(real)
        report.padded_tokens += int(padded)
    return report
