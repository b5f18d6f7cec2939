//! `train --resume` with flags: what the run may change between sessions is applied and said
//! in a line; what would make it another run (what it learns from, the step's size, the
//! learning rate, the seed) is refused with the flags named.

use anyhow::Result;
use headroom_core::resume::{Identity, Refusal, Saved, Setting};
use headroom_core::train::ResumeChanges;
use headroom_core::{RunLength, Target, TrainConfig};
use headroom_datasets::PatchPlacement;

use crate::args::TrainArgs;

/// The changes to apply, and each in words for the user.
#[derive(Debug, Default)]
pub struct Resume {
    pub changes: ResumeChanges,
    pub said: Vec<String>,
}

fn length_words(length: RunLength) -> String {
    match length {
        RunLength::Steps(n) => format!("--steps {n}"),
        RunLength::Epochs(n) => format!("--epochs {n}"),
    }
}

/// A refused setting in the words of its flag.
fn refusal_words(refusal: &Refusal, args: &TrainArgs) -> String {
    let flag = match refusal.setting {
        Setting::MicroBatchTimesAccumulation => {
            let (mb, acc) = (
                args.split.batch_size.unwrap_or_default(),
                args.split.gradient_accumulation_steps.unwrap_or_default(),
            );
            return format!(
                "--batch-size {mb} with --gradient-accumulation-steps {acc} (an effective batch \
                 of {} patches; the run's is {})",
                refusal.given,
                match &refusal.saved {
                    Saved::Value(v) => v.as_str(),
                    Saved::Recordings(_) => "another",
                }
            );
        }
        other => crate::flags::flag(other),
    };
    match &refusal.saved {
        Saved::Value(was) => format!("{flag} {} (the run has {was})", refusal.given),
        Saved::Recordings(root) => format!(
            "{flag} {} (the run reads the recordings under {})",
            refusal.given,
            root.display()
        ),
    }
}

