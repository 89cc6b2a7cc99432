"""The training precision a run recorded: training.json files written
before float32 was spelt "fp32" say "none", and still resume, in fp32."""

import json

from t2t_repro.run_dir import RunDir
from t2t_repro.training.precision import POLICIES, resolve_precision


def test_a_run_that_recorded_none_resumes_in_fp32(tmp_path):
    (tmp_path / "training.json").write_text(
        json.dumps({"mixed_precision": "none", "batch_tokens": 4096})
    )
    recorded = RunDir(str(tmp_path)).load_training_options()
    assert recorded == {"mixed_precision": "fp32", "batch_tokens": 4096}
    assert resolve_precision("auto", str(tmp_path)) == "fp32"
    assert POLICIES["fp32"] == "float32"
