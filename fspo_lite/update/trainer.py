"""The GRPO-family training loop (grpo, fspo, caution, rlfh, klcf): a thin stateful shell around the pure functions.

One step (`Trainer.train_step`): sample questions -> generate G responses each (rollout/) -> `score_rollouts`: rewards,
sentence verdicts and the FSPO sentence mask under the run's scoring plan (scoring/rewards.py, scoring/verdicts.py) ->
`advantages_from_scores`: token advantages, FSPO-flipped or from RLFH's reward-to-go (scoring/rewards.py, algos.py) ->
`Trainer.update`: mu epochs of clipped-surrogate updates (algos.py) -> metrics and, now and then, a checkpoint. The
FSPO path (rollout -> verdicts -> mask -> flip -> loss) reads in this file, rollout/transformers_rollout.py,
scoring/rewards.py, scoring/verdicts.py and algos.py (tests/test_architecture.py checks it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import time
from pathlib import Path

import torch

from fspo_lite import algos
from fspo_lite.config import Config
from fspo_lite.text import require_sentence_splitter
from fspo_lite.data.examples import QAExample
from fspo_lite.data.prompts import prompt_text
from fspo_lite.data.training_set import ExampleSampler, load_training_examples
from fspo_lite.data.user_data import as_examples
from fspo_lite.logs.training_log import (MetricsLogger, append_jsonl, earlier_run, metric_text, sample_record,
                                        truncate_jsonl)
from fspo_lite.memory import release_memory
from fspo_lite.models.logprobs import reference_context
from fspo_lite.models.policy import frozen_copy, load_policy
from fspo_lite.models.precision import needs_loss_scaling
from fspo_lite.models.user_model import model_name_of, prepare_user_policy
from fspo_lite.progress import progress_bar
from fspo_lite.rollout.engines import check_rollout_engine
from fspo_lite.rollout.transformers_rollout import Rollout
from fspo_lite.scoring.advantage_mass import advantage_mass, token_regions
from fspo_lite.scoring.plan import check_settings, scoring_plan
from fspo_lite.scoring.rewards import advantages_from_scores, build_reward_tools, score_rollouts
from fspo_lite.scoring.user_reward import user_reward
from fspo_lite.scoring.verifiers import build_verifier
from fspo_lite.speed import build_logprob_pass, build_rollout_engine, judge_logprob_pass
from fspo_lite.update.checkpoint import (CheckpointError, complete_checkpoints, latest_checkpoint, load_checkpoint,
                                         save_checkpoint)
from fspo_lite.update.distributed import Distributed, loss_normalisers
from fspo_lite.update.fsdp import SHARDED_DIR, FSDPDistributed
from fspo_lite.update.loss_scale import LossScale
from fspo_lite.update.resume_checks import check_links, check_resume, run_record


class TrainingError(RuntimeError):
    """Training cannot go on (for example: too many consecutive non-finite steps)."""


def set_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    """Owns the model, optimizer, rollout engine and verifier; `train()` runs config.train.steps steps."""

    def __init__(self, config: Config, model=None, tokenizer=None, train_examples: list[QAExample] | None = None,
                 verifier=None, progress: bool = True, *, train_dataset=None, reward_funcs=None, reward_weights=None):
        """`model`: None (config.model.name is loaded), a name or folder (loaded in its place) or a loaded
        transformers model (with `tokenizer`, or the tokenizer of its folder; a LoRA adapter when model.lora);
        `train_dataset`: the training questions as a list of dicts, a file path or a datasets.Dataset
        (fspo_lite.data.user_data; `train_examples`: QAExample objects; neither: data.train); `reward_funcs`: a
        function or a list of them in TRL's convention, weighted by `reward_weights`, in place of the outcome reward
        of reward.method=grpo / fspo (fspo_lite.scoring.user_reward). Each is checked, in one line, before any model
        loads."""
        if model is not None:  # the checkpoints' config.yaml names the model trained (eval --adapter reads it)
            name = model_name_of(model, config.model.name)
            if name != config.model.name:
                config = dataclasses.replace(config, model=dataclasses.replace(config.model, name=name))
            if isinstance(model, (str, os.PathLike)):
                model = None
        check_settings(config)  # before any model loads (load_config checks ranges too; configs built in code come here)
        check_links(config.train.output_dir)  # a linked checkpoints/ or metrics.jsonl would write into another folder
        if train_dataset is not None:
            if train_examples is not None:
                raise ValueError("give train_dataset or train_examples, not both")
            train_examples = as_examples(train_dataset, seed=config.train.seed)
        own_reward = user_reward(reward_funcs, reward_weights, train_examples, config.reward.method)
        if not config.train.resume and earlier_run(config.train.output_dir):  # would log steps 1, 2 after 1, 2
            raise TrainingError(earlier_run(config.train.output_dir))
        check_rollout_engine(config.rollout, config.model, config.train)  # vLLM: installed, a platform, its settings
        require_sentence_splitter()  # without pysbd every response would silently be one sentence
        self.config = config
        self.progress = progress
        set_seed(config.train.seed)
        # [distributed] rank, world size, collectives (one process: identities); FSDP2 shards under torchrun
        self.dist = FSDPDistributed() if config.train.fsdp else Distributed()
        # the data before the model: a bad data file is reported in a second, not after the model loads
        self.examples = train_examples if train_examples is not None else load_training_examples(config)
        if config.train.resume:  # settings, data by content, rows, a run whose checkpoints are gone: before the model
            check_resume(config.train.output_dir, config, self.examples)
        owns_model = model is None  # loaded here: its Unsloth vLLM engine ends with the trainer
        if model is not None:
            model, tokenizer = prepare_user_policy(model, tokenizer, config.model)
        else:
            model, tokenizer = load_policy(config.model, seed=config.train.seed,
                                           max_seq_length=config.data.max_prompt_tokens + config.rollout.max_new_tokens,
                                           fast_inference=config.rollout.engine == "vllm",
                                           gpu_memory_utilization=config.rollout.vllm_gpu_memory_utilization)
        self.model, self.tokenizer = model, tokenizer
        # the seam of every log-prob pass: the reference, or the fast one the speed section builds (fspo_lite.speed)
        self.logprob_pass = build_logprob_pass(config, model, self.dist.world_size)
        self.sampler = ExampleSampler(len(self.examples), seed=config.train.seed)
        # a judge model (the likelihood verifier) scores through the log-prob seam too, as speed.mode says
        self.verifier = verifier or build_verifier(config.verifier, judge_logprob_pass(config.speed))
        self.reward_tools = build_reward_tools(config)
        self.reward_tools.user_reward = own_reward
        self.scoring_plan = scoring_plan(config.reward, config.detail, self.verifier is not None)  # once per run
        self.reference = frozen_copy(self.model) if config.train.beta > 0 and not config.model.lora else None
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.train.learning_rate,
                                      weight_decay=config.train.weight_decay)
        # [distributed] the wrapped (DDP/FSDP) model runs the training forward/backward; self.model
        # (unwrapped, same weights) generates, gives the reference pass and is saved
        self.train_model, self.optimizer = self.dist.prepare(model, optimizer)
        self.parameters = [p for p in self.train_model.parameters() if p.requires_grad]
        self.loss_scale = LossScale(needs_loss_scaling(  # on only for float16 compute on a GPU
            config.model.dtype, config.model.load_in_4bit, config.train.fsdp, self.dist.device.type))
        if self.reference is not None:
            self.reference = self.dist.prepare_frozen(self.reference)  # [distributed] sharded too under FSDP
        self.engine = build_rollout_engine(model, tokenizer, config, self.dist, owns_model)  # rollout.engine
        set_seed(config.train.seed + self.dist.rank)  # [distributed] each rank samples differently
        self.output_dir = Path(config.train.output_dir)
        self.logger = MetricsLogger(self.output_dir, tensorboard=config.train.tensorboard)
        self.step_index = 0
        self.bad_steps = 0
        self.skipped_updates = 0
        if config.train.resume:
            try:
                self.resume()
            except BaseException:
                self.close()  # the engine is up: a refused checkpoint must not leave it running
                raise

    def close(self) -> None:
        """End the rollout engine and give the memory back, so that the next trainer in the process starts on a clean
        machine (notebook 03 trains several in one kernel; vLLM refuses to start below its share of free GPU memory):
        the engine ends its processes and workers (`Engine.close`), the engine, model, optimizer and reference are
        dropped, then `release_memory`. Safe to call twice; no training after it. `with Trainer(...)` calls it."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()
        self.logger.close()
        self.model = self.train_model = self.optimizer = self.reference = None
        self.parameters = []
        release_memory()

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- state -------------------------------------------------------------------------
    def resume(self) -> bool:
        """Continue from the newest complete checkpoint in output_dir; False when there is none.

        Weights, optimizer, RNG states (sampling included), data position and fault counters
        come back as they were, and rows that metrics.jsonl / samples.jsonl got after the
        checkpoint are dropped, so the resumed run logs each later step exactly once and
        reproduces the uninterrupted run's numbers. With no checkpoint the run starts over, so
        every row an earlier attempt logged is dropped (no step logged twice).
        """
        path = latest_checkpoint(self.output_dir)
        if path is None:
            self._drop_rows_after(0)
            return False
        try:
            if self.dist.shards_weights:  # [distributed] sharded weights, optimizer state and every rank's RNG
                state = self.dist.load_checkpoint(path, self.train_model, self.optimizer)
            else:
                state = load_checkpoint(path, self.model, self.optimizer)
        except CheckpointError as error:
            older = [p.name for p in complete_checkpoints(self.output_dir) if p.name < path.name]
            hint = (f"; to resume from the newest intact one, remove {path} (intact: {', '.join(older)})" if older
                    else "; no older intact checkpoint exists")
            raise CheckpointError(f"{error}{hint}") from None
        self.step_index = state["step"]
        if self.dist.world_size > 1 and not self.dist.shards_weights:  # [distributed] rank 0's RNG only: reseed
            set_seed(self.config.train.seed + self.dist.rank + 1_000_003 * self.step_index)
        self.sampler.load_state_dict(state["sampler"])
        self.skipped_updates = state.get("skipped_updates", 0)
        self.bad_steps = state.get("bad_steps", 0)
        self.loss_scale.load_state_dict(state.get("loss_scale", {}))
        self._drop_rows_after(self.step_index)
        print(f"[fspo_lite] resumed from {path} (step {self.step_index})")
        return True

    def _drop_rows_after(self, step: int) -> None:
        """Keep the metrics/samples rows of steps 1..step (those the resumed state covers); torn
        lines left by a killed writer go too."""
        if self.dist.is_main:
            had_rows = self.logger.path.exists() and self.logger.path.stat().st_size > 0
            self.logger.truncate_after(step)
            truncate_jsonl(self.output_dir / "samples.jsonl", step)
            if step == 0 and had_rows:
                print(f"[fspo_lite] no checkpoint in {self.output_dir}: starting over, earlier rows dropped")
        self.dist.wait()

    def save(self) -> Path | None:
        """Write a checkpoint (main process only; every rank waits for it). Returns its path on the main process.
        The step's metrics row is already on disk (see fspo_lite.logs.training_log), so no step is lost or logged twice."""
        state = {"sampler": self.sampler.state_dict(), "skipped_updates": self.skipped_updates,
                 "bad_steps": self.bad_steps, **self.loss_scale.checkpoint_state()}
        if self.dist.is_main:  # what resume compares: the data's and the rows' digests (update/resume_checks.py)
            state.update(run_record(self.output_dir, self.step_index, self.examples))
        weights = self.dist.full_state_dict(self.train_model)  # [distributed] collective when weights are sharded
        sharded = {}
        if self.dist.shards_weights:  # [distributed] every rank writes its shards of weights and optimizer state
            sharded[SHARDED_DIR] = self.dist.save_sharded(self.output_dir / "checkpoints" / ".sharded-staging",
                                                          self.train_model, self.optimizer)
        path = None
        if self.dist.is_main:
            path = save_checkpoint(self.output_dir, self.step_index, self.model, None if sharded else self.optimizer,
                                   state, self.config, state_dict=weights, extra_dirs=sharded)
        self.dist.wait()
        return path

    # ---- the loop ----------------------------------------------------------------------
    def train(self) -> list[dict]:
        """Run the remaining steps; returns their metrics (also in output_dir/metrics.jsonl)."""
        self.output_dir.mkdir(parents=True, exist_ok=True)
        if self.dist.is_main:
            self.config.save(self.output_dir / "config.yaml")
        history = []
        steps = range(self.step_index, self.config.train.steps)
        bar = progress_bar(steps, desc=f"train {self.config.reward.method}",
                           disable=not (self.progress and self.dist.is_main))
        for _ in bar:
            metrics = self.train_step()
            history.append(metrics)
            bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", acc=f"{metrics['accuracy']:.2f}",
                            fact=metric_text("step_factuality", metrics["step_factuality"], 2))
            every = self.config.train.save_every
            if every and self.step_index % every == 0 and self.step_index < self.config.train.steps:
                self.save()
        self.save()
        return history

    def rollout(self, examples: list[QAExample]) -> Rollout:
        prompts = [prompt_text(self.tokenizer, e, self.config.data) for e in examples]
        return self.engine.generate(prompts, self.config.rollout.group_size)

    def train_step(self) -> dict:
        """One GRPO/FSPO step; returns and logs its metrics."""
        config = self.config
        started = time.perf_counter()
        examples = [self.examples[i] for i in self.sampler.next(config.train.prompts_per_step)]
        examples = self.dist.shard(examples)  # [distributed] this rank's prompts; each group stays on one rank
        rollout = self.rollout(examples)
        generated = time.perf_counter()
        per_response = [e for e in examples for _ in range(config.rollout.group_size)]
        scored = score_rollouts(per_response, rollout, self.tokenizer, config, self.verifier,
                                step=self.step_index, tools=self.reward_tools, plan=self.scoring_plan)
        advantages, flipped = advantages_from_scores(scored, rollout.completion_mask, config.rollout.group_size,
                                                     config.train.scale_by_std, config.reward.strict_checkable)
        scored_at = time.perf_counter()
        update = self.update(rollout, advantages)
        self.step_index += 1
        tokens = int(rollout.completion_mask.sum())
        elapsed = time.perf_counter() - started
        metrics = {
            "step": self.step_index,
            **scored.metrics,
            "frac_reward_zero_std": algos.zero_std_group_fraction(scored.rewards, config.rollout.group_size),
            "flipped_token_share": flipped.sum().item() / max(tokens, 1),
            **advantage_mass(advantages, token_regions(scored.views, scored.verdicts, advantages.shape[1]),
                             rollout.completion_mask),  # where the gradient goes (fspo_lite.scoring.advantage_mass)
            **update,
            "completion_length": rollout.completion_lengths.float().mean().item(),
            "tokens_per_second": tokens / max(elapsed, 1e-9),
            "generation_time": generated - started,
            "reward_time": scored_at - generated,
            "update_time": time.perf_counter() - scored_at,
            "step_time": elapsed,
            "skipped_updates": self.skipped_updates,
        }
        metrics = self.dist.gather_metrics(metrics)  # [distributed] averaged over ranks (counts summed)
        if self.dist.is_main:
            self.logger.log(metrics)
            unflipped = algos.group_advantages(scored.rewards, config.rollout.group_size, config.train.scale_by_std)
            append_jsonl(self.output_dir / "samples.jsonl", sample_record(  # the step's first response, for plots
                self.step_index, examples[0], rollout, scored, advantages, self.tokenizer, unflipped[0].item()))
        self._stop_if_diverged()  # every rank: the gradient norm that decides a skip is global
        return metrics

    @torch.no_grad()
    def _frozen_logprobs(self, rollout: Rollout, reference: bool) -> torch.Tensor:
        """(N, C) log-probs of the whole rollout in its own row order, 0 on the columns a micro-batch left out."""
        result = torch.zeros(rollout.completion_ids.shape, device=rollout.completion_ids.device)
        separate = reference and self.reference is not None
        model = self.reference if separate else self.model
        with reference_context(self.model) if reference and not separate else contextlib.nullcontext(), \
                self.logprob_pass.over(model, rollout) as logprobs:
            for rows, width in self._micro_batches(rollout):
                result[rows, :width] = logprobs(rows, width)[0].to(result.dtype)
        return result

    def _micro_batches(self, rollout: Rollout) -> list[tuple[torch.Tensor, int]]:
        return self.logprob_pass.micro_batches(rollout, self.config.train.micro_batch_size)

    def update(self, rollout: Rollout, advantages: torch.Tensor) -> dict:
        """mu epochs over the rollout, one optimizer step per epoch with gradient accumulation."""
        train = self.config.train
        model = self.train_model
        model.train()
        mask = rollout.completion_mask.float()
        advantages = advantages.to(mask.device)
        # [distributed] normalise by the whole step's tokens/sequences summed over ranks
        global_tokens, global_sequences = self.dist.sum([mask.sum().item(), mask.shape[0]])
        total_tokens, total_sequences = loss_normalisers(global_tokens, global_sequences, self.dist.world_size)
        # pi_old: the trainer's own pass when mu > 1; at mu = 1 the engine's sampling log-probs when it returned
        # them (rollout.use_sampler_logprobs), else the detached current log-probs (ratio 1)
        old_logp = self._frozen_logprobs(rollout, reference=False) if train.ppo_epochs > 1 else rollout.sampling_logprobs
        ref_logp = self._frozen_logprobs(rollout, reference=True) if train.beta > 0 else None
        sampled = rollout.sampling_logprobs  # the engine's; epoch 0's own log-probs are compared with them
        trainer_logp = torch.zeros_like(mask) if sampled is not None else None
        sums = {"loss": 0.0, "clipped": 0.0, "kl": 0.0, "entropy": 0.0}
        grad_norm = float("nan")
        skipped = False
        for epoch in range(train.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            epoch_loss = 0.0
            micro_batches = self._micro_batches(rollout)
            with self.logprob_pass.over(model, rollout) as logprobs:  # work shared by the micro-batches ends here
                for index, (rows, width) in enumerate(micro_batches):
                    # [distributed] gradients are all-reduced once, in the last micro-batch's backward
                    with self.dist.backward_sync(model, sync=index == len(micro_batches) - 1):
                        bonus = train.entropy_coef > 0
                        logp, entropy = logprobs(rows, width, with_entropy=epoch == 0 or bonus, entropy_grad=bonus)
                        cut = (rows, slice(0, width))  # the micro-batch's rows, without its padding-only columns
                        old = logp.detach() if old_logp is None else old_logp[cut]
                        token_loss, clipped = algos.clipped_surrogate(
                            logp, old, advantages[cut], train.epsilon_low, train.epsilon_high
                        )
                        if bonus:
                            token_loss = algos.entropy_bonus(token_loss, entropy, train.entropy_coef)
                            entropy = entropy.detach()
                        if ref_logp is not None:
                            kl = algos.kl_k3(logp, ref_logp[cut])
                            token_loss = token_loss + train.beta * kl
                            if epoch == 0:
                                sums["kl"] += (kl.detach() * mask[cut]).sum().item()
                        loss = algos.aggregate_loss(
                            token_loss, mask[cut], train.loss_aggregation, self.config.rollout.max_new_tokens,
                            total_tokens, total_sequences,
                        )
                        self.loss_scale.scaled(loss).backward()
                    epoch_loss += loss.item()
                    if epoch == 0:
                        if trainer_logp is not None:
                            trainer_logp[cut] = logp.detach().to(trainer_logp.dtype)
                        sums["clipped"] += (clipped.float() * mask[cut]).sum().item()
                        sums["entropy"] += (entropy * mask[cut]).sum().item()
            self.loss_scale.unscale(self.parameters)
            grad_norm = self.dist.clip_grad_norm(self.parameters, train.max_grad_norm)  # [distributed]
            if not (math.isfinite(epoch_loss) and math.isfinite(grad_norm)):
                skipped = True
                sums["loss"] = epoch_loss  # the loss of the dropped update (null in the log when not finite)
                self._skip_update(epoch_loss, grad_norm)
                break
            self.loss_scale.step(self.optimizer)  # optimizer.step(), then the scale's growth count
            self.bad_steps = 0
            sums["loss"] += epoch_loss / train.ppo_epochs
        self.optimizer.zero_grad(set_to_none=True)
        tokens = max(mask.sum().item(), 1.0)
        return {
            "loss": sums["loss"], "grad_norm": grad_norm, "clip_fraction": sums["clipped"] / tokens,
            "kl": sums["kl"] / tokens if ref_logp is not None else float("nan"),
            "entropy": sums["entropy"] / tokens, "learning_rate": self.optimizer.param_groups[0]["lr"],
            "update_skipped": int(skipped),
            **(algos.logprob_gap(sampled, trainer_logp, mask) if sampled is not None else {}),  # adapter freshness
        }

    def _skip_update(self, loss: float, grad_norm: float) -> None:
        """Drop the gradients of a non-finite step (weights, optimizer state kept) and count it: the run stops after
        train.max_bad_steps in a row; a float16 overflow (update/loss_scale.py) halves the loss scale, not counted."""
        overflow = self.loss_scale.overflowed(math.isfinite(loss), math.isfinite(grad_norm))
        self.skipped_updates += 1
        self.bad_steps += 0 if overflow else 1
        self.loss_scale.skipped(overflow)
        self.optimizer.zero_grad(set_to_none=True)
        what = f"loss scale halved to {self.loss_scale.scale:g}" if overflow else f"{self.bad_steps} in a row"
        print(f"[fspo_lite] step {self.step_index + 1}: non-finite loss {loss} or grad norm {grad_norm}; "
              f"update skipped ({what})")

    def _stop_if_diverged(self) -> None:
        if self.bad_steps >= self.config.train.max_bad_steps:
            raise TrainingError(
                f"{self.bad_steps} consecutive steps had a non-finite loss or gradient "
                f"(train.max_bad_steps={self.config.train.max_bad_steps}); lower the learning rate or check the data"
            )
