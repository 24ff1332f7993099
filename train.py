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

# before the imports below take their second: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal(BEFORE_TRAINING)

import argparse
import gc
import math
import sys
import time

import torch

from configs import Config
from harness.cli import OneLineParser, run_command
from harness.training.budget import measured_speed
from harness.training.checkpoints import Checkpointer, Progress, read_resumable, restore
from harness.training.evaluation import evaluate, evaluation_notes, make_eval_set
from harness.training.optim import describe, lr_at, make_optimizer, set_lr
from harness.training.probe import Probe
from harness.training.runlog import RunLogger, last_words, open_run_dir, phase_change, step_bar
from harness.training.runtime import load_data, setup_runtime, stop_asked, wrap_for_training
from harness.training.starting_weights import initial_model
from harness.training.step import check_finite, draw_micro_batches, micro_steps, tokens_per_step
from model.ablations import flags_label
from model.gradients import qk_grad_norm


def train(cfg: Config) -> dict:
    # Set up: where it runs, the text, the run folder.
    runtime = setup_runtime(cfg.train)
    corpus, cfg = load_data(cfg, runtime)
    # same init everywhere (DDP broadcasts rank 0's), own dropout
    torch.manual_seed(cfg.train.seed + runtime.rank)
    checkpoint = read_resumable(cfg, corpus.source_sha256) if cfg.train.resume else None
    # operations per second here: what a step and an evaluation cost is estimated from it
    speed = measured_speed(runtime.device)
    # fresh, GPT-2's or the checkpoint's; refused first if too big or slow
    cfg, model = initial_model(cfg, runtime, checkpoint, speed)
    run_lock = open_run_dir(cfg, runtime)

    # The optimizer and the batch sampler, fresh or restored (with the model's weights).
    optimizer = make_optimizer(model, cfg.train, runtime.device)
    train_gen = torch.Generator().manual_seed(cfg.train.seed)
    progress, last = Progress(), {}  # last: the latest evaluation's results
    if checkpoint:
        progress = restore(checkpoint, model, optimizer, train_gen, runtime)
        last["loss/val"] = progress.val_loss
        runtime.say(f"resuming {cfg.run_dir} from step {progress.step}")
    step_model = wrap_for_training(model, runtime)
    step_tokens = tokens_per_step(cfg, runtime)
    runtime.say(
        f"model: {model.num_params() / 1e6:.2f}M parameters; {corpus.describe()}; "
        f"{step_tokens:,} tokens per step; optimizer {describe(optimizer)}"
    )

    # What evaluations look at, where results go.
    eval_set = make_eval_set(corpus, corpus.tokenizer, cfg)
    notes, eval_seconds = evaluation_notes(cfg, eval_set, speed, runtime.device)
    if notes:
        runtime.say("\n".join(notes))
    logger = None
    if runtime.is_main:
        logger = RunLogger(cfg.run_dir, progress.step if checkpoint else None, eval_set.induction)
    probe = Probe(model, eval_set, cfg, runtime, logger)
    checkpointer = Checkpointer(
        cfg, corpus.tokenizer, corpus.source_sha256, runtime, progress.best_val
    )
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
        if logger:
            logger.log_evaluation(step, report, flags_label(cfg.model), cfg.model.causal)
        last.update(report.metrics, sample=report.sample)
        progress.val_loss = last["loss/val"]
        probe(step)  # before the checkpoint: a run resumed from it never probes this step twice
        save(step, evaluated=True)

    # The loop: every step sets the rate, draws a batch, steps; every so often it evaluates, logs
    # and saves. The training-loss window lives in progress, saved for --resume.
    window_start = time.perf_counter()
    first_step, stopped, step = progress.step, None, progress.step
    # from here on, a signal saves a checkpoint
    with StopFlag("stopping after this step and saving a checkpoint...") as stop:
        bar = step_bar(cfg, runtime, first_step)
        if checkpoint:
            stop.saved = f"{cfg.run_dir / 'ckpt.pt'} holds step {progress.step}"
        poll = stop.poll if runtime.world_size == 1 else None  # torchrun: stops between steps
        try:
            for step in bar:
                if stop_asked(stop, runtime):
                    raise Stopped(stop.signum)
                evaluated = progress.evaluated and progress.step == step
                if step % cfg.train.eval_interval == 0 and not evaluated:
                    evaluate_and_save(step)
                    window_start = time.perf_counter()  # evaluation time is not training throughput
                if step % cfg.train.eval_interval:  # nor is the probe's (an evaluation probes too)
                    window_start += probe(step)
                lr = lr_at(step, cfg.train)
                set_lr(optimizer, lr)
                log_now = (step + 1) % cfg.train.log_interval == 0
                log_now = log_now or step + 1 == cfg.train.max_steps
                # The step: forward, loss and backward per micro-batch (their gradients add up),
                # then clip, check, update. DDP averages the gradients on the last micro-batch.
                micro_batches = draw_micro_batches(corpus.train, cfg, runtime, train_gen)
                optimizer.zero_grad(set_to_none=True)
                loss = torch.zeros((), device=runtime.device)  # the mean over micro-batches
                for x, y, ddp_sync in micro_steps(step_model, micro_batches, runtime):
                    with ddp_sync:
                        with runtime.autocast():
                            _, micro_loss = step_model(x, y)  # the logits, lm_loss
                        (micro_loss / len(micro_batches)).backward()
                    loss += micro_loss.detach() / len(micro_batches)
                clip = cfg.train.grad_clip or math.inf  # 0: no clip
                grad_norm = torch.nn.utils.clip_grad_norm_(step_model.parameters(), clip)
                # a NaN or inf loss or gradient stops the run here, its saved weights kept
                check_finite(loss, grad_norm, step, cfg.run_dir / "ckpt.pt", record=runtime.is_main)
                qk_norm = qk_grad_norm(model) if log_now else None  # before the weights move
                optimizer.step()
                progress.window_loss = progress.window_loss + loss
                progress.window_steps += 1
                if log_now:
                    window = progress.window_loss / progress.window_steps
                    mean_loss = runtime.mean_over_ranks(window).item()
                    seconds = max(time.perf_counter() - window_start, 1e-9)
                    tok_s = progress.window_steps * step_tokens / seconds
                    if logger:
                        metrics = {"loss/train_step": mean_loss, "lr": lr}
                        metrics.update({"perf/tokens_per_s": tok_s, "grad/qk_norm": qk_norm})
                        logger.log(step + 1, **metrics)
                        bar.set_postfix(
                            loss=f"{mean_loss:.3f}", lr=f"{lr:.1e}", tok_s=f"{tok_s / 1e3:.1f}k"
                        )
                    window_start = time.perf_counter()
                    progress.window_loss, progress.window_steps = 0.0, 0
            bar.close()
            step = cfg.train.max_steps
            evaluate_and_save(step)  # the end: a last evaluation, probe and checkpoint
        except Stopped:  # at a step's start, or inside an evaluation: save where the loop stands
            bar.close()
            stopped = step
            save(step, evaluated=progress.evaluated and progress.step == step)
        if logger:
            logger.close()
    if run_lock:
        run_lock.release()
    elapsed = time.perf_counter() - started
    steps_done = (stopped if stopped is not None else cfg.train.max_steps) - first_step
    if runtime.is_main:  # the other processes hold only the losses
        runtime.say(last_words(cfg, last, elapsed, stopped))
        if stopped is None and eval_set.induction:  # when the induction heads formed
            runtime.say(phase_change(cfg.run_dir))
    tokens_per_s = steps_done * step_tokens / elapsed
    summary = {"wall_s": elapsed, "tokens_per_s": tokens_per_s, "stopped_at": stopped}
    return {**last, **summary, "signal": stop.signum}


def main(argv: list[str]) -> int:
    """Parse the command line, train; a run stopped by a signal exits with 128 + its number."""
    parser = OneLineParser(__doc__, config="base", usage=argparse.SUPPRESS)

    def command(argv: list[str]) -> int:
        signum = train(parser.parse_with_config(argv)[1])["signal"]
        return 128 + signum if signum else 0

    return run_command(command, argv, interrupted=BEFORE_TRAINING)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # the run is over: at exit, Python need not search torch's objects for reference cycles
    gc.freeze()
    sys.exit(code)
