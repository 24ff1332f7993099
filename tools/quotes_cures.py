"""The sentences that quote the learning-rate sweep (sweep.py, recorded as char-sweep): README's
line on the cures and docs/experiment.md's section on them, each figure a placeholder, as
tools/quotes.py's QUOTES, which ends with these; then docs/variants.md's on bench.py --variants at a
longer context (char-variants-bench-1024), and the modern char preset's against nanoGPT
(yardstick-char-modern)."""

S = "char-sweep"
# the preset at ten times its rate, at its rate
TOP, PRESET = f"{S}.aggregate.char.1.2e-1", f"{S}.aggregate.char.1.2e-2"
QK, CAP, BOTH = (
    f"{S}.aggregate.char-qk-norm",
    f"{S}.aggregate.char-softcap50",
    f"{S}.aggregate.char-no-scale-qk-norm",
)


def paired(name: str) -> str:
    """A difference paired by seed as the docs print it: mean [low, high]."""
    return f"{{{name}.mean:+.3f}} [{{{name}.low:+.3f}}, {{{name}.high:+.3f}}]"


CURE_QUOTES = [
    (
        "README.md",
        f"the largest score grows {{{S}.growth.char.1.2e-1.from_preset_lr.mean:.0f}}x and the entropy ends at {{{TOP}.attn/entropy.mean:.2f}}.",
    ),
    (
        "README.md",
        f"keeps the entropy at {{{QK}.1.2e-1.attn/entropy.mean:.2f}} and val at {{{QK}.1.2e-1.loss/val.mean:.3f}} against {{{TOP}.loss/val.mean:.3f}}",
    ),
    (
        "docs/experiment.md",
        f"the largest attention score is {{{S}.growth.char.1.2e-1.from_preset_lr.mean:.0f}} times what it is at the preset's rate",
    ),
    (
        "docs/experiment.md",
        f"the entropy ends at {{{TOP}.attn/entropy.mean:.3f}}, {{{TOP}.attn/saturated_frac.mean:pct.0f}}% of rows put over 0.99",
    ),
    (
        "docs/experiment.md",
        f"and val ends at {{{TOP}.loss/val.mean:.3f}} against {{{PRESET}.loss/val.mean:.3f}}.",
    ),
    (
        "docs/experiment.md",
        f"the largest score stays at {{{QK}.1.2e-1.attn/score_max.mean:.1f}}, the entropy at {{{QK}.1.2e-1.attn/entropy.mean:.3f}}, and val "
        f"ends at {{{QK}.1.2e-1.loss/val.mean:.3f}}: "
        + paired(f"{S}.differences.char-qk-norm.1.2e-1.loss/val")
        + " from the preset at that rate.",
    ),
    (
        "docs/experiment.md",
        "At the preset's own rate it ends "
        + paired(f"{S}.differences.char-qk-norm.1.2e-2.loss/val")
        + " from it.",
    ),
    (
        "docs/experiment.md",
        f"At the preset's rate the largest score, {{{CAP}.1.2e-2.attn/score_max.mean:.1f}}, stays under the cap of 50 and nothing "
        "moves (val "
        + paired(f"{S}.differences.char-softcap50.1.2e-2.loss/val")
        + " from the preset).",
    ),
    (
        "docs/experiment.md",
        f"the cap ({{{CAP}.1.2e-1.attn/score_max.mean:.1f}}, every seed) and the rows stay spread (entropy "
        f"{{{CAP}.1.2e-1.attn/entropy.mean:.3f}}, {{{CAP}.1.2e-1.attn/saturated_frac.mean:pct.0f}}% of rows saturated against "
        f"{{{TOP}.attn/saturated_frac.mean:pct.0f}}% without the cap), yet val ends at {{{CAP}.1.2e-1.loss/val.mean:.3f}}: better than the "
        f"preset's {{{TOP}.loss/val.mean:.3f}} ("
        + paired(f"{S}.differences.char-softcap50.1.2e-1.loss/val")
        + "), far worse than "
        f"QK-norm's {{{QK}.1.2e-1.loss/val.mean:.3f}}.",
    ),
    (
        "docs/experiment.md",
        f"the query and key norms end at {{{CAP}.1.2e-1.attn/q_norm.mean:.1f}} and {{{CAP}.1.2e-1.attn/k_norm.mean:.1f}} "
        f"({{{PRESET}.attn/q_norm.mean:.1f}} and {{{PRESET}.attn/k_norm.mean:.1f}} at the preset's rate), and the scores spread over the whole "
        f"range the cap allows (std {{{CAP}.1.2e-1.attn/score_std.mean:.1f}}).",
    ),
    (
        "README.md",
        f"`--softcap=50` keeps the entropy, {{{CAP}.1.2e-1.attn/entropy.mean:.2f}}, but ends at val {{{CAP}.1.2e-1.loss/val.mean:.3f}}).",
    ),
    (
        "docs/experiment.md",
        f"a score reaches 32 (the largest: {{{BOTH}.1.2e-2.attn/score_max.mean:.1f}})",
    ),
    (
        "docs/experiment.md",
        f"`no-scale+qk-norm` ends at val {{{BOTH}.1.2e-2.loss/val.mean:.3f}} with entropy {{{BOTH}.1.2e-2.attn/entropy.mean:.3f}}, "
        + paired(f"{S}.preset.differences.char-no-scale-qk-norm-minus-char-qk-norm.loss/val")
        + " from QK-norm with the scale and no "
        "better than `no-scale` alone ("
        + paired(f"{S}.preset.differences.char-no-scale-qk-norm-minus-char-no-scale.loss/val")
        + ").",
    ),
    (
        "docs/experiment.md",
        f"it ends at {{{BOTH}.1.2e-1.loss/val.mean:.3f}} against `no-scale`'s {{{S}.aggregate.char-no-scale.1.2e-1.loss/val.mean:.3f}}",
    ),
    (
        "docs/experiment.md",
        "with the gain val changes by "
        + paired("qk-norm-gain-char.1.2e-2.gain_minus_none.loss/val")
        + " nats at the preset's rate and "
        + paired("qk-norm-gain-char.1.2e-1.gain_minus_none.loss/val")
        + " at ten times it.",
    ),
    (
        "docs/experiment.md",
        "the largest grows from {qk-norm-gain-char.1.2e-1.none.attn/score_max.mean:.1f} to {qk-norm-gain-char.1.2e-1.gain.attn/score_max.mean:.1f} at ten times the rate",
    ),
]

