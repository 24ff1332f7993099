"""Our tokenizer as a Hugging Face one with the same ids, built offline: what TransformerLens reads
strings with when harness/lens.py opens a run there."""

import json
from collections.abc import Callable

from data.tokenizer import CharTokenizer, GPT2Tokenizer, Tokenizer
from harness.lens_weights import LensError

END_OF_TEXT = "<|endoftext|>"  # GPT-2's one special token, which TransformerLens pads with
# tiktoken's gpt2 files, kept in its cache
GPT2_FILES = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"


def hf_tokenizer(tokenizer: Tokenizer):
    """Our tokenizer as a Hugging Face PreTrainedTokenizerFast with the same ids, built offline.

    char: the run's own characters, one token each. gpt2: GPT-2's byte-level BPE from the two files
    that tiktoken reads for it (encoder.json holds the ids, vocab.bpe the merges), from tiktoken's
    cache. Both pad with <|endoftext|>; char runs have no such token, so it gets the id after the
    vocabulary, which no embedding has:
    a padded batch fails there instead of reading a real character. The text "<|endoftext|>" itself
    reads as ours reads it, as ordinary text (split_special_tokens), never as that id.
    """
    from tokenizers import Regex, decoders, pre_tokenizers
    from tokenizers import Tokenizer as Fast
    from tokenizers.models import BPE, WordLevel
    from transformers import PreTrainedTokenizerFast

    if isinstance(tokenizer, CharTokenizer):
        fast = Fast(
            WordLevel(
                {c: i for i, c in enumerate(tokenizer.chars)} | {END_OF_TEXT: tokenizer.vocab_size},
                unk_token=None,
            )
        )
        # every character on its own
        fast.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        fast.decoder = decoders.Fuse()  # joined back without spaces
        # a character outside the vocabulary, named
        kind = reading_first(PreTrainedTokenizerFast, tokenizer.encode)
    elif isinstance(tokenizer, GPT2Tokenizer):
        from tiktoken.load import read_file_cached

        ids = json.loads(read_file_cached(GPT2_FILES + "encoder.json"))
        merges = [
            tuple(line.split(" "))
            for line in read_file_cached(GPT2_FILES + "vocab.bpe").decode().splitlines()[1:]
            if line
        ]
        fast = Fast(BPE(ids, merges))
        # GPT-2's split into words, then bytes
        fast.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        fast.decoder = decoders.ByteLevel()
        kind = PreTrainedTokenizerFast  # bytes: every text reads
    else:
        raise LensError(
            f"no Hugging Face counterpart of the {tokenizer.name} tokenizer here; pass tokenizer=None and give token ids"
        )
    return kind(
        tokenizer_object=fast,
        eos_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
        split_special_tokens=True,
    )


def reading_first(base: type, read: Callable[[str], object]) -> type:
    """base, a Hugging Face tokenizer class, with its entry points (__call__, encode, tokenize)
    reading each text with `read` first: our CharTokenizer.encode, whose one-line error names the
    characters outside a char run's vocabulary, where the Hugging Face tokenizer says only "Missing
    [UNK] token" (its vocabulary has no token for the unknown)."""

    def first(method: Callable) -> Callable:
        def entry(self, text=None, *args, **kwargs):
            # a text or a batch
            for one in (
                [text] if isinstance(text, str) else text if isinstance(text, list | tuple) else []
            ):
                if isinstance(one, str):
                    read(one)
            return method(self, text, *args, **kwargs)

        return entry

    return type(
        base.__name__,
        (base,),
        {name: first(getattr(base, name)) for name in ("__call__", "encode", "tokenize")},
    )
