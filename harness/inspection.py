"""What inspect_attention.py reads and prints: the text, the heads' table, --ablate's result."""

import json
from pathlib import Path

import torch

from configs import ConfigError
from data.files import write_atomically
from data.synthetic import PROBE_SEED, RepeatedRandom
from data.tokenizer import TokenizerError
from harness.experiments.head_ablation import measure, report, run_batches
from harness.training.evaluation import PROBE_TEXT
from model.heads import head_name
from model.induction import SHORTEST_CONTEXT
from model.roles import MIN_ROLE_ROWS, NEXT_TOKEN_THRESHOLD, ROLES, role_line

REPEATED_TOKENS = 48  # length of the --repeated sequence (at most block_size)
COLUMNS = (
    "heads by entropy, most focused first; t-1: mean weight on the previous token (rows t >= 1), "
    "t+1: on the next one, the answer (rows t <= T-2; 0 under the mask), first: on position 0 "
    "(rows t >= 1), induction: on the token after the previous occurrence of the current one "
    "(rows whose token occurred before)\n"
    "| layer | head | entropy | max weight | saturated | future mass | t-1 | t+1 | first | "
    "induction | role |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)
ROW = (
    "| {layer} | {head} | {entropy:.3f} | {max_weight:.3f} | {saturated:.2f} | {future_mass:.3f} | "
    "{previous:.3f} | {next:.3f} | {first:.3f} | {induction:.3f} | {roles} |"
)


def text_ids(args, tokenizer, block_size: int) -> list[int]:
    """--text, else the probe text, else (--repeated, or a vocabulary that cannot spell it) random
    tokens in which a segment recurs."""
    ids = []
    try:
        if not args.repeated:
            ids = tokenizer.encode(args.text if args.text is not None else PROBE_TEXT)
    except TokenizerError:
        if args.text is not None:
            raise
    if args.repeated or (args.text is None and not ids):
        n = min(block_size, REPEATED_TOKENS)
        # in 2 tokens every head reads as induction, previous-token and first-token sink at once
        if n < SHORTEST_CONTEXT:
            raise ConfigError(
                f"a context of {n} token{'s' * (n > 1)} is too short to tell heads' roles from "
                f"chance (it takes {SHORTEST_CONTEXT}); try --text"
            )
        generator = torch.Generator().manual_seed(PROBE_SEED)
        ids = RepeatedRandom(tokenizer.vocab_size, n // 4, n // 2).sequence(n, generator).tolist()
    if not ids:
        raise TokenizerError("the text is empty; give some with --text")
    return ids


def next_token_heads(rows: list[dict]) -> list[tuple[int, int]]:
    heads = [(row["layer"], row["head"]) for row in rows if "next-token" in row["roles"]]
    if not heads:
        raise ConfigError(
            f"--ablate: no next-token head (none puts more than {NEXT_TOKEN_THRESHOLD} on t+1 "
            f"over {MIN_ROLE_ROWS}+ rows); name heads: L0H1,L1H3"
        )
    return heads


def ablate(model, tokenizer, checkpoint: dict, heads, args, out: Path, rows: list[dict]) -> None:
    """The heads switched off, against as many random others."""
    batches = run_batches(model, checkpoint, tokenizer)
    try:
        result = measure(model, batches, heads, args.draws, args.seed, args.mean_ablation)
    except ValueError as e:
        raise ConfigError(f"--ablate: {e}") from None
    result["next_token_weight"] = {head_name(r["layer"], r["head"]): r["next"] for r in rows}
    write_atomically(out / "ablation.json", json.dumps(result, indent=2).encode())
    print(f"\n{report(result)}\nablation.json: {out / 'ablation.json'}")


def print_heads(rows: list[dict]) -> None:
    for row in rows:
        print(ROW.format(**row | {"roles": ", ".join(row["roles"])}))
    for role, key, threshold in ROLES:
        print(role_line(rows, role, key, threshold))