# bench.py --config char --variants ... --model.block_size=1024
L = "char-variants-bench-1024.variants"
VARIANT_QUOTES = [
    (
        "docs/variants.md",
        f"the window's cache keeps {{{L}.char-window32.cache_bytes_per_token:.0f}} bytes per token against the preset's "
        f"{{{L}.char.cache_bytes_per_token:,.0f}}",
    ),
    (
        "docs/variants.md",
        f"sampling ran at {{{L}.char.sample_tokens_per_s:.0f}} tokens/s for the preset, {{{L}.char-kv-heads1.sample_tokens_per_s:.0f}} "
        f"with one key/value head, {{{L}.char-window32.sample_tokens_per_s:.0f}} with the window, {{{L}.char-gate.sample_tokens_per_s:.0f}} "
        f"with the gate and {{{L}.char-sink.sample_tokens_per_s:.0f}} with the sink",
    ),
    # the modern char preset, char-modern, against nanoGPT (yardstick-char-modern)
    *(
        (
            "docs/performance.md",
            f"| pair {pair} | {{yardstick-char-modern.pairs.{pair}.ours_s:.1f}} | "
            f"{{yardstick-char-modern.pairs.{pair}.nanogpt_s:.1f}} | {{yardstick-char-modern.pairs.{pair}.ratio:.3f}} |",
        )
        for pair in (1, 2, 3)
    ),
    (
        "docs/performance.md",
        "Median {yardstick-char-modern.ratio.median:.3f} ({yardstick-char-modern.ratio.min:.3f} to "
        "{yardstick-char-modern.ratio.max:.3f}): under a quarter",
    ),
    (
        "README.md",
        "ends below nanoGPT's val in {yardstick-char-modern.ratio.median:.2f} of its wall time",
    ),
    (
        "docs/command-line.md",
        "val {yardstick-char-modern.seeds_val.1339:.3f} to {yardstick-char-modern.seeds_val.1338:.3f} on 3 seeds, "
        "below nanoGPT's 1.886 in {yardstick-char-modern.ratio.median:.2f} of its time",
    ),
    (
        "docs/performance.md",
        "seeds 1337, 1338 and 1339 end at {yardstick-char-modern.seeds_val.1337:.3f}, "
        "{yardstick-char-modern.seeds_val.1338:.3f} and {yardstick-char-modern.seeds_val.1339:.3f}",
    ),
]
