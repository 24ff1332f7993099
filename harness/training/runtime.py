"""Where a run computes: the device, the backend switches, the processes under torchrun, and clean
stops.

Everything here is decided once, from config, at start-up (`setup_runtime`), and passed down:
nothing deeper in the code asks which device it is on.
"""

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
    world_size: int = 1  # number of processes
    use_compile: bool = False  # torch.compile the training model

    @property
    def is_main(self) -> bool:
        return self.rank == 0  # only rank 0 writes logs and checkpoints

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def say(self, *args, **kwargs) -> None:
        """print, on the main process only: under torchrun every process runs the same code."""
        if self.is_main:
            print(*args, **kwargs)


def keep_freed_memory(threshold: int = 2**30) -> bool:
    """Make glibc's malloc keep freed blocks up to `threshold` bytes for reuse; True if it took
    effect.

    On a CPU every tensor comes from malloc, and by default glibc hands big freed blocks back to
    the kernel, so each training step faults its activations in again, page by page, zeroed: the
    base preset's (B, T, V) logits alone are hundreds of megabytes a step. Raising the mmap and
    trim thresholds lets the next step reuse the memory of the last (docs/performance.md has the
    measured page faults and step times). Other C libraries (macOS, musl) are left alone.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)  # the C library this process already runs on
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # from glibc's malloc.h
    return bool(
        libc.mallopt(M_MMAP_THRESHOLD, threshold) and libc.mallopt(M_TRIM_THRESHOLD, threshold)
    )


GPU_PRESET = "char-gpu"  # the preset sized for one GPU (configs/char-gpu.toml)
# README's first commands and the quick char: presets sized for a 2-core CPU
CPU_DEMOS = ("base", "char", "char-modern")


def preset_advice(preset: str, device: torch.device) -> str | None:
    """A line for a GPU given one of the CPU-sized demos (`python train.py` on a CUDA machine):
    which preset suits it.
    """
    if device.type != "cuda" or preset not in CPU_DEMOS:
        return None
    return (
        f"note: the {preset} preset is sized for a 2-core CPU, and a GPU trains it in seconds; for one GPU, "
        f"python train.py --config {GPU_PRESET} trains nanoGPT's shakespeare_char shape (docs/performance.md#on-a-gpu)"
    )


def resolve_device(wanted: str) -> tuple[str, str]:
    """train.device ("auto": CUDA, then Apple MPS, then CPU) -> (device name, how it was chosen)."""
    has_cuda, has_mps = torch.cuda.is_available(), torch.backends.mps.is_available()
    if wanted == "auto":
        wanted = "cuda" if has_cuda else "mps" if has_mps else "cpu"
        return wanted, "auto: " + (
            "CUDA found" if has_cuda else "Apple MPS found" if has_mps else "no CUDA or MPS found"
        )
    if wanted.startswith("cuda") and not has_cuda:
        raise ConfigError(
            f"--device {wanted} asked for, but this machine has no CUDA; use --device auto or --device cpu"
        )
    if wanted == "mps" and not has_mps:
        raise ConfigError(
            "--device mps asked for, but Apple MPS is not available here; use --device auto or --device cpu"
        )
    return wanted, "from train.device"


def setup_runtime(train_cfg: TrainConfig, reuse_memory: bool = True) -> Runtime:
    """Resolve the device, join torchrun's process group if launched by it, and set the backend
    switches.

    reuse_memory: keep freed memory for the next step (keep_freed_memory), which pays when every
    step allocates the same sizes, as training does. Scoring and sampling allocate a new size per
    prefix length, and there the
    kept blocks fragment: an honest score of a no-mask model grew to several GB with it, so they
    pass False.
    """
    wanted, why = resolve_device(train_cfg.device)
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world_size > 1:  # launched by torchrun: one process per device
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if wanted.startswith("cuda"):
            wanted = f"cuda:{local_rank}"
            torch.cuda.set_device(local_rank)
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group(
                backend="nccl" if wanted.startswith("cuda") else "gloo"
            )
        why += f"; rank {rank} of {world_size} ({torch.distributed.get_backend()})"
    device = torch.device(wanted)
    if device.type == "cpu":
        if reuse_memory:
            keep_freed_memory()
        # Round float32 values below 1.2e-38 (denormals) to zero: a saturated softmax, as in
        # --no-scale, fills attention's backward with them, and CPUs compute them far slower.
        # Threads inherit the setting when created, so it is set before torch's thread pool starts,
        # with the first parallel op; later, it would reach this thread only.
        torch.set_flush_denormal(True)
    autocast_dtype = None
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        # bf16 where the card has bf16 units (Ampere and later); on older cards (a T4, a V100) torch
        # only emulates it: float32 there.
        autocast_dtype = (
            torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else None
        )
    # torch.compile pays on a GPU; on a CPU its compile time is not won back (docs/performance.md).
    # On CUDA its default backend writes Triton kernels: without a working Triton (most often on
    # Windows) "auto" leaves it off.
    use_compile = train_cfg.compile == "true" or (
        train_cfg.compile == "auto" and device.type == "cuda" and has_triton()
    )
    if train_cfg.compile == "auto" and device.type == "cuda" and not use_compile:
        why += "; torch.compile off: no working Triton"
    return Runtime(device, autocast_dtype, why, rank, world_size, use_compile)


def has_triton() -> bool:
    """Whether Triton can build kernels for the CUDA device here, as torch's own check says.

    The check lives in a private torch module: a release that moves it answers False, and the run
    trains eagerly (and says so), which is correct, only slower.
    """
    try:
        # imported only when CUDA is there: it probes the device
        from torch.utils._triton import has_triton as torch_has_triton
    except ImportError:
        return False
    return torch_has_triton()


def random_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The random state that dropout draws from: the CPU generator's, and on CUDA the device's own
    too (None elsewhere).
    """
    return torch.get_rng_state(), torch.cuda.get_rng_state(
        device
    ) if device.type == "cuda" else None


