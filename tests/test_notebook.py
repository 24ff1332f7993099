"""notebooks/attention.ipynb: committed with its outputs, and run fresh, top to bottom, on a small
text.

The run executes a copy in memory with the python3 kernel (ipykernel's), so the committed outputs
stay as they are; any cell that raises fails the test. The notebook reads the text named by
ATTENTION_NOTEBOOK_TEXT instead of downloading Tiny Shakespeare, and writes its runs under TMPDIR.
"""

import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT, import_or_skip

from configs.validation import SHAPE
from model import ModelConfig
from model.ablations import flags_label, variants

NEEDS = (
    "the notebook test needs nbformat, nbclient and ipykernel (pip install -r requirements-dev.txt)"
)
nbformat = import_or_skip("nbformat", NEEDS)
nbclient = import_or_skip("nbclient", NEEDS)
import_or_skip("ipykernel", NEEDS)  # the python3 kernel the notebook runs in

NOTEBOOK = REPO_ROOT / "notebooks" / "attention.ipynb"


def code_outputs(nb) -> list[str]:
    """The text every code cell printed or displayed, one string per cell."""
    texts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        parts = [
            out.get("text", "")
            for out in cell.outputs
            if out.output_type == "stream" and out.name == "stdout"
        ]
        parts += [
            out.data.get("text/markdown", "")
            for out in cell.outputs
            if out.output_type == "display_data"
        ]
        texts.append("".join(parts))
    return texts


def test_notebook_is_committed_with_outputs_and_a_kernel_every_environment_has():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert NOTEBOOK.stat().st_size < 1_000_000, (
        "keep the pictures small: the notebook is read on a code host"
    )
    # ipykernel's own kernel: present wherever ipykernel is installed
    assert nb.metadata.kernelspec.name == "python3"
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code), "every code cell has run"
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), (
        "run top to bottom, once"
    )
    assert not [out for cell in code for out in cell.outputs if out.output_type == "error"]
    images = [out for cell in code for out in cell.outputs if "image/png" in out.get("data", {})]
    assert len(images) >= 5, "the hand-made head, the curves and one heatmap per trained model"


def test_the_notebooks_sections_are_numbered_in_order_and_end_with_where_next():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    headings = [
        line[3:]
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for line in cell.source.splitlines()
        if line.startswith("## ")
    ]
    numbers = [int(m.group(1)) for h in headings[:-1] if (m := re.match(r"(\d+)\. ", h))]
    assert numbers == list(range(1, len(headings))) and headings[-1] == "Where next", headings


def test_notebook_runs_top_to_bottom_on_a_small_text(tmp_path, corpus_file, monkeypatch):
    before = NOTEBOOK.read_bytes()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    monkeypatch.setenv("ATTENTION_NOTEBOOK_TEXT", str(corpus_file))
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the runs' temporary folder
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
    assert NOTEBOOK.read_bytes() == before, "the committed notebook is left as it was"

    printed = "\n".join(code_outputs(nb))
    assert "first row equals v[0]: True" in printed
    # the cell that asserts attention() and PyTorch agree with the hand computation
    assert "largest difference: project" in printed
    grouped = re.search(
        r"by hand vs the project's MultiHead: (\S+)\nby hand vs torch's kernel: +(\S+)", printed
    )
    assert grouped and max(map(float, grouped.groups())) < 1e-5, (
        "grouped-query heads by hand = MultiHead(kv_heads) = torch's"
    )
    losses = {
        name: (float(forced), float(honest))
        for name, forced, honest in re.findall(
            r"^(.+): teacher-forced loss ([\d.]+), honest loss ([\d.]+) nats", printed, re.MULTILINE
        )
    }
    intact = ModelConfig()  # the runs are named by their labels: model/ablations.py
    no_mask, no_scale = (
        flags_label(variants(intact)[suffix]) for suffix in ("-no-mask", "-no-scale")
    )
    assert set(losses) == {flags_label(intact), no_mask, no_scale}
    for name in (flags_label(intact), no_scale):
        forced, honest = losses[name]
        assert honest == pytest.approx(forced, abs=0.01), (
            f"{name}: a causal model scores the same with or without the future"
        )
    forced, honest = losses[no_mask]
    assert honest > forced + 1.0, (
        f"the model without the mask must be caught: honest {honest}, teacher-forced {forced}"
    )
    assert "next-token" in printed, (
        "the role table names the next-token heads of the model without the mask"
    )
    runs = [p.name for p in tmp_path.glob("attention-notebook-*/*") if (p / "ckpt.pt").is_file()]
    # the sizes the notebook changes from tiny's end each run's name
    sizes = re.compile(rf"(-({'|'.join(SHAPE)})\d+)*$")
    # three runs, none moved aside
    assert sorted(sizes.sub("", name) for name in runs) == [
        "tiny",
        "tiny-no-mask",
        "tiny-no-scale",
    ], runs
    assert not (Path(REPO_ROOT) / "notebooks" / "runs").exists()
