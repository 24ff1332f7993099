"""Train the GPT: python train.py --config base [--no-mask] [--no-scale] [--no-pos]
[--section.field=VALUE ...]

Everything of a run lives in runs/<run-name>/: TensorBoard events, metrics.jsonl, config.json,
ckpt.pt (the latest state, for --resume) and best.pt (the best val loss so far). Ctrl-C, SIGTERM,
SIGHUP or lost output stops at the next step or evaluation pass (an evaluation cut short is not
logged) and saves a checkpoint; a second Ctrl-C aborts at once. Under torchrun the same file trains
with DistributedDataParallel. `train(cfg)` is the outline of a run, `main(argv)` its command line;
each step calls into harness/training/.
"""

from harness.stopping import BEFORE_TRAINING, StopFlag, Stopped, exit_on_signal

# first, before the imports below take their second: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal(BEFORE_TRAINING)

import argparse
import gc
import math
import sys
import time

import torch
from tqdm import tqdm

from configs import Config
from harness.cli import OneLineParser, run_command
from harness.training.budget import measured_speed
from harness.training.checkpoints import Checkpointer, Progress, read_resumable, restore
from harness.training.evaluation import evaluate, evaluation_notes, make_eval_set
from harness.training.optim import describe, lr_at, make_optimizer, set_lr
from harness.training.probe import Probe
from harness.training.runlog import RunLogger, open_run_dir, phase_change
from harness.training.runtime import (
    load_data,
    mean_over_ranks,
    setup_runtime,
    stop_asked,
    wrap_for_training,
)
from harness.training.starting_weights import initial_model
from harness.training.step import (
    check_finite,
    draw_micro_batches,
    micro_steps,
    tokens_per_second,
    tokens_per_step,
)
from model.ablations import flags_label
from model.gradients import qk_grad_norm