/// The flags given with `--resume` against the saved run's configuration.
pub fn changes(args: &TrainArgs, saved: &TrainConfig, target: Option<Target>) -> Result<Resume> {
    let identity = Identity {
        model: args.model.clone(),
        lr: args.lr,
        clip_norm: args.clip_norm,
        seed: args.seed,
        stride: args.stride,
        n_patches: args.split.n_patches,
        placement: args.placement.map(PatchPlacement::from),
        effective_batch: args.memory.effective_batch,
        micro_batch: args.split.batch_size,
        accumulation: args.split.gradient_accumulation_steps,
        machine_ids: args.machine_ids,
        train_clips_per_id: args.train_clips_per_id,
        test_clips_per_id: None,
    };
    let mut refused: Vec<String> = identity
        .refusals(saved)
        .into_iter()
        .map(|refusal| refusal_words(&refusal, args))
        .collect();
    if args.no_plan {
        // Without a plan the saved split is the run's: there is nothing to apply these to.
        for (flag, given) in [
            ("--batch-size", args.split.batch_size.is_some()),
            (
                "--gradient-accumulation-steps",
                args.split.gradient_accumulation_steps.is_some(),
            ),
            ("--precision", args.memory.precision.is_some()),
            (
                "--use-gradient-checkpointing/--no-gradient-checkpointing",
                args.memory.checkpointing().is_some(),
            ),
        ] {
            if given {
                refused.push(format!(
                    "{flag} with --no-plan (leave out --no-plan and the planner splits the \
                     resumed run's steps with it)"
                ));
            }
        }
    }
    if !refused.is_empty() {
        anyhow::bail!(
            "--resume continues the saved run, which these flags would change: {}; leave them \
             out to continue it, or start a new run with --out",
            refused.join(", ")
        );
    }

    let mut resume = Resume::default();
    let mut applied = |said: String| resume.said.push(said);
    if let Some(target) = target
        && target != saved.target()
    {
        resume.changes.target = Some(target);
        applied(format!(
            "backend {} (was {})",
            target.backend,
            saved.target().backend
        ));
    }
    let length = args
        .steps
        .map(RunLength::Steps)
        .or(args.epochs.map(RunLength::Epochs));
    if let Some(length) = length
        && length != saved.length
    {
        resume.changes.length = Some(length);
        applied(format!(
            "{} (was {})",
            length_words(length),
            length_words(saved.length)
        ));
    }
    for (flag, given, was, slot) in [
        (
            "--checkpoint-every",
            args.checkpoint_every,
            saved.checkpoint_every,
            &mut resume.changes.checkpoint_every,
        ),
        (
            "--validate-every",
            args.validate_every,
            saved.validate_every,
            &mut resume.changes.validate_every,
        ),
        (
            "--empty-cache-every",
            args.empty_cache_every,
            saved.empty_cache_every,
            &mut resume.changes.empty_cache_every,
        ),
    ] {
        if let Some(given) = given
            && given != was
        {
            *slot = Some(given);
            resume.said.push(format!("{flag} {given} (was {was})"));
        }
    }
    let split: Vec<String> = [
        args.split.batch_size.map(|v| format!("--batch-size {v}")),
        args.split
            .gradient_accumulation_steps
            .map(|v| format!("--gradient-accumulation-steps {v}")),
        args.memory.precision.map(|p| format!("--precision {p}")),
        args.memory.checkpointing().map(|on| {
            if on {
                "--use-gradient-checkpointing".to_string()
            } else {
                "--no-gradient-checkpointing".to_string()
            }
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !split.is_empty() {
        resume.said.push(format!(
            "{} for the plan (the effective batch stays {} patches)",
            split.join(" "),
            saved.effective_batch()
        ));
    }
    Ok(resume)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(flags: &[&str]) -> TrainArgs {
        let mut all = vec!["trainer-cli", "train", "--resume", "runs/x"];
        all.extend_from_slice(flags);
        match crate::args::Cli::parse_from(all).command {
            Some(crate::args::Command::Train(a)) => *a,
            other => panic!("not a train command: {other:?}"),
        }
    }

    #[test]
    fn the_saved_runs_values_given_again_change_nothing() {
        let saved = TrainConfig::default();
        let lr = saved.lr.to_string();
        let seed = saved.seed.to_string();
        let resume = changes(&args(&["--lr", &lr, "--seed", &seed]), &saved, None).unwrap();
        assert!(resume.said.is_empty(), "{:?}", resume.said);
        assert_eq!(resume.changes, ResumeChanges::default());
    }

    #[test]
    fn safe_changes_are_applied_and_said() {
        let saved = TrainConfig::default();
        let resume = changes(
            &args(&[
                "--steps",
                "999",
                "--checkpoint-every",
                "7",
                "--batch-size",
                "2",
            ]),
            &saved,
            None,
        )
        .unwrap();
        assert_eq!(resume.changes.length, Some(RunLength::Steps(999)));
        assert_eq!(resume.changes.checkpoint_every, Some(7));
        let said = resume.said.join("; ");
        assert!(said.contains("--steps 999 (was"), "{said}");
        assert!(said.contains("--checkpoint-every 7"), "{said}");
        assert!(said.contains("--batch-size 2 for the plan"), "{said}");
    }

    #[test]
    fn changes_to_what_the_run_learns_are_refused_by_name() {
        let saved = TrainConfig::default();
        let err = changes(
            &args(&["--lr", "0.5", "--seed", "12345", "--steps", "999"]),
            &saved,
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("--lr 0.5"), "{err}");
        assert!(err.contains("--seed 12345"), "{err}");
        assert!(
            !err.contains("--steps"),
            "a safe flag is not refused: {err}"
        );
        let err = changes(&args(&["--no-plan", "--batch-size", "2"]), &saved, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--batch-size with --no-plan"), "{err}");
    }
}
