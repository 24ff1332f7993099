"""The sentences of README.md and docs/ that quote a measured figure, each figure written as
{name:format}.

A name is a dotted path into docs/figures.json (key, then the keys inside its value), or one of the
figures tools/docs_figures.py derives (a comparison's score_spread, an interval's low and high, the
score-gradient ratios). Whitespace in a sentence matches any whitespace in the doc, so a sentence
may wrap anywhere there. A doc may also hold a sentence with its placeholders still in it:
python -m tools.docs_figures fills them in.
"""

from tools.quotes_cures import CURE_QUOTES, VARIANT_QUOTES

COMPARISONS = ("char-3seeds", "base-3seeds")  # the comparisons README's table shows, in its order
# the learning-rate sweeps: their cure rows at the preset's rate join the tables of their config
SWEEPS = ("char-sweep",)
# later comparisons whose variants README's table shows too, among their preset's rows
MORE_ROWS = ("char-3seeds-rope",)
QUOTES = [  # (doc, sentence): the sentence as the doc writes it, each figure a placeholder
    (
        "README.md",
        "first: the environment is then {install.venv_cpu_gb:.1f} GB with no CUDA package.",
    ),
    (
        "README.md",
        "leave that line out: PyPI's PyTorch brings CUDA ({install.venv_cuda_gb:.1f} GB).",
    ),
    (
        "README.md",
        "python train.py --config char             # {timings.train_char_s:.0f} s: trains",
    ),
    (
        "README.md",
        "python train.py --config char --no-mask   # {timings.train_char_s:.0f} s: the same run",
    ),
    (
        "README.md",
        "python train.py --config base      # {timings.train_base_s:.0f} s: Tiny Shakespeare",
    ),
    (
        "README.md",
        "python train.py --no-mask          # {timings.train_base_s:.0f} s: the same run",
    ),
    ("README.md", "python train.py --no-scale         # {timings.train_base_s:.0f} s: without"),
    (
        "README.md",
        "python -m pytest                   # the tests: {timings.suite_s:.0f} s, no network",
    ),
    ("README.md", "python score.py                    # {timings.score_s:.0f} s: its loss"),
    ("README.md", "same seed (2-core CPU: {timings.compare_char_s:.0f} s)"),
    ("README.md", "with GPT-2 tokens (2-core CPU: {timings.compare_base_s:.0f} s)"),
    ("docs/experiment.md", "same seed (2-core CPU: {timings.compare_char_s:.0f} s)"),
    (
        "docs/tests.md",
        "{timings.suite_passed:.0f} passed and {timings.suite_skipped:.0f} skipped (the CUDA-only tests and one 3.x-only TransformerLens test) in {timings.suite_s:.0f} s; "
        "the whole of `.ci/run` took {timings.ci_s:.0f} s",
    ),
    ("README.md", "the last near val 1.86 ({char.last.loss/val:.3f} on the"),
    ("docs/experiment.md", "with GPT-2 tokens (2-core CPU: {timings.compare_base_s:.0f} s)"),
    (
        "README.md",
        "(char: {char-3seeds.aggregate.char-no-mask.loss/val_honest.mean:.2f} nats against "
        "{char-3seeds.aggregate.char.loss/val_honest.mean:.2f},",
    ),
    (
        "README.md",
        "scores spread {char-3seeds.score_spread:.0f}x (char) and {base-3seeds.score_spread:.1f}x (base) more",
    ),
    (
        "README.md",
        "run of `python train.py --config char` (val loss {char.last.loss/val:.3f} at its last step)",
    ),
    (
        "docs/sampling.md",
        "run of `python train.py --config base` (val loss {base.last.loss/val:.3f} at its last step)",
    ),
    (
        "docs/command-line.md",
        "the default demo: val {base.last.loss/val:.3f}, {timings.train_base_s:.0f} s on a quiet 2-core CPU",
    ),
    (
        "docs/command-line.md",
        "val loss {char.last.loss/val:.3f} after {char.last.step:.0f} steps, {timings.train_char_s:.0f} s on a quiet",
    ),
    (
        "docs/sampling.md",
        "(`python train.py --config char`, val loss {char.last.loss/val:.3f} at its last step)",
    ),
    (
        "docs/experiment.md",
        "By step {char-3seeds.collapse.char-no-mask.max:.0f} (all three seeds) the `char-no-mask` training loss has collapsed below 0.5",
    ),
    (
        "docs/experiment.md",
        "its training loss {base-3seeds.aggregate.base-no-mask.loss/train.mean:.3f} ± {base-3seeds.aggregate.base-no-mask.loss/train.std:.3f} "
        "at the end against the causal run's {base-3seeds.aggregate.base.loss/train.mean:.3f} ± {base-3seeds.aggregate.base.loss/train.std:.3f})",
    ),
    (
        "docs/experiment.md",
        "it ends at {char-3seeds.aggregate.char-no-mask.loss/train.mean:.3f} ± "
        "{char-3seeds.aggregate.char-no-mask.loss/train.std:.3f}; so does the teacher-forced val loss "
        "({char-3seeds.aggregate.char-no-mask.loss/val.mean:.3f} ± {char-3seeds.aggregate.char-no-mask.loss/val.std:.3f})",
    ),
    (
        "docs/experiment.md",
        "(`attn/future_mass` {char-3seeds.aggregate.char-no-mask.attn/future_mass.mean:.3f} ± "
        "{char-3seeds.aggregate.char-no-mask.attn/future_mass.std:.3f}:",
    ),
    (
        "docs/experiment.md",
        "the same model scores {char-3seeds.aggregate.char-no-mask.loss/val_honest.mean:.2f} ± "
        "{char-3seeds.aggregate.char-no-mask.loss/val_honest.std:.2f} nats per character",
    ),
    (
        "docs/experiment.md",
        "(val {base-3seeds.aggregate.base-no-mask.loss/val.mean:.3f} ± {base-3seeds.aggregate.base-no-mask.loss/val.std:.3f} "
        "against an honest\n{base-3seeds.aggregate.base-no-mask.loss/val_honest.mean:.2f} ± {base-3seeds.aggregate.base-no-mask.loss/val_honest.std:.2f},",
    ),
    (
        "docs/experiment.md",
        "(measured:\n{char-3seeds.step0.char-no-scale.attn/score_std.mean:.2f} ± {char-3seeds.step0.char-no-scale.attn/score_std.std:.2f} "
        "in char and {base-3seeds.step0.base-no-scale.attn/score_std.mean:.2f} ± {base-3seeds.step0.base-no-scale.attn/score_std.std:.2f} in base",
    ),
    (
        "docs/experiment.md",
        "the mean normalised entropy starts at\n{char-3seeds.step0.char-no-scale.attn/entropy.mean:.3f} ± "
        "{char-3seeds.step0.char-no-scale.attn/entropy.std:.3f} (char) and {base-3seeds.step0.base-no-scale.attn/entropy.mean:.3f} ± "
        "{base-3seeds.step0.base-no-scale.attn/entropy.std:.3f} (base) instead of {char-3seeds.step0.char.attn/entropy.mean:.3f} and "
        "{base-3seeds.step0.base.attn/entropy.mean:.3f}",
    ),
    (
        "docs/experiment.md",
        "and {char-3seeds.step0.char-no-scale.attn/saturated_frac.mean:pct.1f} ± "
        "{char-3seeds.step0.char-no-scale.attn/saturated_frac.std:pct.1f}% (char) and\n"
        "{base-3seeds.step0.base-no-scale.attn/saturated_frac.mean:pct.1f} ± {base-3seeds.step0.base-no-scale.attn/saturated_frac.std:pct.1f}% (base)",
    ),
    (
        "docs/experiment.md",
        "At the end {char-3seeds.aggregate.char-no-scale.attn/saturated_frac.mean:pct.1f} ± "
        "{char-3seeds.aggregate.char-no-scale.attn/saturated_frac.std:pct.1f}% (char) and "
        "{base-3seeds.aggregate.base-no-scale.attn/saturated_frac.mean:pct.1f} ± {base-3seeds.aggregate.base-no-scale.attn/saturated_frac.std:pct.1f}% "
        "(base) of rows are saturated, against {char-3seeds.aggregate.char.attn/saturated_frac.mean:pct.1f}% and "
        "{base-3seeds.aggregate.base.attn/saturated_frac.mean:pct.1f}%",
    ),
    (
        "docs/experiment.md",
        "scores are {char-3seeds.score_spread:.0f}x (char: {char-3seeds.aggregate.char-no-scale.attn/score_std.mean:.1f} ± "
        "{char-3seeds.aggregate.char-no-scale.attn/score_std.std:.1f} against {char-3seeds.aggregate.char.attn/score_std.mean:.2f} ± "
        "{char-3seeds.aggregate.char.attn/score_std.std:.2f}) and {base-3seeds.score_spread:.1f}x (base: "
        "{base-3seeds.aggregate.base-no-scale.attn/score_std.mean:.2f} ± {base-3seeds.aggregate.base-no-scale.attn/score_std.std:.2f} against "
        "{base-3seeds.aggregate.base.attn/score_std.mean:.2f} ± {base-3seeds.aggregate.base.attn/score_std.std:.2f})",
    ),
    (
        "docs/experiment.md",
        "char val {char-3seeds.differences.char-no-scale.loss/val.mean:+.3f} nats "
        "[{char-3seeds.differences.char-no-scale.loss/val.low:.3f},\n{char-3seeds.differences.char-no-scale.loss/val.high:.3f}], "
        "base {base-3seeds.differences.base-no-scale.loss/val.mean:+.3f} [{base-3seeds.differences.base-no-scale.loss/val.low:.3f}, "
        "{base-3seeds.differences.base-no-scale.loss/val.high:.3f}]",
    ),
    (
        "docs/experiment.md",
        "(over three seeds the causal char run shows honest {char-3seeds.aggregate.char.loss/val_honest.mean:.3f} ± "
        "{char-3seeds.aggregate.char.loss/val_honest.std:.3f} against val {char-3seeds.aggregate.char.loss/val.mean:.3f} ± "
        "{char-3seeds.aggregate.char.loss/val.std:.3f})",
    ),
    (
        "docs/experiment.md",
        "a saturated row passes back\n{score-gradient-char.init.saturated.mean:.3f} "
        "[{score-gradient-char.init.saturated.low:.3f}, {score-gradient-char.init.saturated.high:.3f}] of an unsaturated row's gradient (root mean square",
    ),
    (
        "docs/experiment.md",
        "the scores receive {score-gradient-char.init.score.mean:.2f}x "
        "[{score-gradient-char.init.score.low:.2f}, {score-gradient-char.init.score.high:.2f}] the gradient",
    ),
    (
        "docs/experiment.md",
        "the query and key weights\n{score-gradient-char.init.qk.mean:.1f}x "
        "[{score-gradient-char.init.qk.low:.1f}, {score-gradient-char.init.qk.high:.1f}] (each unscaled score moves",
    ),
    (
        "docs/experiment.md",
        "a saturated row passes back {score-gradient-char.end.saturated.mean:.3f} [{score-gradient-char.end.saturated.low:.3f}, "
        "{score-gradient-char.end.saturated.high:.3f}] of an unsaturated row's gradient, while the scores receive {score-gradient-char.end.score.mean:.2f}x "
        "[{score-gradient-char.end.score.low:.2f}, {score-gradient-char.end.score.high:.2f}] and the query and key weights "
        "{score-gradient-char.end.qk.mean:.2f}x [{score-gradient-char.end.qk.low:.2f}, {score-gradient-char.end.qk.high:.2f}] the scaled model's",
    ),
    (
        "README.md",
        "weights get no less gradient without the scale: {score-gradient-char.init.qk.mean:.1f}x the scaled model's at step 0, "
        "{score-gradient-char.end.qk.mean:.2f}x [{score-gradient-char.end.qk.low:.2f}, {score-gradient-char.end.qk.high:.2f}] at the end",
    ),
    (
        "docs/sampling.md",
        "(`char` ends at val {yardstick-char.pairs.1.ours_val:.3f} with two threads, {char.last.loss/val:.3f} with one)",
    ),
    (
        "docs/sampling.md",
        "(below, on the val split at `--stride 128`,\n{output-char-no-mask-score.cpu_s:.0f} s of CPU time with one torch "
        "thread, where the causal run's takes {output-char-score-stride.cpu_s:.0f} s)",
    ),
    (
        "docs/sampling.md",
        "Its logged val loss, {char-no-mask.last.loss/val:.4f}, is what it scores",
    ),
    (
        "docs/sampling.md",
        "`python score.py --run char --stride 128`, scores {output-char-score-stride.json.loss:.4f} nats "
        "(perplexity {output-char-score-stride.json.perplexity:.3f})",
    ),
    # order: the positions removed, with and without the mask (docs/experiment.md#order-...)
    (
        "docs/experiment.md",
        "in char its val loss is {char-3seeds.aggregate.char-no-pos.loss/val.mean:.3f} ± "
        "{char-3seeds.aggregate.char-no-pos.loss/val.std:.3f} against {char-3seeds.aggregate.char.loss/val.mean:.3f} ± "
        "{char-3seeds.aggregate.char.loss/val.std:.3f}, worse by {char-3seeds.differences.char-no-pos.loss/val.mean:.3f} nats "
        "[{char-3seeds.differences.char-no-pos.loss/val.low:.3f}, {char-3seeds.differences.char-no-pos.loss/val.high:.3f}]",
    ),
    (
        "docs/experiment.md",
        "in base, {base-3seeds.aggregate.base-no-pos.loss/val.mean:.3f} ± {base-3seeds.aggregate.base-no-pos.loss/val.std:.3f} "
        "against {base-3seeds.aggregate.base.loss/val.mean:.3f} ± {base-3seeds.aggregate.base.loss/val.std:.3f} "
        "({base-3seeds.differences.base-no-pos.loss/val.mean:+.3f} [{base-3seeds.differences.base-no-pos.loss/val.low:.3f}, "
        "{base-3seeds.differences.base-no-pos.loss/val.high:.3f}])",
    ),
    (
        "docs/experiment.md",
        "shuffling the 8 characters before a target costs it {char-3seeds.aggregate.char-no-pos.loss/order_use.mean:.3f} ± "
        "{char-3seeds.aggregate.char-no-pos.loss/order_use.std:.3f} nats, against {char-3seeds.aggregate.char.loss/order_use.mean:.3f} ± "
        "{char-3seeds.aggregate.char.loss/order_use.std:.3f} with positions; the 8 GPT-2 tokens before a target, "
        "{base-3seeds.aggregate.base-no-pos.loss/order_use.mean:.3f} ± {base-3seeds.aggregate.base-no-pos.loss/order_use.std:.3f} against "
        "{base-3seeds.aggregate.base.loss/order_use.mean:.3f} ± {base-3seeds.aggregate.base.loss/order_use.std:.3f}",
    ),
    (
        "docs/experiment.md",
        "(char val {char-3seeds.aggregate.char-no-mask-no-pos.loss/val.mean:.3f} ± "
        "{char-3seeds.aggregate.char-no-mask-no-pos.loss/val.std:.3f} against {char-3seeds.aggregate.char-no-mask.loss/val.mean:.3f} ± "
        "{char-3seeds.aggregate.char-no-mask.loss/val.std:.3f}): it knows",
    ),
    (
        "docs/experiment.md",
        "its leak gap is {char-3seeds.aggregate.char-no-mask-no-pos.loss/leak_gap.mean:.3f} ± "
        "{char-3seeds.aggregate.char-no-mask-no-pos.loss/leak_gap.std:.3f} nats in char and "
        "{base-3seeds.aggregate.base-no-mask-no-pos.loss/leak_gap.mean:.3f} ± {base-3seeds.aggregate.base-no-mask-no-pos.loss/leak_gap.std:.3f} "
        "in base, against {char-3seeds.aggregate.char-no-mask.loss/leak_gap.mean:.3f} ± {char-3seeds.aggregate.char-no-mask.loss/leak_gap.std:.3f} "
        "and {base-3seeds.aggregate.base-no-mask.loss/leak_gap.mean:.3f} ± {base-3seeds.aggregate.base-no-mask.loss/leak_gap.std:.3f} with positions",
    ),
    (
        "README.md",
        "char val {char-3seeds.aggregate.char-no-pos.loss/val.mean:.3f} ± {char-3seeds.aggregate.char-no-pos.loss/val.std:.3f} against "
        "{char-3seeds.aggregate.char.loss/val.mean:.3f} ± {char-3seeds.aggregate.char.loss/val.std:.3f}, and shuffling the 8 characters before a "
        "target costs it {char-3seeds.aggregate.char-no-pos.loss/order_use.mean:.2f} nats against {char-3seeds.aggregate.char.loss/order_use.mean:.2f};",
    ),
    (
        "docs/experiment.md",
        "so removing them costs {base-3seeds.differences.base-no-pos.loss/val.mean:.3f} nats of val loss, and the honest loss moves by "
        "{base-3seeds.differences.base-no-pos.loss/val_honest.mean:+.3f} [{base-3seeds.differences.base-no-pos.loss/val_honest.low:.3f}, "
        "{base-3seeds.differences.base-no-pos.loss/val_honest.high:.3f}], within the seed noise",
    ),
    (
        "docs/experiment.md",
        "teacher-forced, the model without mask and positions scores {base-3seeds.aggregate.base-no-mask-no-pos.loss/val.mean:.3f} ± "
        "{base-3seeds.aggregate.base-no-mask-no-pos.loss/val.std:.3f}, below the causal model's {base-3seeds.aggregate.base.loss/val.mean:.3f} ± "
        "{base-3seeds.aggregate.base.loss/val.std:.3f} (knowing",
    ),
    (
        "docs/experiment.md",
        "while honestly it scores {base-3seeds.aggregate.base-no-mask-no-pos.loss/val_honest.mean:.3f} ± "
        "{base-3seeds.aggregate.base-no-mask-no-pos.loss/val_honest.std:.3f}, worse",
    ),
    (
        "docs/experiment.md",
        "(the whole layer, `--ablate L0`, closes {char-ablation.runs.char-no-mask-s1338.each_layer.L0:pct.1f}%), though alone",
    ),
    # which heads carry the no-mask cheat (docs/experiment.md#which-heads-cheat-switching-them-off)
    (
        "docs/experiment.md",
        "the named heads close {char-ablation.summary.closed.mean:pct.1f}% ± {char-ablation.summary.closed.std:pct.1f}% of the gap in char (95% interval "
        "[{char-ablation.summary.closed.low:pct.1f}%, {char-ablation.summary.closed.high:pct.1f}%]) and {base-ablation.summary.closed.mean:pct.1f}% ± {base-ablation.summary.closed.std:pct.1f}% in base "
        "([{base-ablation.summary.closed.low:pct.1f}%, {base-ablation.summary.closed.high:pct.1f}%]); as many random other heads close {char-ablation.summary.random.mean:pct.1f}% ± "
        "{char-ablation.summary.random.std:pct.1f}% and {base-ablation.summary.random.mean:pct.1f}% ± {base-ablation.summary.random.std:pct.1f}%: nothing",
    ),
    (
        "docs/experiment.md",
        "Switching layer 0 off whole closes {char-ablation.summary.L0.min:pct.1f}% to {char-ablation.summary.L0.max:pct.1f}% of the gap in char and "
        "{base-ablation.summary.L0.min:pct.1f}% to {base-ablation.summary.L0.max:pct.1f}% in base, in every seed; switching any later layer off whole closes between "
        "{char-ablation.summary.later_layers.min:pct.1f}% and {char-ablation.summary.later_layers.max:pct.1f}% (char) and between {base-ablation.summary.later_layers.min:pct.1f}% and "
        "{base-ablation.summary.later_layers.max:pct.1f}% (base)",
    ),
    (
        "docs/experiment.md",
        "one head alone closes between {char-ablation.summary.each_head.min:pct.0f}% and {char-ablation.summary.each_head.max:pct.0f}% in char "
        "(between {base-ablation.summary.each_head.min:pct.0f}% and {base-ablation.summary.each_head.max:pct.0f}% in base)",
    ),
    (
        "docs/experiment.md",
        "switching them off closed {char-ablation.runs.char-no-mask-s1338.closed_fraction:pct.1f}%: the fourth, L0H2, put "
        "{char-ablation.runs.char-no-mask-s1338.next_token_weight.L0H2:.3f} of its weight on",
    ),
    (
        "README.md",
        "closes the whole no-mask leak gap (char {char-ablation.summary.L0.min:pct.1f}% to {char-ablation.summary.L0.max:pct.1f}%, "
        "base {base-ablation.summary.L0.min:pct.1f}% to {base-ablation.summary.L0.max:pct.1f}%, every seed)",
    ),
    # what a forced cut does to GPT-2's ids (docs/own-text.md#preparation-once-in-constant-memory),
    # and where cuts fall
    (
        "docs/own-text.md",
        "`.bin` files in order, a task of {code.task_chars:,.0f} characters at a time.",
    ),
    (
        "docs/own-text.md",
        "so GPT-2's text with no safe place within {code.force_after:,.0f} characters after the limit is cut by force "
        "(`data/chunks.py`), into pieces of {code.forced_chars:,.0f} characters at most",
    ),
    (
        "docs/own-text.md",
        "one of at most {code.whole_chars:,.0f} characters with no safe place is encoded whole",
    ),
    (
        "docs/own-text.md",
        "cut {forced-cuts.chunk_chars:,.0f} characters a task: the play without its whitespace ({forced-cuts.no_whitespace.cuts:.0f} "
        "cuts) and its base64 ({forced-cuts.base64.cuts:.0f} cuts) keep every id; its letters alone ({forced-cuts.letters_only.cuts:.0f} cuts, "
        "{forced-cuts.letters_only.tokens_whole:,.0f} tokens) change {forced-cuts.letters_only.differ_whole:.0f} tokens of the whole for "
        "{forced-cuts.letters_only.differ_cut:.0f} ({forced-cuts.letters_only.differ_per_cut:.1f} a cut), random ACGT {forced-cuts.acgt.differ_whole:.0f} "
        "for {forced-cuts.acgt.differ_cut:.0f} in {forced-cuts.acgt.cuts:.0f} cuts",
    ),
    # the GPU preset's first steps on a CPU, against nanoGPT (docs/performance.md#on-a-gpu), and the
    # compile test's cost
    (
        "docs/performance.md",
        "our AdamW run within {char-gpu-first-steps-cpu.adamw_max_val_gap:.2f} of nanoGPT's val at every evaluation",
    ),
    (
        "docs/performance.md",
        "{char-gpu-first-steps-cpu.muon_val_below_nanogpt.50:.2f} below nanoGPT's val at step 50 and "
        "{char-gpu-first-steps-cpu.muon_val_below_nanogpt.300:.2f} below at step 300; it reached nanoGPT's step-300 val "
        "({char-gpu-first-steps-cpu.nanogpt.val.300:.3f}) at about step {char-gpu-first-steps-cpu.muon_steps_to_nanogpt_val_300:.0f}",
    ),
    (
        "docs/performance.md",
        "at step 300, val {char-gpu-first-steps-cpu.sweep_val_300.lr_3e-3:.3f} with lr 3e-3, "
        "{char-gpu-first-steps-cpu.sweep_val_300.lr_6e-3:.3f} with 6e-3 and {char-gpu-first-steps-cpu.sweep_val_300.lr_1.2e-2:.3f} with 1.2e-2",
    ),
    (
        "docs/tests.md",
        "took {compile-test.cold_cpu_s:.0f} s of CPU time with Inductor's cache empty, as in a fresh clone, and "
        "{compile-test.warm_cpu_s:.0f} s with it filled",
    ),
    # the no-mask run's next-token heads, found with TransformerLens (docs/transformer-lens.md,
    # recorded by tools/lens_page.py)
    (
        "docs/transformer-lens.md",
        "put most of their weight on the answer: L0H0 {lens-char-no-mask.scores.L0H0:.3f}, L0H2 "
        "{lens-char-no-mask.scores.L0H2:.3f} and L0H1 {lens-char-no-mask.scores.L0H1:.3f} of it, on the {lens-char-no-mask.tokens:.0f} characters",
    ),
    *(
        (
            "docs/transformer-lens.md",
            f"layer {layer}: "
            + "  ".join(f"H{h} {{lens-char-no-mask.scores.L{layer}H{h}:.3f}}" for h in range(4)),
        )
        for layer in range(3)
    ),  # what the page's Python prints, as the page shows it
    (
        "docs/transformer-lens.md",
        "loss {lens-char-no-mask.loss:.5f}; without the next-token heads (L0H0, L0H1, L0H2) "
        "{lens-char-no-mask.without:.3f}; without L2H2, L1H3, L1H2 {lens-char-no-mask.control:.5f}",
    ),
    (
        "docs/transformer-lens.md",
        "its loss on the text is {lens-char-no-mask.loss:.5f} nats per character. Without the three next-token heads "
        "it is {lens-char-no-mask.without:.3f}, worse than a uniform guess over the {code.char_vocab:.0f} characters ({code.ln_char_vocab:.2f})",
    ),
    ("docs/transformer-lens.md", "look least at t+1 leaves it at {lens-char-no-mask.control:.5f}."),
    # rotary positions, and the loss past the training length
    # (docs/experiment.md#rotary-positions-and-past-the-training-length)
    (
        "docs/experiment.md",
        "Rotary positions end at val {char-3seeds-rope.aggregate.char-rope.loss/val.mean:.3f} ± "
        "{char-3seeds-rope.aggregate.char-rope.loss/val.std:.3f} against the learned table's "
        "{char-3seeds-rope.aggregate.char.loss/val.mean:.3f} ± {char-3seeds-rope.aggregate.char.loss/val.std:.3f}, "
        "a difference of {char-3seeds-rope.differences.char-rope.loss/val.mean:+.3f} nats "
        "[{char-3seeds-rope.differences.char-rope.loss/val.low:.3f}, "
        "{char-3seeds-rope.differences.char-rope.loss/val.high:.3f}] (paired by seed, every seed lower), and read more "
        "order (order use {char-3seeds-rope.aggregate.char-rope.loss/order_use.mean:.3f} ± "
        "{char-3seeds-rope.aggregate.char-rope.loss/order_use.std:.3f} against "
        "{char-3seeds-rope.aggregate.char.loss/order_use.mean:.3f} ± "
        "{char-3seeds-rope.aggregate.char.loss/order_use.std:.3f})",
    ),
    (
        "docs/experiment.md",
        "At 1x, over the whole val split, rope scores {char-contexts.char-rope.1x.loss.mean:.3f} against the learned "
        "table's {char-contexts.char.1x.loss.mean:.3f} ({char-contexts.differences.char-rope.char.1x.loss.mean:+.3f} "
        "[{char-contexts.differences.char-rope.char.1x.loss.low:.3f}, "
        "{char-contexts.differences.char-rope.char.1x.loss.high:.3f}], paired by seed), in both buckets",
    ),
    (
        "docs/experiment.md",
        "Rope's loss is {char-contexts.char-rope.4x.64-127.mean:.3f} at positions 64-127, "
        "{char-contexts.char-rope.4x.128-255.mean:.3f} [{char-contexts.char-rope.4x.128-255.low:.3f}, "
        "{char-contexts.char-rope.4x.128-255.high:.3f}] at 128-255 and {char-contexts.char-rope.4x.256-511.mean:.3f} "
        "[{char-contexts.char-rope.4x.256-511.low:.3f}, {char-contexts.char-rope.4x.256-511.high:.3f}] at 256-511, "
        "where the seeds spread widely; the picture shows it level a little past 128, then climbing. Over the whole "
        "window its 2x context ({char-contexts.char-rope.2x.loss.mean:.3f} [{char-contexts.char-rope.2x.loss.low:.3f}, "
        "{char-contexts.char-rope.2x.loss.high:.3f}]) still scores below the learned table's 1x; its 4x context "
        "({char-contexts.char-rope.4x.loss.mean:.3f} [{char-contexts.char-rope.4x.loss.low:.3f}, "
        "{char-contexts.char-rope.4x.loss.high:.3f}]) no longer does",
    ),
    (
        "docs/experiment.md",
        "no break at the trained length.** {char-contexts.char-no-pos.4x.0-63.mean:.3f} at positions 0-63, "
        "{char-contexts.char-no-pos.4x.64-127.mean:.3f} at 64-127, {char-contexts.char-no-pos.4x.128-255.mean:.3f} at "
        "128-255 and {char-contexts.char-no-pos.4x.256-511.mean:.3f} at 256-511: unlike the",
    ),
    (
        "docs/experiment.md",
        "here they degrade less past the length than rotary positions (from positions 64-127 to 256-511 none goes "
        "from {char-contexts.char-no-pos.4x.64-127.mean:.3f} to {char-contexts.char-no-pos.4x.256-511.mean:.3f}, rope from "
        "{char-contexts.char-rope.4x.64-127.mean:.3f} to {char-contexts.char-rope.4x.256-511.mean:.3f}), but their loss is higher in every "
        "bucket, by a margin that shrinks: at 256-511 rope minus none is {char-contexts.differences.char-rope.char-no-pos.4x.256-511.mean:+.3f} "
        "[{char-contexts.differences.char-rope.char-no-pos.4x.256-511.low:.3f}, {char-contexts.differences.char-rope.char-no-pos.4x.256-511.high:.3f}], "
        "an interval that reaches 0",
    ),
    (
        "README.md",
        "`--rope` ends at char val {char-3seeds-rope.aggregate.char-rope.loss/val.mean:.3f} ± "
        "{char-3seeds-rope.aggregate.char-rope.loss/val.std:.3f}, "
        "{char-3seeds-rope.differences.char-rope.loss/val.mean:+.3f} nats "
        "[{char-3seeds-rope.differences.char-rope.loss/val.low:.3f}, "
        "{char-3seeds-rope.differences.char-rope.loss/val.high:.3f}] paired by seed.",
    ),
    (
        "README.md",
        "at positions 256-511 of a 512-character window rope scores {char-contexts.char-rope.4x.256-511.mean:.2f} "
        "against {char-contexts.char-rope.4x.64-127.mean:.2f} at 64-127, while the model without positions, worse "
        "everywhere, rises less ({char-contexts.char-no-pos.4x.64-127.mean:.2f} to "
        "{char-contexts.char-no-pos.4x.256-511.mean:.2f}), and a learned table has no row there at all",
    ),
    (
        "README.md",
        "with Muon, to val {gpu-char-gpu.ours.to_target_val:.3f} in {gpu-char-gpu.ours.wall_s:.0f} s on an H200, where nanoGPT's own "
        "recipe, next on the same card, never reached 1.47: its best, {gpu-char-gpu.nanogpt.best_val:.4f}, came at {gpu-char-gpu.nanogpt.best_s:.1f} s",
    ),
    (
        "docs/performance.md",
        "| **first evaluation at val 1.47 or below** | **step {gpu-char-gpu.ours.to_target_step:.0f}, "
        "{gpu-char-gpu.ours.to_target_s:.1f} s** | **none in 5000 steps** |",
    ),
    (
        "docs/performance.md",
        "before the stacking: {gpu-bench-124m.mfu_percent:.1f}% of the H200's 989 TFLOP/s",
    ),
    # the time-to-quality yardstick against nanoGPT, in docs/performance.md and README
    (
        "docs/performance.md",
        "**The 3 x 410 preset, on a quiet machine: {yardstick-char.ratio.median:.3f} of nanoGPT's wall time.**",
    ),
    *(
        (
            "docs/performance.md",
            f"| {pair} | {{yardstick-char.pairs.{pair}.ours_s:.1f}} | {{yardstick-char.pairs.{pair}.ours_val:.3f}} | "
            f"{{yardstick-char.pairs.{pair}.nanogpt_s:.1f}} | {{yardstick-char.pairs.{pair}.nanogpt_val:.3f}} | {{yardstick-char.pairs.{pair}.ratio:.3f}} |",
        )
        for pair in (1, 2, 3)
    ),
    (
        "docs/performance.md",
        "Median {yardstick-char.ratio.median:.3f} ({yardstick-char.ratio.min:.3f} to {yardstick-char.ratio.max:.3f}), at a lower "
        "final val than nanoGPT's ({yardstick-char.pairs.1.ours_val:.3f} against {yardstick-char.pairs.1.nanogpt_val:.3f})",
    ),
    (
        "README.md",
        "(`char` reaches val {yardstick-char.pairs.1.ours_val:.3f} in {yardstick-char.ratio.median:.2f} of the wall time nanoGPT's CPU "
        "recipe takes to {yardstick-char.pairs.1.nanogpt_val:.3f}: median of 3 pairs run in turns on a quiet 2-core Intel Xeon with bfloat16 units)",
    ),
    (
        "README.md",
        "`python train.py --config char --model.attention=manual --run-name char-manual`\ntakes "
        "{attention-manual-char.cpu_ratio.median:.2f}x the CPU time (median of 3 runs in turns, one torch thread) and ends at val "
        "{attention-manual-char.val.manual:.3f} instead of\n{attention-manual-char.val.sdpa:.3f}",
    ),
    # figures of the code itself (code.*), computed when checked
    (
        "README.md",
        "The `char` model has {code.char_params_m:.1f} million parameters (`base` has {code.base_params_m:.1f} million, "
        "{code.base_embedding_m:.1f} of them",
    ),
    (
        "docs/experiment.md",
        "worse than a uniform guess over {code.char_vocab:.0f} characters ({code.ln_char_vocab:.2f})",
    ),
    ("docs/experiment.md", "sqrt(head_size) = {code.char_sqrt_head_size:.2f} times larger"),
    (
        "docs/experiment.md",
        "The honest loss scores {code.char_honest_predictions:.0f} predictions per evaluation in `char` "
        "({code.char_honest_batches:.0f} val batches x {code.char_batch:.0f} sequences x {code.honest_positions:.0f} positions), "
        "`loss/val` scores {code.char_val_predictions:,.0f}",
    ),
    (
        "docs/sampling.md",
        "a uniform guess over {code.char_vocab:.0f} characters (ln {code.char_vocab:.0f} = {code.ln_char_vocab:.2f} nats)",
    ),
    (
        "docs/tensorboard.md",
        "a one-token prompt (a newline) and {code.sample_tokens:.0f} generated tokens",
    ),
    ("docs/tensorboard.md", 'for example "{code.sample_tokens_shown:.0f} tokens, all whitespace"'),
    (
        "docs/experiment.md",
        'says "{code.sample_tokens_shown:.0f} tokens, all whitespace": a one-token prompt and {code.sample_tokens:.0f} generated',
    ),
]
# the learning-rate sweep's, bench.py --variants' and char-modern's, kept apart
QUOTES += CURE_QUOTES + VARIANT_QUOTES
QUOTES += [  # what the probe costs a whole run (docs/performance.md)
    (
        "docs/performance.md",
        "the probe took {probe-cost-char.wall_ratio:.3f} times the wall time of one without it (the medians; CPU time "
        "{probe-cost-char.cpu_ratio:.3f} times), a `base` run {probe-cost-base.wall_ratio:.3f} times (CPU time {probe-cost-base.cpu_ratio:.3f} times)",
    ),
]
