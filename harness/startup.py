"""What a training run sets up before its first step: the corpus with the config it completes, and the run folder."""

import dataclasses
import json

import torch

from configs import Config
from data.corpus import Corpus, check_split_lengths, load_corpus
from data.files import write_atomically
from harness.folders import FolderLock, claim_run_folder
from harness.runtime import Runtime


def load_data(cfg: Config, runtime: Runtime) -> tuple[Corpus, Config]:
    """The corpus, and the config with model.vocab_size filled in from its tokenizer (the config that gets saved).

    Under torchrun the main process prepares the .bin files first; the others then read them.
    """
    corpus = load_corpus(cfg.data) if runtime.is_main else None
    if runtime.world_size > 1:
        torch.distributed.barrier()
    corpus = corpus or load_corpus(cfg.data)
    check_split_lengths(corpus, cfg.model.block_size)
    return corpus, dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=corpus.tokenizer.vocab_size))


def open_run_dir(cfg: Config, runtime: Runtime) -> FolderLock | None:
    """A fresh run folder (an earlier run there is moved aside) or the resumed one, with config.json; say where.

    Returns the folder's lock, held while the run lives: no other process can take the folder meanwhile.
    """
    if not runtime.is_main:
        return None
    lock, moved = claim_run_folder(cfg.run_dir, cfg.train.resume)
    write_atomically(cfg.run_dir / "config.json", json.dumps(cfg.to_dict(), indent=2).encode())
    runtime.say(
        f"device: {runtime.device} ({runtime.why}); run folder: {cfg.run_dir}" + (f" (previous run moved to {moved})" if moved else "")
    )
    runtime.say(f"config {cfg.name}: " + " | ".join(f"{s}: {getattr(cfg, s)}" for s in ("model", "data", "train")))
    return lock
