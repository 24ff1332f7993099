"""How well a model predicts a text: its mean loss per token, perplexity and bits per byte, over
sliding windows.

A text longer than the model's context is read in windows of block_size + 1 tokens (block_size
inputs, each followed by its target), one starting every `stride` tokens. A window scores only the
targets that no earlier window scored, so every token after the first is scored exactly once, each
with as much context as its window gives: once the first window is past, at least
block_size - stride + 1 tokens. A smaller stride buys more context (a lower loss) with more passes;
stride block_size reads the text in separate blocks, as training's val loss does.

This is the method of Hugging Face's "Perplexity of fixed-length models", with two differences, both
so that every token after the first counts exactly once. The page weights each window's mean loss by
its labels minus one, for the label shift; but only the first window loses a label to the shift (its
first token has nothing before it), and a later window's labels all have their context inside it, so
the page undercounts each of them by one. And the page's window is n_positions tokens, targets
included: the prediction at its last position goes unused, and at a stride of n_positions no window
scores its own first token. Here a window holds block_size inputs and the token after them.

A model trained without the causal mask sees, under teacher forcing, the token it must predict in
its own input. Its targets are scored honestly instead, each from its prefix alone (`prefix_logits`,
as generation reads it): one pass per target, on the same windows, so a causal model scores the same
either way and the difference for a no-mask model is exactly what it read from the future.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from configs import ConfigError, DataConfig, validate_config
from data.corpus import ChangedText, DataError, load_corpus
from data.sources import read_text
from data.tokenizer import GPT2Tokenizer, Tokenizer, TokenizerError
from model import GPT
from model.gpt import lm_loss
from model.measurements import bits_per_byte, prefix_logits
from model.sampling import check_finite_logits

# windows go through the model together until their logits would exceed this many floats
LOGITS_PER_BATCH = 2**22
CONTEXT_CHARS = 40  # characters of context shown before each surprising token
# Tokens decoded for that context: a character takes at most 4 UTF-8 bytes and a token at least 1,
# and a window that starts inside a character decodes at most 3 bytes differently, so 4 x 40 + 4
# tokens end in the same 40 characters as the whole text before the token.
CONTEXT_TOKENS = 4 * CONTEXT_CHARS + 4


@dataclass(frozen=True)
class Window:
    """A slice of the text: inputs ids[begin:end-1], targets ids[begin+1:end]; it scores the targets
    from `first` on.
    """

    begin: int
    end: int
    first: int  # index into the window's targets of the first one that no earlier window scored


def windows(n_tokens: int, block_size: int, stride: int) -> list[Window]:
    """The windows that score each of tokens 1 .. n_tokens - 1 once: one starts every `stride`
    tokens (1 <= stride <= block_size).
    """
    # tokens before scored_to have been scored (token 0 never is: nothing comes before it)
    out, scored_to = [], 1
    for begin in range(0, n_tokens - 1, stride):
        end = min(begin + block_size + 1, n_tokens)
        # the target of token p sits at index p - begin - 1
        out.append(Window(begin, end, scored_to - begin - 1))
        scored_to = end
        if end == n_tokens:
            break
    return out


@torch.no_grad()
def token_losses(
    model: GPT,
    ids: torch.Tensor,
    stride: int,
    honest: bool,
    between: Callable[[int], None] | None = None,
    context: int | None = None,
) -> torch.Tensor:
    """The loss in nats of every token after the first of ids (N,): losses (N - 1,), losses[i] for
    ids[i + 1].

    honest scores each target from its prefix in the window alone, one pass per target; otherwise
    one pass per window scores all of its targets (teacher forcing, exact for a causal model).
    `between` is called before each pass with the number of targets it scores (a progress bar, and a
    chance to stop). `context` is the windows' length in inputs: the model's block_size unless given
    (longer only for a model whose positions run past it, harness/lengths.py).
    """
    between = between or (lambda n: None)
    model.eval()
    device = model.lm_head.weight.device
    # filled window by window: no small tensor per window outlives its logits
    out = torch.empty(len(ids) - 1)
    done = 0
    todo, start = windows(len(ids), context or model.cfg.block_size, stride), 0
    # windows of one shape (length and first target) go through the model together
    while start < len(todo):
        length, first = todo[start].end - todo[start].begin, todo[start].first
        most = max(1, LOGITS_PER_BATCH // (length * model.cfg.vocab_size))
        stop = start + 1
        while stop < min(len(todo), start + most) and (
            todo[stop].end - todo[stop].begin,
            todo[stop].first,
        ) == (length, first):
            stop += 1
        # (B, L) with L = length
        rows = torch.stack([ids[w.begin : w.end] for w in todo[start:stop]]).to(device)
        x, y = rows[:, :-1], rows[:, first + 1 :]  # inputs (B, L - 1), the targets scored (B, P)
        if honest:
            # (B, P, V)
            logits = prefix_logits(
                model, x, list(range(first, length - 1)), partial(between, len(x))
            )
        else:
            between(y.numel())
            logits = model.lm_head(model.hidden(x)[:, first:])  # (B, L - 1, C) -> (B, P, V)
        check_finite_logits(logits)
        # windows in text order, targets in order
        losses = lm_loss(logits, y, reduction="none").flatten()
        out[done : done + len(losses)] = losses
        done, start = done + len(losses), stop
    return out


@dataclass
class Score:
    tokens: int  # tokens scored: every one after the first
    loss: float  # mean loss, nats per token
    perplexity: float  # exp(loss): the number of equally likely tokens that would be as surprising
    # loss per UTF-8 byte of the scored text, in bits (bits per character for ASCII)
    bits_per_byte: float
    losses: torch.Tensor  # (tokens,) the loss of each scored token, in text order

    def summary(self) -> dict[str, float]:
        return {
            "tokens": self.tokens,
            "loss": self.loss,
            "perplexity": self.perplexity,
            "bits_per_byte": self.bits_per_byte,
        }


def score_ids(
    model: GPT,
    tokenizer: Tokenizer,
    ids: list[int],
    stride: int,
    poll: Callable[[], None] | None = None,
) -> Score:
    """Score token ids with `windows` of the model's context; a model without the causal mask is
    scored honestly.

    A bar on stderr (in a terminal) shows the tokens scored, their rate and the time left; `poll` is
    called before every pass (harness/stopping.py: it raises to stop)."""
    block_size = model.cfg.block_size
    if not 1 <= stride <= block_size:
        raise ConfigError(
            f"--stride {stride} is longer than the model's context; give 1 to {block_size} tokens"
        )
    if len(ids) < 2:
        raise DataError(
            f"the text is {len(ids)} token long; scoring needs at least 2 (each token is predicted from those before it)"
        )
    with tqdm(
        total=len(ids) - 1, desc="scoring", unit="tok", unit_scale=True, leave=False, disable=None
    ) as bar:

        def between(n: int) -> None:
            if poll is not None:
                poll()
            bar.update(n)

        losses = token_losses(
            model, torch.tensor(ids, dtype=torch.long), stride, not model.cfg.causal, between
        )
    loss = losses.double().mean().item()
    n_bytes = len(tokenizer.decode(ids[1:]).encode("utf-8"))
    perplexity = math.exp(loss) if loss < math.log(torch.finfo(torch.float64).max) else math.inf
    return Score(len(losses), loss, perplexity, bits_per_byte(loss, len(losses), n_bytes), losses)


def surprises(tokenizer: Tokenizer, ids: list[int], losses: torch.Tensor, n: int) -> list[dict]:
    """The n tokens with the highest loss, worst first: each with its loss, text, line number and
    the text before it.

    Linear in the text, whatever n: line numbers come from one running count of each token's
    newlines (a newline is a byte of its own in UTF-8, so a token's count is the same decoded alone
    or in its text), and the text before a token from a window of CONTEXT_TOKENS tokens, never from
    the whole prefix."""
    top = losses.topk(min(n, len(losses)))
    newlines = {token: tokenizer.decode([token]).count("\n") for token in set(ids)}
    # (N + 1,): newlines in ids[:p] at p
    lines_before = np.cumsum([0, *(newlines[token] for token in ids)])
    rows = []
    for loss, i in zip(top.values.tolist(), top.indices.tolist(), strict=True):
        p = i + 1  # losses[i] is the loss of token ids[i + 1]
        before = tokenizer.decode(ids[max(0, p - CONTEXT_TOKENS) : p])[-CONTEXT_CHARS:]
        rows.append(
            {
                "loss": loss,
                "token": tokenizer.decode([ids[p]]),
                "line": int(lines_before[p]) + 1,
                "context": before,
            }
        )
    return rows


def text_ids(tokenizer: Tokenizer, file, checkpoint: dict | None) -> tuple[list[int], str]:
    """The token ids to score and a line that says what they are: the file's text, or without one
    the val split of the run's corpus (of Tiny Shakespeare, on the gpt2 tokenizer, for a pretrained
    GPT-2: checkpoint None)."""
    if file is not None:
        text = read_text(file, flag="--file")
        try:
            return tokenizer.encode(text), str(file)
        # only the char tokenizer refuses text: a character it never saw, whose line we name
        except TokenizerError as e:
            first = next(i for i, c in enumerate(text) if c not in tokenizer.stoi)
            raise TokenizerError(f"{file}, line {text[:first].count(chr(10)) + 1}: {e}") from None
    if checkpoint is None:
        data_cfg = DataConfig(tokenizer=GPT2Tokenizer.name)
    else:
        # checked as any config is
        data_cfg = validate_config(checkpoint.get("config"), "the checkpoint", recorded=True).data
        # a file, or a folder of them
        if data_cfg.path and not Path(data_cfg.path).expanduser().exists():
            raise DataError(
                f"the run's corpus {data_cfg.path} no longer exists; score its text with --file PATH"
            )
    try:
        corpus = load_corpus(data_cfg, checkpoint and checkpoint.get("source_sha256"))
    except ChangedText as e:
        raise DataError(f"{e}, or score a text with --file PATH") from None
    source = Path(corpus.source).resolve()
    # short in the usual case
    shown = source.relative_to(Path.cwd()) if source.is_relative_to(Path.cwd()) else source
    return np.asarray(corpus.val, dtype=np.int64).tolist(), f"the val split of {shown}"
