"""Our tokenizer as a Hugging Face one with the same ids, for TransformerLens to read strings."""

import json
from collections.abc import Callable

from data.tokenizer import CharTokenizer, GPT2Tokenizer, Tokenizer
from harness.lens_weights import LensError

END_OF_TEXT = "<|endoftext|>"  # GPT-2's one special token, which TransformerLens pads with
GPT2_FILES = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"


def hf_tokenizer(tokenizer: Tokenizer):
    """gpt2's reads tiktoken's cache. A char run pads with the id after its vocabulary: a padded
    batch fails instead of reading a real character."""
    from tokenizers import Regex, decoders, pre_tokenizers
    from tokenizers import Tokenizer as Fast
    from tokenizers.models import BPE, WordLevel
    from transformers import PreTrainedTokenizerFast

    if isinstance(tokenizer, CharTokenizer):
        fast = Fast(WordLevel(tokenizer.stoi | {END_OF_TEXT: tokenizer.vocab_size}, unk_token=None))
        fast.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        fast.decoder = decoders.Fuse()  # joined back without spaces
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
        fast.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        fast.decoder = decoders.ByteLevel()
        kind = PreTrainedTokenizerFast  # bytes: every text reads
    else:
        raise LensError(
            f"no Hugging Face counterpart of the {tokenizer.name} tokenizer here; "
            "pass tokenizer=None and give token ids"
        )
    return kind(
        tokenizer_object=fast,
        eos_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
        split_special_tokens=True,
    )


def reading_first(base: type, read: Callable[[str], object]) -> type:
    """base whose entry points read each text with `read` first: it names the characters outside
    the vocabulary, where Hugging Face says "Missing [UNK] token"."""

    def first(method: Callable) -> Callable:
        def entry(self, text=None, *args, **kwargs):
            texts = text if isinstance(text, list | tuple) else [text]  # a text or a batch
            for one in texts:
                if isinstance(one, str):
                    read(one)
            return method(self, text, *args, **kwargs)

        return entry

    return type(
        base.__name__,
        (base,),
        {name: first(getattr(base, name)) for name in ("__call__", "encode", "tokenize")},
    )
