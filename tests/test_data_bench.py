"""harness/experiments/data_bench.py and `bench.py --data-mb`: the preparation's figures against tiktoken's on a 1 MB text."""

from pathlib import Path

import pytest
from conftest import gpt2_encoding_or_skip

import bench
from harness.experiments.data_bench import bench_data


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak memory from Linux's /proc")
def test_data_figures_against_tiktoken(tmp_path, capsys):
    gpt2_encoding_or_skip()
    result = bench_data(0.2, "gpt2", workers=2, turns=1, log=lambda text: None)
    (turn,) = result["turns"]
    assert result["size_bytes"] == 200_000 and result["workers"] == 2  # the generated text: the size asked for
    assert abs(turn["ours"]["tokens"] - turn["tiktoken"]["tokens"]) <= 2  # the same text: at most the train/val cut differs
    assert result["prepare_mb_per_s"] == pytest.approx(0.2 / turn["ours"]["seconds"])
    assert result["ratios"] == [turn["tiktoken"]["seconds"] / turn["ours"]["seconds"]]
    assert 20 * 2**20 < result["peak_rss"] < 400 * 2**20  # a Python process with numpy and tiktoken, no corpus held
    with pytest.raises(SystemExit):
        bench.main(["--data-mb", "0"])
    assert "--data-mb: must be above 0" in capsys.readouterr().err
