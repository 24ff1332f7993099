"""Where a run computes: the device, the backend switches, torchrun's processes, clean stops."""

import contextlib
import ctypes
import dataclasses
import os
import platform
import signal
from dataclasses import dataclass

import torch

from configs import Config, ConfigError, TrainConfig
from data.corpus import Corpus, check_split_lengths, load_corpus
from data.synthetic import SyntheticCorpus, load_synthetic
from harness.stopping import StopFlag, answered_signals


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    autocast_dtype: torch.dtype | None  # bf16 on CUDA, None elsewhere
    why: str  # how the device was chosen, for the start-up line
    rank: int = 0  # this process's index under torchrun
    world_size: int = 1
    use_compile: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def mean_over_ranks(self, value: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            value = value.clone()
            torch.distributed.all_reduce(value)
            value /= self.world_size
        return value

    def say(self, line: str) -> None:
        if self.is_main:
            print(line)


def keep_freed_memory() -> bool:
    """Make glibc keep freed blocks up to 1 GiB, so each CPU step does not fault its activations in
    again; True if it took effect."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    # M_MMAP_THRESHOLD (-3) and M_TRIM_THRESHOLD (-1), from glibc's malloc.h
    return bool(mallopt(-3, 2**30) and mallopt(-1, 2**30))


def setup_runtime(train_cfg: TrainConfig, reuse_memory: bool = True) -> Runtime:
    """Scoring and sampling pass reuse_memory=False: their sizes vary, and kept blocks fragment."""
    wanted, why = train_cfg.device, "from train.device"
    has_cuda, has_mps = torch.cuda.is_available(), torch.backends.mps.is_available()
    if wanted == "auto" and has_cuda:
        wanted, why = "cuda", "auto: CUDA found"
    elif wanted == "auto" and has_mps:
        wanted, why = "mps", "auto: Apple MPS found"
    elif wanted == "auto":
        wanted, why = "cpu", "auto: no CUDA or MPS found"
    elif (wanted.startswith("cuda") and not has_cuda) or (wanted == "mps" and not has_mps):
        raise ConfigError(f"--device {wanted} is not available here; use --device auto or cpu")
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world_size > 1:  # torchrun: one process per device
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if wanted.startswith("cuda"):
            wanted = f"cuda:{local_rank}"
            torch.cuda.set_device(local_rank)
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group("nccl" if wanted.startswith("cuda") else "gloo")
        why += f"; rank {rank} of {world_size} ({torch.distributed.get_backend()})"
    device = torch.device(wanted)
    if device.type == "cpu":
        if reuse_memory:
            keep_freed_memory()
        # Denormals to zero: a saturated softmax (--no-scale) fills the backward with them, and CPUs
        # compute them far slower. Set before torch's thread pool starts, which inherits it.
        torch.set_flush_denormal(True)
    autocast_dtype = None
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        # bf16 where the card has bf16 units (Ampere and later); older cards only emulate it
        if torch.cuda.is_bf16_supported(including_emulation=False):
            autocast_dtype = torch.bfloat16
    # torch.compile pays on a GPU only (docs/performance.md), and needs a working Triton there
    use_compile = train_cfg.compile == "true"
    if train_cfg.compile == "auto" and device.type == "cuda":
        use_compile = has_triton()
        if not use_compile:
            why += "; torch.compile off: no working Triton"
    return Runtime(device, autocast_dtype, why, rank, world_size, use_compile)


def has_triton() -> bool:  # torch's private check
    try:
        from torch.utils._triton import has_triton as torch_has_triton
    except ImportError:
        return False
    return torch_has_triton()


def random_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """What dropout draws from: the CPU's state and the CUDA device's (or None)."""
    if device.type == "cuda":
        return torch.get_rng_state(), torch.cuda.get_rng_state(device)
    return torch.get_rng_state(), None


def set_random_state(device: torch.device, cpu: torch.Tensor, cuda: torch.Tensor | None) -> None:
    torch.set_rng_state(cpu)
    if cuda is not None and device.type == "cuda":
        torch.cuda.set_rng_state(cuda, device)


class EagerOnFailure:
    """The compiled model, or the plain one if compiling fails at the first call (the random state
    put back for the retry)."""

    def __init__(self, compiled, eager, runtime: Runtime):
        self.model, self.eager, self.runtime, self.fell_back = compiled, eager, runtime, False

    def __call__(self, *args, **kwargs):
        if self.eager is None:
            return self.model(*args, **kwargs)
        state = random_state(self.runtime.device)
        try:
            out = self.model(*args, **kwargs)
        except Exception as e:  # a failure of the model itself recurs in the eager call
            root = e  # torch wraps the backend's own error (BackendCompilerFailed)
            while getattr(root, "inner_exception", None) or root.__cause__:
                root = getattr(root, "inner_exception", None) or root.__cause__
            reason = (str(root).strip().splitlines() or [""])[0].strip()[:200]
            self.runtime.say(
                f"torch.compile failed at the first step ({type(root).__name__}: {reason}); "
                "training without it"
            )
            set_random_state(self.runtime.device, *state)
            self.model, self.fell_back = self.eager, True
            out = self.model(*args, **kwargs)
        self.eager = None
        return out

    def no_sync(self):
        return self.model.no_sync()

    def parameters(self):
        return self.model.parameters()


def wrap_for_training(model: torch.nn.Module, runtime: Runtime):
    if runtime.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    if runtime.use_compile:
        return EagerOnFailure(torch.compile(model), model, runtime)
    return model


def load_data(cfg: Config, runtime: Runtime) -> tuple[Corpus | SyntheticCorpus, Config]:
    """The corpus, and the config with its vocab_size; under torchrun the main process prepares the
    .bin files."""
    if cfg.data.source != "text":
        corpus = load_synthetic(cfg.data)
    else:
        corpus = load_corpus(cfg.data) if runtime.is_main else None
        if runtime.world_size > 1:
            torch.distributed.barrier()
        corpus = corpus or load_corpus(cfg.data)
        check_split_lengths(corpus, cfg.model.block_size)
    model_cfg = dataclasses.replace(cfg.model, vocab_size=corpus.tokenizer.vocab_size)
    return corpus, dataclasses.replace(cfg, model=model_cfg)


def stop_asked(stop: StopFlag, runtime: Runtime) -> bool:
    """Whether any process was asked to stop, so that all stop at the same step."""
    if runtime.world_size == 1:  # no tensor: reading one back would sync the GPU every step
        return bool(stop.signum)
    # NCCL reduces only tensors on the process's GPU
    signum = torch.tensor(float(stop.signum or 0), device=runtime.device)
    return runtime.mean_over_ranks(signum).item() > 0


def shut_down() -> None:
    """A late Ctrl-C prints no traceback (SIG_IGN would pass on to a command run again here); leave
    torchrun's group."""
    for sig in answered_signals():
        signal.signal(sig, lambda signum, frame: None)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
