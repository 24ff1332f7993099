"""tools/docs_figures.py: every figure README and docs/ quote agrees with its one source, docs/figures.json (measured
runs, each with its command, machine and date) or the code itself (code.*, computed here); and the install that
README gives first pulls no CUDA package."""

import copy
import json
import re

import pytest
from conftest import REPO_ROOT

from tools.docs_figures import code_values, fill, pattern, sync
from tools.figures import read_figures
from tools.quotes import QUOTES


def test_every_quoted_figure_agrees_with_docs_figures_json_and_the_code():
    problems = sync(read_figures(), write=False)
    assert not problems, "run python -m tools.docs_figures to bring the docs in line:\n" + "\n".join(problems)


def test_a_figure_that_drifts_is_caught():
    figures = copy.deepcopy(read_figures())
    figures["char"]["value"]["last"]["loss/val"] += 0.01  # docs/sampling.md and README quote it
    figures["base-3seeds"]["value"]["aggregate"]["base-no-mask"]["loss/val_honest"]["mean"] = 7.0  # README's table
    problems = sync(figures, write=False)
    assert any(p.startswith("docs/sampling.md: says '# runs/char/ckpt.pt") for p in problems), problems
    assert any(p.startswith("README.md: its table") for p in problems), problems


def test_every_measured_entry_names_its_command_machine_and_date():
    for key, entry in read_figures().items():
        assert entry["command"] and entry["machine"] and re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["date"]), key


def test_a_sentence_matches_across_line_breaks_and_finds_placeholders_left_unfilled():
    sentence = "val loss {char.last.loss/val:.3f} after {char.last.step:.0f} steps"
    assert pattern(sentence).search("the val loss 1.868\nafter 390 steps").groups() == ("1.868", "390")
    assert pattern(sentence).search("val loss {char.last.loss/val:.3f} after 390 steps").group(1) == "{char.last.loss/val:.3f}"
    assert fill(sentence, ["1.868", "390"]) == "val loss 1.868 after 390 steps"
    assert pattern("scores {x:,.0f}, and").search("scores 15,360, and").group(1) == "15,360"


def test_code_figures_are_the_models_own():
    values = code_values()
    assert round(values["code.char_params_m"], 1) == 0.6 and round(values["code.base_params_m"], 1) == 7.2
    assert values["code.char_honest_predictions"] == 4 * 12 * 8 and values["code.char_val_predictions"] == 10 * 12 * 128
    assert values["code.sample_tokens_shown"] == values["code.sample_tokens"] + 1


def test_every_quote_names_a_doc_that_exists():
    assert {doc for doc, _ in QUOTES} <= {str(p.relative_to(REPO_ROOT)) for p in [REPO_ROOT / "README.md", *REPO_ROOT.glob("docs/*.md")]}


def quickstart_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ") and line.strip()]


def test_readme_installs_the_cpu_build_of_torch_before_anything_that_depends_on_it():
    """A machine without CUDA that follows README top to bottom gets PyTorch's CPU wheel before requirements.txt
    (whose torch range the CPU build then satisfies, so pip pulls no nvidia-* package)."""
    commands = quickstart_commands()
    assert commands[0].startswith("pip install torch --index-url https://download.pytorch.org/whl/cpu"), commands[:2]
    assert commands[1] == "pip install -r requirements.txt"
    torch_line = next(line for line in (REPO_ROOT / "requirements.txt").read_text().splitlines() if line.startswith("torch"))
    assert "+cu" not in torch_line and "index-url" not in torch_line, torch_line


def test_the_test_extras_live_in_requirements_dev_which_ci_and_the_tests_page_use():
    dev = (REPO_ROOT / "requirements-dev.txt").read_text()
    assert "-r requirements.txt" in dev and all(name in dev for name in ("transformers", "nbclient", "nbformat", "ipykernel"))
    assert "pip install --quiet -r requirements-dev.txt" in (REPO_ROOT / ".ci" / "run").read_text()
    assert "pip install -r requirements-dev.txt" in (REPO_ROOT / "docs" / "tests.md").read_text()


@pytest.mark.parametrize("key", ["char-3seeds", "base-3seeds"])
def test_the_comparisons_hold_every_column_of_readmes_table(key):
    aggregate = read_figures()[key]["value"]["aggregate"]
    assert len(aggregate) == 3 and all(stats["loss/val"]["n"] == 3 for stats in aggregate.values()), json.dumps(aggregate)[:200]


def test_score_gradient_pairs_each_seed_with_and_without_the_scale(tmp_path, corpus_file):
    """tools/score_gradient.py at initialisation on the tiny preset: one ratio per seed, an interval around their mean;
    with no comparison's checkpoints under --runs-dir there is no end-of-training line."""
    from configs import load_config
    from tools.score_gradient import measure

    cfg = load_config(["--config", "tiny", "--data-file", str(corpus_file), "--data.cache_dir", str(tmp_path / "cache")])
    result = measure(cfg, n_seeds=2, n_batches=1, runs_dir=tmp_path / "runs")
    assert list(result) == ["init"]
    for line in result["init"][:2]:  # the third, saturated rows against the rest, needs saturated rows, which tiny may lack
        assert len(line["per_seed"]) == 2 and all(r > 0 for r in line["per_seed"]), line
        assert line["low"] <= line["mean"] <= line["high"], line
    qk = result["init"][1]
    assert qk["ratio"].startswith("qk_grad") and qk["mean"] > 1, qk  # unscaled scores move sqrt(D) times more per change of q or k