def train(cfg: Config) -> dict:
    # Set up: where it runs, the text, the run folder.
    runtime = setup_runtime(cfg.train)
    corpus, cfg = load_data(cfg, runtime)
    # same init everywhere (DDP broadcasts rank 0's), own dropout
    torch.manual_seed(cfg.train.seed + runtime.rank)
    # read once, checked before use
    checkpoint = read_resumable(cfg, corpus.source_sha256) if cfg.train.resume else None
    # operations per second here: the cost of a step and of an evaluation is estimated from it
    speed = measured_speed(runtime.device)
    # fresh, GPT-2's or the checkpoint's; refused first if too big or slow
    cfg, model = initial_model(cfg, runtime, checkpoint, speed)
    run_lock = open_run_dir(cfg, runtime)

    # The optimizer and the batch sampler, fresh or restored (with the model's weights).
    optimizer = make_optimizer(model, cfg.train, runtime.device)
    train_gen = torch.Generator().manual_seed(cfg.train.seed)
    progress = (
        restore(checkpoint, model, optimizer, train_gen, runtime) if checkpoint else Progress()
    )
    runtime.say(f"resuming {cfg.run_dir} from step {progress.step}") if checkpoint else None
    step_model = wrap_for_training(model, runtime)
    step_tokens = tokens_per_step(cfg, runtime)
    runtime.say(
        f"model: {model.num_params() / 1e6:.2f}M parameters; {corpus.describe()}; {step_tokens:,} tokens per step; "
        f"optimizer {describe(optimizer)}"
    )

    # What evaluations look at, where results go.
    eval_set = make_eval_set(corpus, corpus.tokenizer, cfg)
    notes, eval_seconds = evaluation_notes(cfg, eval_set, speed, runtime.device)
    runtime.say("\n".join(notes)) if notes else None
    logger = (
        RunLogger(cfg.run_dir, progress.step if checkpoint else None, eval_set.induction)
        if runtime.is_main
        else None
    )
    # every few steps, the story's signals on a slice of val (train.probes)
    probe = Probe(model, eval_set, cfg, runtime, logger)
    checkpointer = Checkpointer(
        cfg, corpus.tokenizer, corpus.source_sha256, runtime, progress.best_val
    )
    last = {"loss/val": progress.val_loss} if checkpoint else {}  # the latest evaluation's results
    started = time.perf_counter()  # training's wall clock: perf/elapsed_s counts evaluations too

    def save(step: int, evaluated: bool) -> None:
        progress.step, progress.evaluated = step, evaluated
        with stop.writing():  # a second Ctrl-C waits for this file, then aborts
            checkpointer.save(model, optimizer, train_gen, progress)
            stop.saved = f"{cfg.run_dir / 'ckpt.pt'} holds step {step}"

    # a stop inside the evaluation raises Stopped: nothing of it is logged
    def evaluate_and_save(step: int) -> None:
        report = evaluate(
            model, eval_set, runtime, corpus.tokenizer, started, poll, progress=eval_seconds > 10
        )
        logger.log_evaluation(
            step, report, flags_label(cfg.model), cfg.model.causal
        ) if logger else None
        last.update(report.metrics, sample=report.sample)
        progress.val_loss = last["loss/val"]
        probe(step)  # before the checkpoint: a run resumed from it never probes this step twice
        save(step, evaluated=True)

    # The loop: every step sets the rate, draws a batch, steps; every so often it evaluates, logs
    # and saves. the training-loss window: its sum and count live in progress, saved for --resume
    window_start = time.perf_counter()
    first_step, stopped, step = progress.step, None, progress.step
    # from here on, a signal saves a checkpoint
    with StopFlag("stopping after this step and saving a checkpoint...") as stop:
        bar = tqdm(
            range(first_step, cfg.train.max_steps),
            desc=cfg.run_name,
            dynamic_ncols=True,
            disable=not runtime.is_main,
            initial=first_step,
            total=cfg.train.max_steps,
        )
        stop.saved = f"{cfg.run_dir / 'ckpt.pt'} holds step {progress.step}" if checkpoint else None
        # under torchrun all processes stop together, between steps
        poll = stop.poll if runtime.world_size == 1 else None
        try:
            for step in bar:
                if stop_asked(stop, runtime):
                    raise Stopped(stop.signum)
                if step % cfg.train.eval_interval == 0 and not (
                    progress.evaluated and progress.step == step
                ):
                    evaluate_and_save(step)
                    window_start = time.perf_counter()  # evaluation time is not training throughput
                # nor the probe's (an evaluation probes too)
                window_start += probe(step) if step % cfg.train.eval_interval else 0.0
                lr = lr_at(step, cfg.train)
                set_lr(optimizer, lr)
                log_now = (
                    step + 1
                ) % cfg.train.log_interval == 0 or step + 1 == cfg.train.max_steps
                # The step: forward, loss and backward per micro-batch (their gradients add up),
                # then clip, check, update. this process's share of the batch
                micro_batches = draw_micro_batches(corpus.train, cfg, runtime, train_gen)
                optimizer.zero_grad(set_to_none=True)
                # the step's mean loss over its micro-batches
                loss = torch.zeros((), device=runtime.device)
                # DDP averages gradients on the last only
                for x, y, ddp_sync in micro_steps(step_model, micro_batches, runtime):
                    with ddp_sync:
                        with runtime.autocast():
                            # the logits and lm_loss (model/gpt.py)
                            _, micro_loss = step_model(x, y)
                        (micro_loss / len(micro_batches)).backward()
                    loss += micro_loss.detach() / len(micro_batches)
                # 0: no clip
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    step_model.parameters(), cfg.train.grad_clip or math.inf
                )
                # NaN or inf: stop, weights kept
                check_finite(loss, grad_norm, step, cfg.run_dir / "ckpt.pt", record=runtime.is_main)
                # the gradients are final, the weights not yet moved
                qk_norm = qk_grad_norm(model) if log_now else None
                optimizer.step()
                progress.window_loss, progress.window_steps = (
                    progress.window_loss + loss,
                    progress.window_steps + 1,
                )
                if log_now:
                    mean_loss = mean_over_ranks(
                        progress.window_loss / progress.window_steps, runtime
                    ).item()
                    tok_s = tokens_per_second(
                        progress.window_steps * step_tokens, time.perf_counter() - window_start
                    )
                    if logger:
                        logger.log(
                            step + 1,
                            **{
                                "loss/train_step": mean_loss,
                                "lr": lr,
                                "perf/tokens_per_s": tok_s,
                                "grad/qk_norm": qk_norm,
                            },
                        )
                        bar.set_postfix(
                            loss=f"{mean_loss:.3f}", lr=f"{lr:.1e}", tok_s=f"{tok_s / 1e3:.1f}k"
                        )
                    window_start, progress.window_loss, progress.window_steps = (
                        time.perf_counter(),
                        0.0,
                        0,
                    )
            bar.close()
            step = cfg.train.max_steps
            evaluate_and_save(step)  # the end: a last evaluation, probe and checkpoint
        except Stopped:  # at a step's start, or inside an evaluation: save where the loop stands
            bar.close()
            stopped = step
            save(step, evaluated=progress.evaluated and progress.step == step)
        logger.close() if logger else None
    run_lock.release() if run_lock else None
    elapsed = time.perf_counter() - started
    steps_done = (stopped if stopped is not None else cfg.train.max_steps) - first_step
    summary = {
        **last,
        "wall_s": elapsed,
        "tokens_per_s": steps_done * step_tokens / elapsed,
        "stopped_at": stopped,
        "signal": stop.signum,
    }
    if stopped is not None:
        runtime.say(
            f"stopped at step {stopped}; checkpoint saved to {cfg.run_dir / 'ckpt.pt'}. Resume with the same command plus --resume"
        )
    elif runtime.is_main:  # the other processes hold only the losses
        runtime.say(
            f"done in {elapsed:.1f}s: train {last['loss/train']:.4f}, val {last['loss/val']:.4f}, honest {last['loss/val_honest']:.4f}; "
            f"checkpoints {cfg.run_dir / 'ckpt.pt'} (latest), {cfg.run_dir / 'best.pt'} (best val)\nsample at the last step:\n{last['sample']}"
        )
        # when the induction heads formed
        runtime.say(phase_change(cfg.run_dir)) if eval_set.induction else None
    return summary


def main(argv: list[str]) -> int:
    """The command line: parse it, train; a run stopped by a signal exits with 128 + its number, as
    shells expect.
    """
    parser = OneLineParser(__doc__, config="base", usage=argparse.SUPPRESS)

    def command(argv: list[str]) -> int:
        signum = train(parser.parse_with_config(argv)[1])["signal"]
        return 128 + signum if signum else 0

    return run_command(command, argv, interrupted=BEFORE_TRAINING)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # the run is over: at exit, Python need not search every object torch's modules made for
    # reference cycles
    gc.freeze()
    sys.exit(code)
