"""harness/experiments/data_bench.py and `bench.py --data-mb`: the preparation's figures against
tiktoken's on a 1 MB text.
"""

from pathlib import Path

import pytest
from conftest import assert_one_line_error, error_of, gpt2_encoding_or_skip

import bench
from harness.experiments.data_bench import bench_data


@pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="reads the peak memory from Linux's /proc"
)
def test_data_figures_against_tiktoken(tmp_path, capsys):
    gpt2_encoding_or_skip()
    result = bench_data(0.2, "gpt2", workers=2, turns=1, log=lambda text: None)
    (turn,) = result["turns"]
    # the generated text: the size asked for
    assert result["size_bytes"] == 200_000 and result["workers"] == 2
    # the same text: at most the train/val cut differs
    assert abs(turn["ours"]["tokens"] - turn["tiktoken"]["tokens"]) <= 2
    assert result["prepare_mb_per_s"] == pytest.approx(0.2 / turn["ours"]["seconds"])
    assert result["ratios"] == [turn["tiktoken"]["seconds"] / turn["ours"]["seconds"]]
    # a Python process with numpy and tiktoken, no corpus held
    assert 20 * 2**20 < result["peak_rss"] < 400 * 2**20
    with pytest.raises(SystemExit):
        bench.main(["--data-mb", "0"])
    assert "--data-mb: must be above 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--data-mb", "1e-9", "--data.tokenizer=char"],
            "argument --data-mb: must be at least 0.001 (a kilobyte of text), got 1e-9",
        ),
        (
            ["--whole-run", "--data-mb", "1"],
            "argument --data-mb: not allowed with argument --whole-run",
        ),
        (
            ["--data-mb", "1", "--whole-run"],
            "argument --whole-run: not allowed with argument --data-mb",
        ),
    ],
)
def test_a_size_that_writes_no_text_and_two_measurements_at_once_are_one_line(
    argv, message, capsys
):
    """1e-9 MB is 0 bytes: the preparing process failed on an empty text and bench.py raised a
    RuntimeError traceback. --whole-run beside --data-mb was silently ignored."""
    assert_one_line_error(error_of(bench.main, argv, capsys), message)
