"""Two tokenizers with one interface: gpt2 (OpenAI's BPE through tiktoken) and char (an id for each
distinct character of the corpus, its vocabulary saved with the data and in checkpoints)."""

from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np

TOKENIZERS = ("gpt2", "char")
GPT2_VOCAB_SIZE = 50257  # 50,000 merges, 256 bytes and <|endoftext|>
DEGENERATE_SHARE = 0.5


class TokenizerError(ValueError):
    pass


class GPT2Tokenizer:
    name = "gpt2"

    def __init__(self):
        import tiktoken  # here: char runs never need its BPE files

        try:
            self.enc = tiktoken.get_encoding("gpt2")
        except Exception as e:  # offline, tiktoken raises several kinds
            raise TokenizerError(
                f"cannot load tiktoken's gpt2 encoding ({type(e).__name__}); connect to the "
                "internet once, set TIKTOKEN_CACHE_DIR to a folder of its files, or use "
                "--data.tokenizer=char"
            ) from None
        self.vocab_size = self.enc.n_vocab
        self.end_of_text = [self.enc.eot_token]

    def encode(self, text: str) -> list[int]:
        return self.enc.encode_ordinary(text)  # special tokens are plain text here

    def encode_array(self, text: str) -> np.ndarray:
        # tiktoken releases the GIL while it encodes, so threads encode in parallel
        return self.enc.encode_to_numpy(text, disallowed_special=())

    def decode(self, ids: list[int]) -> str:
        return self.enc.decode(ids)

    def state(self) -> dict:
        return {"name": self.name}


class CharTokenizer:
    name = "char"
    END_OF_TEXT = "\n\n"  # between documents: the char tokenizer has no special token

    def __init__(self, chars: list[str]):
        if (
            not chars
            or len(set(chars)) != len(chars)
            or any(not isinstance(c, str) or len(c) != 1 for c in chars)
        ):
            raise TokenizerError("a char vocabulary must list distinct single characters")
        self.chars = list(chars)
        self.vocab_size = len(chars)
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.lookup = np.full(max(map(ord, chars)) + 1, -1, dtype=np.int32)
        self.lookup[[ord(c) for c in chars]] = np.arange(len(chars))

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls(sorted(set(text)))

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - self.stoi.keys())
        if unknown:
            shown = repr("".join(unknown[:10]))
            if len(unknown) > 10:
                shown += f" and {len(unknown) - 10} more"
            raise TokenizerError(
                f"{len(unknown)} character(s) not in the training vocabulary: {shown}; "
                "use only characters of the training text"
            )
        return [self.stoi[c] for c in text]

    def encode_array(self, text: str) -> np.ndarray:
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        ids = self.lookup[np.minimum(points, len(self.lookup) - 1)]
        if (ids < 0).any() or (points >= len(self.lookup)).any():
            self.encode(text)  # raises the error that names the unknown characters
        return ids

    @property
    def end_of_text(self) -> list[int]:
        return self.encode(self.END_OF_TEXT)

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def state(self) -> dict:
        return {"name": self.name, "chars": self.chars}


Tokenizer = GPT2Tokenizer | CharTokenizer


def decode_stream(tokenizer: Tokenizer, ids: Iterable[int]) -> Iterator[str]:
    """The text of ids piece by piece; a token ending inside a UTF-8 character (U+FFFD) waits for
    the next (up to 4)."""
    pending: list[int] = []
    for i in ids:
        pending.append(i)
        text = tokenizer.decode(pending)
        if not text.endswith("\ufffd") or len(pending) >= 4:
            yield text
            pending = []
    if pending:
        yield tokenizer.decode(pending)


def token_labels(tokenizer: Tokenizer, ids: list[int]) -> list[str]:
    labels = []
    for i in ids:
        text = tokenizer.decode([i]).replace("\n", "\\n").replace(" ", "\u2423")
        labels.append(text if len(text) <= 8 else text[:7] + "\u2026")
    return labels


def degenerate(text: str) -> tuple[str, str] | None:
    """(what, counts) when a text is mostly whitespace or one character (as without the mask)."""
    if not text:
        return None
    blank = sum(c.isspace() for c in text)
    if blank / len(text) > DEGENERATE_SHARE:
        share = "all whitespace" if blank == len(text) else f"{blank / len(text):.0%} whitespace"
        return share, f"{text.count(chr(10))} newlines, {text.count(' ')} spaces"
    char, count = Counter(text).most_common(1)[0]
    if count / len(text) > DEGENERATE_SHARE:
        share = f"{count / len(text):.0%} one character"
        if count == len(text):
            share = "one character repeated"
        return share, f"{char!r} {count} times"
    return None


def tokenizer_from_state(state: dict) -> Tokenizer:
    name = state.get("name") if isinstance(state, dict) else None
    if name == "gpt2":
        return GPT2Tokenizer()
    if name == "char":
        return CharTokenizer(state.get("chars"))
    raise TokenizerError(f"unknown tokenizer {name!r}; expected one of {', '.join(TOKENIZERS)}")
