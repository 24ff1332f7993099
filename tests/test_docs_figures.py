"""tools/docs_figures.py: every figure README and docs/ quote agrees with its one source,
docs/figures.json (measured runs, each with its command, machine and date) or the code itself
(code.*, computed here); and the install that README gives first pulls no CUDA package."""

import copy
import json
import re

import pytest
from conftest import REPO_ROOT, assert_one_line_error, error_of, tiny_argv, train_in_process

from tools.docs_figures import code_values, fill, named_values, pattern, sync, sync_doc
from tools.figures import read_figures
from tools.tables import in_table_order


def test_every_quoted_figure_agrees_with_docs_figures_json_and_the_code():
    problems = sync(read_figures(), write=False)
    assert not problems, (
        "run python -m tools.docs_figures to bring the docs in line:\n" + "\n".join(problems)
    )


def test_a_figure_that_drifts_is_caught():
    figures = copy.deepcopy(read_figures())
    # docs/sampling.md and README quote it; the outputs come from that run
    figures["char"]["value"]["last"]["loss/val"] += 0.01
    # README's table
    figures["base-3seeds"]["value"]["aggregate"]["base-no-mask"]["loss/val_honest"]["mean"] = 7.0
    problems = sync(figures, write=False)
    assert any(
        p.startswith("README.md line ")
        and p.endswith(": '1.862' should read 1.872 (char.last.loss/val)")
        for p in problems
    ), problems
    assert any(
        p.startswith(
            "output-char-greedy was recorded on a char run (step 410, val 1.8618) other than"
        )
        for p in problems
    )
    assert "README.md: table: readme_table is stale" in problems, problems


def test_every_measured_entry_names_its_command_machine_and_date():
    for key, entry in read_figures().items():
        assert (
            entry["command"]
            and entry["machine"]
            and re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["date"])
        ), key


def test_a_sentence_matches_across_line_breaks_and_finds_placeholders_left_unfilled():
    sentence = "val loss {char.last.loss/val:.3f} after {char.last.step:.0f} steps"
    assert pattern(sentence).search("the val loss 1.868\nafter 390 steps").groups() == (
        "1.868",
        "390",
    )
    assert (
        pattern(sentence).search("val loss {char.last.loss/val:.3f} after 390 steps").group(1)
        == "{char.last.loss/val:.3f}"
    )
    assert fill(sentence, ["1.868", "390"]) == "val loss 1.868 after 390 steps"
    assert pattern("scores {x:,.0f}, and").search("scores 15,360, and").group(1) == "15,360"


def test_a_difference_between_two_variants_is_quoted_by_a_name_without_spaces():
    """compare.py labels a difference "a − b"; a placeholder holds no spaces, so the name reads
    a-minus-b.
    """
    label = "char-no-scale-qk-norm − char-qk-norm"
    figures = {
        "x": {
            "value": {
                "preset": {"differences": {label: {"loss/val": {"mean": 0.5, "half_width": 0.1}}}}
            }
        }
    }
    # beside the recorded ones, which the derived figures read
    values = named_values(read_figures() | figures)
    stem = "x.preset.differences.char-no-scale-qk-norm-minus-char-qk-norm.loss/val"
    assert (values[f"{stem}.mean"], values[f"{stem}.low"], values[f"{stem}.high"]) == pytest.approx(
        (0.5, 0.4, 0.6)
    )
    assert not [name for name in values if " " in name]


def test_code_figures_are_the_models_own():
    values = code_values()
    assert (
        round(values["code.char_params_m"], 1) == 0.6
        and round(values["code.base_params_m"], 1) == 7.2
    )
    assert (
        values["code.char_honest_predictions"] == 4 * 12 * 8
        and values["code.char_val_predictions"] == 10 * 12 * 128
    )
    assert values["code.sample_tokens_shown"] == values["code.sample_tokens"] + 1