def set_random_state(device: torch.device, cpu: torch.Tensor, cuda: torch.Tensor | None) -> None:
    """Put back what random_state returned (a CUDA state only on CUDA: a run resumed on another
    device draws anew there).
    """
    torch.set_rng_state(cpu)
    if cuda is not None and device.type == "cuda":
        torch.cuda.set_rng_state(cuda, device)


class EagerOnFailure:
    """The compiled training model, or the plain one if compiling fails at the first step.

    torch.compile compiles at the first call, so that is where a missing compiler or Triton shows:
    the run then goes on eagerly, with one line saying so, instead of failing. The first call's
    random state is put back before the eager retry, so dropout draws what a run without compile
    draws.
    """

    def __init__(self, compiled, eager, runtime: Runtime):
        self.model, self.eager, self.runtime = compiled, eager, runtime
        self.fell_back = False  # whether compiling failed and the eager model runs instead

    def __call__(self, *args, **kwargs):
        # past the first call: compiling worked, or the model is the eager one already
        if self.eager is None:
            return self.model(*args, **kwargs)
        state = random_state(self.runtime.device)
        try:
            out = self.model(*args, **kwargs)
        # any failure to compile; a failure of the model itself recurs in the eager call and
        # propagates
        except Exception as e:
            root = e
            # torch wraps the backend's own error (BackendCompilerFailed)
            while getattr(root, "inner_exception", None) or root.__cause__:
                root = getattr(root, "inner_exception", None) or root.__cause__
            reason = next((line.strip() for line in str(root).splitlines() if line.strip()), "")[
                :200
            ]
            self.runtime.say(
                f"torch.compile failed at the first step ({type(root).__name__}: {reason}); training without it"
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
    """The model as the training step runs it: wrapped by DDP under torchrun, compiled where
    runtime.use_compile says (eager if compiling fails). Evaluation and sampling run the plain
    model."""
    wrapped = torch.nn.parallel.DistributedDataParallel(model) if runtime.world_size > 1 else model
    return (
        EagerOnFailure(torch.compile(wrapped), wrapped, runtime) if runtime.use_compile else wrapped
    )


def mean_over_ranks(value: torch.Tensor, runtime: Runtime) -> torch.Tensor:
    """The mean of a tensor over every process (the tensor itself with one process)."""
    if runtime.world_size > 1:
        value = value.clone()
        torch.distributed.all_reduce(value)
        value /= runtime.world_size
    return value


def load_data(cfg: Config, runtime: Runtime) -> tuple[Corpus | SyntheticCorpus, Config]:
    """The corpus (or the synthetic source that data.source names), and the config with
    model.vocab_size filled in from its tokenizer (the config that gets saved).

    Under torchrun the main process prepares the .bin files first; the others then read them.
    """
    if cfg.data.source != "text":
        corpus = load_synthetic(cfg.data)  # nothing to prepare: every batch is drawn afresh
    else:
        corpus = load_corpus(cfg.data) if runtime.is_main else None
        if runtime.world_size > 1:
            torch.distributed.barrier()
        corpus = corpus or load_corpus(cfg.data)
        check_split_lengths(corpus, cfg.model.block_size)
    return corpus, dataclasses.replace(
        cfg, model=dataclasses.replace(cfg.model, vocab_size=corpus.tokenizer.vocab_size)
    )


def stop_asked(stop: StopFlag, runtime: Runtime) -> bool:
    """Whether any process was asked to stop: all of them then stop at the same step."""
    if runtime.world_size == 1:
        # no tensor: on a GPU, reading one back would wait for the queued work every step
        return bool(stop.signum)
    # NCCL reduces only tensors on the process's GPU
    signum = torch.tensor(float(stop.signum or 0), device=runtime.device)
    return mean_over_ranks(signum, runtime).item() > 0


def shut_down() -> None:
    """The process is ending: a late Ctrl-C must not print a traceback (its handler does nothing,
    where SIG_IGN would read as the launcher's, harness/stopping.py's answered_signals, to a command
    run again in this process), and torchrun's group is left."""
    for sig in answered_signals():
        signal.signal(sig, lambda signum, frame: None)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
