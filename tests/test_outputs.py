"""tools/outputs.py: the outputs README and docs/sampling.md show are docs/figures.json's, recorded
on the run whose figures the pages quote, and what the commands print still has the lines that frame
them.

The suite never reads runs/, so it cannot run the commands on the recorded runs (`python -m
tools.docs_figures --check-outputs` does, where they exist). What it can do is run each command, as
the recorder runs it, on small runs of its own named as the pages' runs are, and hold its output's
frame (every line of a score, a sample's checkpoint line, its notes and the rules between samples;
numbers, paths and quoted text blanked) to the recorded
one: a change to what sample.py or score.py prints fails here until the outputs are recorded again.
"""

import concurrent.futures
import copy
import json
import re

import pytest
from conftest import make_corpus_text, tiny_argv, write_corpus

from tools.docs_figures import sync
from tools.figures import read_figures
from tools.outputs import (
    OUTPUTS,
    ROOT,
    Output,
    check_outputs,
    described,
    fence_after,
    record_output,
    render_outputs,
    run_output,
)

# a Python repr of a string: score.py --top's contexts
QUOTED = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\"""")


def frame(output: Output, text: str) -> list[str]:
    """The lines that frame an output's text (every line of a score; a sample's checkpoint line, its
    notes and the rules between samples), numbers, paths, quoted strings and device blanked."""
    kept = [
        line
        for line in text.split("\n")
        if "score.py" in output.command or line.startswith(("# ", "note:", "----"))
    ]
    kept = [re.sub(r" on (cpu|cuda|mps)(:\d+)?$", " on DEVICE", line) for line in kept]
    blanked = [
        re.sub(r"[-+]?\d+(?:[.,]\d+)*", "#", re.sub(r"\S*/\S*", "PATH", QUOTED.sub("Q", line)))
        for line in kept
    ]
    return [" ".join(line.split()) for line in blanked]


PAGES = {output.doc for output in OUTPUTS if output.doc}


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory, one_cpu_thread):
    """Runs named as the pages' runs (char, char-no-mask, base), each a few steps of the tiny preset
    with the char preset's context of 128 (score.py --stride 128 needs it), on a small text: their
    runs folder."""
    import train

    root = tmp_path_factory.mktemp("outputs")
    # every character of the pages' prompts
    prompts = "JULIET:\nROMEO:\nKING RICHARD II:\nNow is the night.\n\n"
    corpus = write_corpus(root / "text", text=prompts + make_corpus_text(min_chars=6000))
    for name in sorted({output.run for output in OUTPUTS}):
        flags = ["--no-mask"] if name.endswith("-no-mask") else []
        argv = tiny_argv(
            root,
            corpus,
            *flags,
            "--run-name",
            name,
            "--model.block_size=128",
            "--train.max_steps=4",
            "--train.eval_interval=4",
        )
        assert (
            train.main(
                [
                    *argv,
                    "--train.warmup_steps=1",
                    "--train.eval_batches=1",
                    "--train.honest_batches=1",
                ]
            )
            == 0
        )
        assert (root / "runs" / name / "ckpt.pt").is_file()
    return root / "runs"


def test_every_output_block_of_the_pages_is_docs_figures_json_s():
    figures = read_figures()
    texts = {page: (ROOT / page).read_text(encoding="utf-8") for page in PAGES}
    assert render_outputs(figures, texts) == []
    for output in [o for o in OUTPUTS if o.doc]:
        start, end = fence_after(texts[output.doc], output.command)
        assert texts[output.doc][start:end] == figures[output.key]["value"]["text"], output.key
        assert (
            figures[output.key]["command"] == described(output)
            and "1 torch thread" in figures[output.key]["machine"]
        ), output.key


def test_an_output_that_drifts_or_comes_from_another_run_is_caught():
    figures = copy.deepcopy(read_figures())
    # the page shows another text than the file holds
    figures["output-char-greedy"]["value"]["text"] += "x"
    # the base figures re-recorded from another run, its sample not
    figures["base"]["value"]["last"]["loss/val"] += 0.01
    problems = sync(figures, write=False)
    assert any(
        p == 'docs/sampling.md: `python sample.py --run char --prompt "ROMEO:" --max-new-tokens '
        "150 --temperature 0` differs from output-char-greedy"
        for p in problems
    ), problems
    assert any(p.startswith("output-base-sample was recorded on a base run") for p in problems), (
        problems
    )
    assert fence_after("python score.py\n\n```text\nout\n```\n", "python score.py --top 5") is None
    # the command wrapped, two fences
    page = "run `python score.py\n--top 5`:\n\n```text\nout\nput\n```\n\n```text\nlater\n```\n"
    start, end = fence_after(page, "python score.py --top 5")
    assert page[start:end] == "out\nput"


def test_the_frame_leaves_out_the_device_a_sample_ran_on():
    """The docs' outputs were recorded on a CPU: on a GPU (or a Mac) the header line names cuda (or
    mps), the frame the same.
    """
    sample = Output("sample", None, "python sample.py", "char")
    on_a_card = frame(sample, "# runs/x/ckpt.pt (step 4, val loss 3.2) on cuda:0\ntext")
    assert (
        on_a_card
        == frame(sample, "# runs/y/ckpt.pt (step 9, val loss 1.5) on cpu\nmore")
        == ["# PATH (step #, val loss #) on DEVICE"]
    )


def test_the_commands_still_print_the_frame_of_the_recorded_outputs(small_runs):
    figures = read_figures()
    # two commands at a time, each with one torch thread (run_output)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outputs = list(
            pool.map(lambda output: run_output(output, small_runs, timeout=300), OUTPUTS)
        )
    for output, printed in zip(OUTPUTS, outputs, strict=True):
        recorded = figures[output.key]["value"]["text"]
        assert frame(output, printed) == frame(output, recorded), (
            f"{output.command}: record the outputs again"
        )
        if output.lines:
            assert printed.count("\n") + 1 == output.lines == recorded.count("\n") + 1, printed
        if output.body:
            assert (
                printed
                and not printed.startswith(("#", "\n"))
                and not recorded.startswith(("#", "\n"))
            ), printed[:100]
        if "--json" in output.command:
            assert json.loads(printed).keys() == figures[output.key]["value"]["json"].keys()
    score = Output("score", None, "python score.py --top 1", "char")
    assert frame(
        score, "# runs/x/ckpt.pt (step 4, val loss 3.2)\n 9.5 nats  line 7   'a \\'b' -> 'c'"
    ) == [
        "# PATH (step #, val loss #)",
        "# nats line # Q -> Q",
    ]


def test_check_outputs_names_an_output_the_code_no_longer_prints(small_runs):
    """--check-outputs on outputs recorded here: the same command prints the same text again (a
    sample stopped after its first lines too), and an output whose recorded text differs is named,
    the others not."""
    picked = [o for o in OUTPUTS if o.key in ("output-char-stopped", "output-char-score")]
    figures = {o.key: {"value": record_output(o, small_runs)} for o in picked}
    assert (
        figures["output-char-stopped"]["value"]["step"] == 4
        and figures["output-char-stopped"]["value"]["run"] == "char"
    )
    assert figures["output-char-score"]["value"]["cpu_s"] > 0
    figures["output-char-score"]["value"]["text"] = figures["output-char-score"]["value"][
        "text"
    ].replace("tokens scored", "tokens")
    assert check_outputs(figures, small_runs, [o.key for o in picked]) == [
        "output-char-score: `python score.py --run char --top 5` now prints another text than "
        "docs/figures.json holds"
    ]