def test_a_marker_is_filled_and_one_naming_no_figure_or_table_is_caught():
    """A figure's marker stands before its number (a line break between allowed); one with words
    fills the first place after it that reads so, as before a code block."""
    figures = read_figures()
    page = (
        "val <!-- {char.last.loss/val:.3f} -->\n1.000 at step "
        "<!-- {char.last.step:.0f} -->{x:.0f}\n\n"
        "<!-- train.py # {char.last.step:.0f} steps -->\n\n    python train.py   # 9 steps\n"
        "<!-- {nope.x:.3f} -->1.0 <!-- table: nope_table --> <!-- at {char.last.step:.0f} -->"
    )
    text, problems = sync_doc("README.md", page, figures, named_values(figures))
    assert text.startswith("val <!-- {char.last.loss/val:.3f} -->\n1.862 at step <!-- ")
    assert "-->410\n" in text and "python train.py   # 410 steps" in text
    assert problems == [
        "README.md line 2: '1.000' should read 1.862 (char.last.loss/val)",
        "README.md line 2: '{x:.0f}' should read 410 (char.last.step)",
        "README.md line 6: 'train.py   # 9 steps' should read 410 (char.last.step)",
        "README.md: no figure nope.x",
        "README.md: <!-- table: nope_table --> names no table",
        "README.md: no 'at 410' after <!-- at {char.last.step:.0f} -->",
    ]


def quickstart_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [
        line.strip() for line in section.splitlines() if line.startswith("    ") and line.strip()
    ]


