"""How well a model predicts a text (loss per token, perplexity, bits per byte), over windows every
`stride` tokens, each scoring only targets no earlier one scored: Hugging Face's "Perplexity of
fixed-length models" counted exactly (the page weights each window by its labels minus one)."""

import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import groupby
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from configs import ConfigError, DataConfig, validate_config
from data.corpus import ChangedText, DataError, load_corpus
from data.sources import read_text
from data.tokenizer import GPT2Tokenizer, Tokenizer, TokenizerError
from model import GPT, ModelConfig
from model.gpt import lm_loss
from model.measurements import bits_per_byte, prefix_logits
from model.sampling import check_finite_logits

# the most floats of logits one pass of windows holds
LOGITS_PER_BATCH = 2**22
CONTEXT_CHARS = 40  # characters of context shown before each surprising token
# tokens decoded for it: a character is at most 4 UTF-8 bytes, a token at least 1
CONTEXT_TOKENS = 4 * CONTEXT_CHARS + 4


@dataclass(frozen=True)
class Window:
    """Inputs ids[begin:end-1], targets ids[begin+1:end]; it scores the targets from `first` on."""

    begin: int
    end: int
    first: int


def windows(n_tokens: int, block_size: int, stride: int) -> list[Window]:
    """They score each of tokens 1 .. n_tokens - 1 once."""
    out, scored_to = [], 1  # tokens before scored_to are scored; token 0 never is
    for begin in range(0, n_tokens - 1, stride):
        end = min(begin + block_size + 1, n_tokens)
        # the target of token p sits at index p - begin - 1
        out.append(Window(begin, end, scored_to - begin - 1))
        scored_to = end
        if end == n_tokens:
            break
    return out


def windows_per_pass(model_cfg: ModelConfig, length: int, n_windows: int) -> int:
    return min(n_windows, max(1, LOGITS_PER_BATCH // ((length + 1) * model_cfg.vocab_size)))


@torch.no_grad()
def token_losses(
    model: GPT,
    ids: torch.Tensor,
    stride: int,
    honest: bool,
    between: Callable[[int], None] | None = None,
    context: int | None = None,
) -> torch.Tensor:
    """(N - 1,) nats: each token's loss after the first. honest: each target from its prefix alone
    (for a model without the causal mask); `between(n)` is called before each pass."""
    between = between or (lambda n: None)
    model.eval()
    device = model.lm_head.weight.device
    out, done = torch.empty(len(ids) - 1), 0
    todo = windows(len(ids), context or model.cfg.block_size, stride)
    for (length, first), group in groupby(todo, lambda w: (w.end - w.begin, w.first)):
        group = list(group)
        most = windows_per_pass(model.cfg, length - 1, len(group))
        for start in range(0, len(group), most):
            rows = torch.stack([ids[w.begin : w.end] for w in group[start : start + most]])
            rows = rows.to(device)
            x, y = rows[:, :-1], rows[:, first + 1 :]  # (B, L) -> inputs (B, L - 1), targets (B, P)
            if honest:  # (B, P, V)
                targets = list(range(first, length - 1))
                logits = prefix_logits(model, x, targets, partial(between, len(x)))
            else:
                between(y.numel())
                logits = model.lm_head(model.hidden(x)[:, first:])  # (B, L - 1, C) -> (B, P, V)
            check_finite_logits(logits)
            losses = lm_loss(logits, y, reduction="none").flatten()
            out[done : done + len(losses)] = losses
            done += len(losses)
    return out


@contextmanager
def progress(total: int, poll: Callable[[], None] | None):
    """A bar on stderr of the tokens scored, and the `between` that polls, then counts."""
    with tqdm(
        total=total, desc="scoring", unit="tok", unit_scale=True, leave=False, disable=None
    ) as bar:

        def between(n: int) -> None:
            if poll is not None:
                poll()
            bar.update(n)

        yield between


@dataclass
class Score:
    tokens: int  # every one after the first
    loss: float  # mean, nats per token
    perplexity: float  # exp(loss)
    bits_per_byte: float  # of the scored text's UTF-8
    losses: torch.Tensor  # (tokens,) in text order

    def summary(self) -> dict[str, float]:
        return {key: value for key, value in vars(self).items() if key != "losses"}


def score_ids(
    model: GPT, tokenizer: Tokenizer, ids: list[int], stride: int, poll: Callable | None = None
) -> Score:
    """`poll` is called before every pass and raises to stop."""
    block_size = model.cfg.block_size
    if not 1 <= stride <= block_size:
        raise ConfigError(
            f"--stride {stride} is longer than the model's context; give 1 to {block_size} tokens"
        )
    if len(ids) < 2:
        raise DataError(f"the text is {len(ids)} token long; scoring needs at least 2")
    with progress(len(ids) - 1, poll) as between:
        losses = token_losses(
            model, torch.tensor(ids, dtype=torch.long), stride, not model.cfg.causal, between
        )
    loss = losses.double().mean().item()
    n_bytes = len(tokenizer.decode(ids[1:]).encode("utf-8"))
    perplexity = math.exp(loss) if loss < math.log(torch.finfo(torch.float64).max) else math.inf
    return Score(len(losses), loss, perplexity, bits_per_byte(loss, len(losses), n_bytes), losses)


def surprises(tokenizer: Tokenizer, ids: list[int], losses: torch.Tensor, n: int) -> list[dict]:
    top = losses.topk(min(n, len(losses)))
    newlines = {token: tokenizer.decode([token]).count("\n") for token in set(ids)}
    lines_before = np.cumsum([0, *(newlines[token] for token in ids)])
    rows = []
    for loss, i in zip(top.values.tolist(), top.indices.tolist(), strict=True):
        p = i + 1  # losses[i] is the loss of token ids[i + 1]
        token, line = tokenizer.decode([ids[p]]), int(lines_before[p]) + 1
        before = tokenizer.decode(ids[max(0, p - CONTEXT_TOKENS) : p])[-CONTEXT_CHARS:]
        rows.append({"loss": loss, "token": token, "line": line, "context": before})
    return rows


def text_ids(tokenizer: Tokenizer, file, checkpoint: dict | None) -> tuple[list[int], str]:
    """(ids, what they are): the file's, else the run's val split (for a GPT-2, checkpoint None:
    Tiny Shakespeare's on gpt2)."""
    if file is not None:
        text = read_text(file, flag="--file")
        try:
            return tokenizer.encode(text), str(file)
        except TokenizerError as e:  # only the char tokenizer refuses a text: name the line
            first = next(i for i, c in enumerate(text) if c not in tokenizer.stoi)
            raise TokenizerError(f"{file}, line {text[:first].count(chr(10)) + 1}: {e}") from None
    if checkpoint is None:
        data_cfg = DataConfig(tokenizer=GPT2Tokenizer.name)
    else:
        data_cfg = validate_config(checkpoint.get("config"), "the checkpoint", recorded=True).data
        if data_cfg.path and not Path(data_cfg.path).expanduser().exists():
            raise DataError(
                f"the run's corpus {data_cfg.path} no longer exists; "
                "score its text with --file PATH"
            )
    try:
        corpus = load_corpus(data_cfg, checkpoint and checkpoint.get("source_sha256"))
    except ChangedText as e:
        raise DataError(f"{e}, or score a text with --file PATH") from None
    source = Path(corpus.source).resolve()
    shown = source.relative_to(Path.cwd()) if source.is_relative_to(Path.cwd()) else source
    return np.asarray(corpus.val, dtype=np.int64).tolist(), f"the val split of {shown}"