def test_readme_installs_the_cpu_build_of_torch_before_anything_that_depends_on_it():
    """A machine without CUDA that follows README top to bottom gets PyTorch's CPU wheel before
    requirements.txt (whose torch range the CPU build then satisfies, so pip pulls no nvidia-*
    package)."""
    commands = quickstart_commands()
    assert commands[0].startswith(
        "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    ), commands[:2]
    assert commands[1] == "pip install -r requirements.txt"
    torch_line = next(
        line
        for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
        if line.startswith("torch")
    )
    assert "+cu" not in torch_line and "index-url" not in torch_line, torch_line


def test_the_test_extras_live_in_requirements_dev_which_ci_and_the_tests_page_use():
    dev = (REPO_ROOT / "requirements-dev.txt").read_text()
    assert "-r requirements.txt" in dev and all(
        name in dev for name in ("transformers", "nbclient", "nbformat", "ipykernel")
    )
    assert "pip install --quiet -r requirements-dev.txt" in (REPO_ROOT / ".ci" / "run").read_text()
    assert "pip install -r requirements-dev.txt" in (REPO_ROOT / "docs" / "tests.md").read_text()


@pytest.mark.parametrize("key", ["char-3seeds", "base-3seeds"])
def test_the_comparisons_hold_every_variant_the_docs_show(key):
    config, figures = key.split("-")[0], read_figures()
    aggregate = figures[key]["value"]["aggregate"]
    variants = [
        config,
        *(f"{config}-{name}" for name in ("no-mask", "no-scale", "no-pos", "no-mask-no-pos")),
    ]
    # the file keeps its keys sorted; the tables put them back in order
    assert in_table_order(aggregate, config) == variants
    assert all(
        stats["loss/val"]["n"] == 3 and "loss/order_use" in stats for stats in aggregate.values()
    ), json.dumps(aggregate)[:200]
    assert "--variants no-mask,no-scale,no-pos,no-mask+no-pos" in figures[key]["command"]
    assert len(figures[f"{config}-ablation"]["value"]["runs"]) == 3


def test_a_comparison_and_its_head_ablations_become_the_docs_tables(
    tmp_path, corpus_file, one_cpu_thread, monkeypatch
):
    """The path the docs' order and ablation tables take: compare.py with a variant removing two
    things, then inspect_attention.py --ablate on each no-mask run, read back by tools/figures.py
    and rendered by tools/tables.py."""
    import compare
    import inspect_attention
    from tools import tables
    from tools.figures import ablation_figures, comparison_command, comparison_figures

    train_in_process(monkeypatch)  # each run in this process
    argv = tiny_argv(
        tmp_path,
        corpus_file,
        "--seeds=2",
        "--variants=no-pos,no-mask+no-pos,no-mask",
        "--train.max_steps=2",
    )
    compare.main([*argv, "--train.eval_interval=2", "--train.warmup_steps=1"])
    folder = tmp_path / "runs" / "compare-tiny"
    for run in ("tiny-no-mask-s1337", "tiny-no-mask-s1338"):
        inspect_attention.main(
            [
                "--runs-dir",
                str(folder),
                "--run",
                run,
                "--ablate",
                "L0H0",
                "--draws",
                "2",
                "--text",
                "the king",
            ]
        )
    value = comparison_figures(folder)
    assert (
        comparison_command("tiny", value)
        == "python compare.py --config tiny --seeds 2 --variants no-mask,no-pos,no-mask+no-pos"
    )
    ablations = ablation_figures(folder)
    assert list(ablations["runs"]) == ["tiny-no-mask-s1337", "tiny-no-mask-s1338"]
    closed = [r["closed_fraction"] for r in ablations["runs"].values()]
    assert ablations["summary"]["closed"]["mean"] == pytest.approx(sum(closed) / 2)
    assert (
        ablations["summary"]["closed"]["low"]
        < ablations["summary"]["closed"]["mean"]
        < ablations["summary"]["closed"]["high"]
    )
    assert ablations["summary"]["L0"]["min"] <= ablations["summary"]["L0"]["max"]

    monkeypatch.setattr(tables, "COMPARISONS", ("tiny-2seeds",))
    monkeypatch.setattr(tables, "MORE_ROWS", ())
    figures = {"tiny-2seeds": {"value": value}, "tiny-ablation": {"value": ablations}}
    order = tables.order_table(figures).splitlines()
    assert [row.split(" | ")[0] for row in order[2:]] == [
        "| tiny",
        "| tiny-no-pos",
        "| tiny-no-mask",
        "| tiny-no-mask-no-pos",
    ]
    both = value["aggregate"]["tiny-no-mask-no-pos"]["loss/order_use"]
    assert f"| {both['mean']:.3f} ± {both['std']:.3f} |" in order[5]
    differences = tables.order_differences_table(figures).splitlines()
    assert differences[2].startswith("| tiny-no-pos − tiny | ") and differences[3].startswith(
        "| tiny-no-mask-no-pos − tiny-no-mask | "
    )
    val = value["differences"]["tiny-no-mask-no-pos − tiny-no-mask"]["loss/val"]
    assert (
        f"| {val['mean']:+.3f} [{val['mean'] - val['half_width']:+.3f}, "
        f"{val['mean'] + val['half_width']:+.3f}] |" in differences[3]
    )
    rows = tables.ablation_table(figures).splitlines()[2:]
    assert [row.split(" | ")[:2] for row in rows] == [
        ["| tiny-no-mask-s1337", "L0H0"],
        ["| tiny-no-mask-s1338", "L0H0"],
    ]
    readme = tables.readme_table(figures)
    assert (
        "| tiny-no-pos |" in readme
        and "tiny-no-mask-no-pos" not in readme
        and "order use" in readme.splitlines()[0]
    )


def test_score_gradient_refuses_seeds_past_the_largest_in_one_line(capsys):
    """--seeds from a train.seed near the largest would build a seed torch cannot take: one line, as
    compare.py says it.
    """
    import tools.score_gradient

    proc = error_of(
        tools.score_gradient.main,
        ["--config", "tiny", "--seeds", "2", f"--train.seed={2**63 - 1}"],
        capsys,
    )
    assert_one_line_error(proc, "would pass the largest seed")


def test_score_gradient_pairs_each_seed_with_and_without_the_scale(tmp_path, corpus_file):
    """tools/score_gradient.py at initialisation on the tiny preset: one ratio per seed, an interval
    around their mean; with no comparison's checkpoints under --runs-dir there is no end-of-training
    line."""
    from configs import load_config
    from tools.score_gradient import measure

    cfg = load_config(
        [
            "--config",
            "tiny",
            "--data-file",
            str(corpus_file),
            "--data.cache_dir",
            str(tmp_path / "cache"),
        ]
    )
    result = measure(cfg, n_seeds=2, n_batches=1, runs_dir=tmp_path / "runs")
    assert list(result) == ["init"]
    # the third, saturated rows against the rest, needs saturated rows, which tiny may lack
    for line in result["init"][:2]:
        assert len(line["per_seed"]) == 2 and all(r > 0 for r in line["per_seed"]), line
        assert line["low"] <= line["mean"] <= line["high"], line
    qk = result["init"][1]
    # unscaled scores move sqrt(D) times more per change of q or k
    assert qk["ratio"].startswith("qk_grad") and qk["mean"] > 1, qk


def test_the_probes_cost_is_its_phase_of_each_run_and_the_ratio_of_medians():
    """tools.probe_cost.probe_cost on bench.py --whole-run reports, two with the probe and one
    without, numbers by hand.
    """
    from configs import ConfigError
    from tools.probe_cost import probe_cost

    def report(probe_s, wall_s, cpu_s, calls=22):
        phases = {"steps: forward": {"calls": 410, "wall_s": 10.0, "cpu_s": 9.0}}
        phases["probe: the story's signals between evaluations (train.probes)"] = {
            "calls": calls,
            "wall_s": probe_s,
            "cpu_s": probe_s / 2,
        }
        return {
            "command": "python train.py --config char",
            "phases": phases,
            "wall_s": wall_s,
            "cpu_s": cpu_s,
            "val": 1.8618,
        }

    cost = probe_cost(
        [report(1.0, 40.0, 20.0), report(0.0, 38.0, 19.0, calls=0), report(2.0, 50.0, 25.0)]
    )
    assert (
        cost["probes"] == [22, 22]
        and cost["wall_share"] == [1.0 / 40, 2.0 / 50]
        and cost["cpu_share"] == [0.5 / 20, 1.0 / 25]
    )
    assert (
        cost["with"]["wall_s"] == 45.0
        and cost["without"]["wall_s"] == 38.0
        and cost["wall_ratio"] == 45.0 / 38.0
    )
    assert cost["cpu_ratio"] == 22.5 / 19.0 and cost["without"]["val"] == [1.8618]
    with pytest.raises(ConfigError, match="without it"):
        probe_cost([report(1.0, 40.0, 20.0)])


def test_the_docs_tools_refuse_what_they_cannot_read_in_one_line(tmp_path, capsys, monkeypatch):
    """--probe-cost with a report that is missing, a folder, not JSON or lacking a field, --runs-dir
    that is not a folder, a run the outputs read that is not there, the lens page without its run:
    each one line and exit code 2, figures.json untouched."""
    import tools.docs_figures
    import tools.lens_page
    from tools.figures import FIGURES

    before = FIGURES.read_bytes()
    whole = {
        "command": "python train.py --config char",
        "phases": {"probe: x": {"calls": 2, "wall_s": 1.0, "cpu_s": 1.0}},
        "wall_s": 40.0,
        "cpu_s": 20.0,
        "val": 1.86,
        "machine": "m",
        "torch_threads": 1,
        "torch_version": "2",
    }
    reports = {
        "torn.json": '{"command": "python',
        "list.json": "[1]",
        "no-phases.json": json.dumps({**whole, "phases": None}),
        "no-wall.json": json.dumps({**whole, "wall_s": 0}),
        "no-val.json": json.dumps({k: v for k, v in whole.items() if k != "val"}),
    }
    for name, text in reports.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    cases = [
        (
            ["--probe-cost", "k", str(tmp_path / "missing.json")],
            ["missing.json is not there, not a report", "bench.py"],
        ),
        (["--probe-cost", "k", str(tmp_path)], ["is a folder, not a report"]),
        (["--probe-cost", "k", str(tmp_path / "torn.json")], ["torn.json is not JSON"]),
        (["--probe-cost", "k", str(tmp_path / "list.json")], ["list.json is not a JSON object"]),
        (
            ["--probe-cost", "k", str(tmp_path / "no-phases.json")],
            ["no-phases.json has no 'phases'"],
        ),
        (
            ["--probe-cost", "k", str(tmp_path / "no-wall.json")],
            ["no-wall.json has no positive number 'wall_s'"],
        ),
        (["--probe-cost", "k", str(tmp_path / "no-val.json")], ["no-val.json has no 'val'"]),
        (
            ["--probe-cost", str(tmp_path / "torn.json"), str(tmp_path / "list.json")],
            ["takes the name to record under first"],
        ),
        (
            ["--record", "--runs-dir", str(tmp_path / "nowhere")],
            [f"--runs-dir {tmp_path / 'nowhere'} is not there"],
        ),
        (
            ["--record", "--runs-dir", str(tmp_path / "a-file")],
            [f"--runs-dir {tmp_path / 'a-file'} is a file"],
        ),
        (["--check-outputs", "--runs-dir", str(tmp_path / "nowhere")], ["is not there"]),
        (
            ["--check-outputs", "--runs-dir", str(tmp_path), "--outputs", "output-char-score"],
            ["holds no run char with an evaluation"],
        ),
    ]
    for argv, needles in cases:
        proc = error_of(tools.docs_figures.main, argv, capsys)
        assert_one_line_error(proc, *needles)
    assert FIGURES.read_bytes() == before
    # no runs/ there, whatever this checkout holds
    monkeypatch.setattr(tools.lens_page, "ROOT", tmp_path)
    assert_one_line_error(
        error_of(tools.lens_page.main, [], capsys),
        "runs/char-no-mask/ckpt.pt",
        "python train.py --config char --no-mask",
    )


def test_a_positions_comparison_scored_at_contexts_becomes_its_entries_tables_and_picture(
    tmp_path, corpus_file, one_cpu_thread, monkeypatch
):
    """The path of the figures past the training length: compare.py with rope and no-pos, score.py
    --contexts on each run (a learned one up to 1x), read back by tools/figures.py, recorded apart
    from the ablations' comparison, rendered by tools/tables.py (README's table gains the rope row
    among the preset's) and drawn by harness/pictures/curves.py."""
    import compare
    import score
    from harness.pictures.curves import plot_positions
    from tools import figures as recorder
    from tools import tables

    train_in_process(monkeypatch)  # each run in this process
    argv = tiny_argv(
        tmp_path, corpus_file, "--seeds=2", "--variants=rope,no-pos", "--train.max_steps=2"
    )
    compare.main([*argv, "--train.eval_interval=2", "--train.warmup_steps=1"])
    folder = tmp_path / "runs" / "compare-tiny"
    for variant, factors in (
        ("tiny", "0.5,1"),
        ("tiny-no-pos", "0.5,1,2,4"),
        ("tiny-rope", "0.5,1,2,4"),
    ):
        for seed in (1337, 1338):
            score.main(
                [
                    "--runs-dir",
                    str(folder),
                    "--run",
                    f"{variant}-s{seed}",
                    "--device",
                    "cpu",
                    "--contexts",
                    factors,
                ]
            )
    value = recorder.comparison_figures(folder)
    # beside, not over, the ablations' tiny-2seeds
    assert recorder.comparison_key("tiny", value) == "tiny-2seeds-rope"
    assert (
        recorder.comparison_command("tiny", value)
        == "python compare.py --config tiny --seeds 2 --variants no-pos,rope"
    )

    contexts = recorder.context_figures(folder, "tiny")
    scored = {
        (v, s): json.loads((folder / f"{v}-s{s}" / "contexts.json").read_text(encoding="utf-8"))[
            "contexts"
        ]
        for v in ("tiny", "tiny-no-pos", "tiny-rope")
        for s in (1337, 1338)
    }
    rope = [scored["tiny-rope", s]["4x"]["buckets"]["64-127"]["loss"] for s in (1337, 1338)]
    assert contexts["tiny-rope"]["4x"]["64-127"]["mean"] == pytest.approx(sum(rope) / 2)
    assert (
        contexts["tiny-rope"]["4x"]["64-127"]["low"]
        < sum(rope) / 2
        < contexts["tiny-rope"]["4x"]["64-127"]["high"]
    )
    paired = [
        scored["tiny-rope", s]["1x"]["loss"] - scored["tiny", s]["1x"]["loss"] for s in (1337, 1338)
    ]
    assert contexts["differences"]["tiny-rope"]["tiny"]["1x"]["loss"]["mean"] == pytest.approx(
        sum(paired) / 2
    )
    # the learned table has no 2x or 4x
    assert list(contexts["differences"]["tiny-rope"]["tiny"]) == ["0.5x", "1x"]
    assert list(contexts["differences"]["tiny-rope"]["tiny-no-pos"]) == ["0.5x", "1x", "2x", "4x"]
    curve = contexts["tiny-no-pos"]["curve"]
    assert (curve["context"], curve["first"]) == ("4x", list(range(0, 128, recorder.CURVE_BIN)))
    positions = [
        scored["tiny-no-pos", s]["4x"]["by_position"][: recorder.CURVE_BIN] for s in (1337, 1338)
    ]
    assert curve["mean"][0] == pytest.approx(sum(map(sum, positions)) / (2 * recorder.CURVE_BIN))
    assert curve["min"][0] == pytest.approx(min(sum(p) / recorder.CURVE_BIN for p in positions))
    assert recorder.factors_said(contexts) == "0.5,1 for tiny; 0.5,1,2,4 for tiny-no-pos, tiny-rope"

    # as docs/figures.json keeps it
    figures = json.loads(json.dumps({"tiny-contexts": {"value": contexts}}, sort_keys=True))
    table = tables.contexts_table(figures, "tiny-contexts").splitlines()
    assert (
        table[0]
        == "| run | positions | 0.5x: 16 tokens | 1x: 32 tokens | 2x: 64 tokens | 4x: 128 tokens |"
    )
    assert [row.split(" | ")[:2] for row in table[2:]] == [
        ["| tiny", "learned"],
        ["| tiny-no-pos", "none"],
        ["| tiny-rope", "rope"],
    ]
    assert table[2].endswith("| no row past 1x | no row past 1x |")
    loss = contexts["tiny-rope"]["2x"]["loss"]
    assert f"| {loss['mean']:.3f} [{loss['low']:.3f}, {loss['high']:.3f}] |" in table[4]
    buckets = tables.buckets_table(figures, "tiny-contexts").splitlines()
    assert (
        buckets[0]
        == "| run, along its longest context | positions 0-15 | positions 16-31 | positions 32-63 "
        "| positions 64-127 |"
    )
    assert (
        buckets[2].startswith("| tiny (1x) | ")
        and buckets[2].endswith(" |  |  |")
        and buckets[4].startswith("| tiny-rope (4x) | ")
    )

    ablations = {
        **value,
        "aggregate": {name: value["aggregate"][name] for name in ("tiny", "tiny-no-pos")},
    }
    ablations["aggregate"]["tiny"] = {
        **ablations["aggregate"]["tiny"],
        "loss/val": {"mean": 9.999, "std": 0.0, "n": 2},
    }
    monkeypatch.setattr(tables, "COMPARISONS", ("tiny-2seeds",))
    monkeypatch.setattr(tables, "MORE_ROWS", ("tiny-2seeds-rope",))
    readme = tables.readme_table(
        {"tiny-2seeds": {"value": ablations}, "tiny-2seeds-rope": {"value": value}}
    ).splitlines()
    assert [row.split(" | ")[0] for row in readme[2:]] == ["| tiny", "| tiny-no-pos", "| tiny-rope"]
    # a variant both comparisons hold keeps the first one's figures
    assert "| 9.999 ± 0.000 |" in readme[2]

    picture = tmp_path / "contexts-tiny.png"
    plot_positions(contexts, picture, recorder.positions_title("tiny", contexts))
    assert picture.read_bytes().startswith(b"\x89PNG") and picture.stat().st_size > 10_000


def test_the_shipped_variants_become_docs_variants_table_and_picture(
    tmp_path, corpus_file, one_cpu_thread, monkeypatch
):
    """compare.py with --sink on tiny, then tools/variants.py on its checkpoints and bench.py
    --variants's figures, rendered by tools/tables.py: at 2 steps no head favours the first token
    yet, and the sink already takes weight (its logit starts at 0, one more equal entry in a softmax
    of near-equal scores: about the mean of 1/(t+2) over rows, 0.11 at T = 32)."""
    import compare
    import tools.variants
    from harness.experiments.variant_bench import bench_variants
    from harness.pictures.curves import plot_tradeoff
    from harness.training.runtime import setup_runtime
    from tools import tables, variants
    from tools.figures import comparison_figures

    train_in_process(monkeypatch)
    compare.main(
        [
            *tiny_argv(
                tmp_path, corpus_file, "--seeds=2", "--variants=sink", "--train.max_steps=2"
            ),
            "--train.warmup_steps=1",
            "--train.probes=0",
        ]
    )
    folder = tmp_path / "runs" / "compare-tiny"
    weights = variants.measure_runs(folder)
    assert list(weights) == ["tiny", "tiny-sink"] and list(weights["tiny-sink"]["runs"]) == [
        "1337",
        "1338",
    ]
    assert (
        weights["tiny"]["sink"]["mean"] < 1e-6
        and 0.08 < weights["tiny-sink"]["sink"]["mean"] < 0.14
    )
    assert weights["tiny"]["uniform"]["mean"] == pytest.approx(
        sum(1 / (t + 1) for t in range(1, 32)) / 31
    )
    assert 0 < weights["tiny"]["ratio"]["mean"] < 2 and weights["tiny"]["step_ms"]["mean"] > 0
    from configs import load_config

    cfg = load_config(["--config", "tiny", "--device", "cpu"])
    bench = bench_variants(
        cfg, setup_runtime(cfg.train), ["sink"], new_tokens=2, repeats=1, train_steps=1
    )
    report = tmp_path / "bench.json"  # what bench.py --variants --json prints, with its machine
    report.write_text(
        json.dumps(
            {
                "variant_names": ["sink"],
                "machine": "m",
                "torch_threads": 1,
                "torch_version": "x",
                "load_avg_1min": 0.5,
                **bench,
            }
        )
    )
    # never the docs' own
    monkeypatch.setattr(tools.variants, "FIGURES", tmp_path / "docs" / "figures.json")
    (tmp_path / "docs").mkdir()
    assert (
        tools.variants.main(
            ["--config", "tiny", "--runs-dir", str(tmp_path / "runs"), "--bench", str(report)]
        )
        == 0
    )
    recorded = read_figures(tmp_path / "docs" / "figures.json")
    assert (
        recorded["tiny-variants-weights"]["value"]["tiny-sink"]["sink"]
        == weights["tiny-sink"]["sink"]
    )
    assert (
        recorded["tiny-variants-bench"]["command"]
        == "OMP_NUM_THREADS=1 python bench.py --config tiny --variants sink --json"
    )
    figures = {
        "tiny-2seeds-sink": {"value": comparison_figures(folder)},
        "tiny-variants-bench": {"value": bench},
    }
    figures["tiny-variants-weights"] = {"value": weights}
    rows = tables.variants_table(figures, "tiny", "tiny-2seeds-sink").splitlines()
    assert rows[2].startswith("| tiny | ") and "| (the preset) | 512 (100%) |" in rows[2]
    assert rows[3].startswith("| tiny-sink | ") and rows[3].endswith(
        f"| {weights['tiny-sink']['sink']['mean']:.3f} |"
    )
    plot_tradeoff(
        [("tiny", 512, 4.0, 0.1), ("tiny-sink", 512, 4.1, 0.0)],
        tmp_path / "p.png",
        "bytes",
        "val",
        "title",
    )
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
