//! `trainer-cli train`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use headroom_core::budget::Budget;
use headroom_core::events::Event;
use headroom_core::model::{ModelConfig, VqAutoencoderConfig};
use headroom_core::{BackendKind, RunLength, RunOptions, Target, TrainConfig, Trainer};

use crate::args::{Backend, Resolved, TrainArgs};
use crate::render::ProgressRenderer;
use crate::request::{dataset_source, planning};

fn config_from(args: &TrainArgs, target: Target) -> Result<TrainConfig> {
    let mut c = TrainConfig {
        backend: target.backend,
        device: target.device,
        ..TrainConfig::default()
    };
    c.dataset = dataset_source(
        &args.data,
        args.machine_ids,
        args.train_clips_per_id,
        c.dataset,
    );
    // First, so that the flags below override the model's strides.
    if let Some(name) = &args.model {
        set_model(&mut c, name, args.data.features.n_mels)?;
    }
    let set = |slot: &mut usize, v: Option<usize>| {
        if let Some(v) = v {
            *slot = v;
        }
    };
    set(&mut c.micro_batch, args.split.batch_size);
    set(&mut c.n_patches, args.split.n_patches);
    set(&mut c.stride, args.stride);
    set(&mut c.accumulation, args.split.gradient_accumulation_steps);
    // With planning these are constraints the plan keeps; with --no-plan, the run's values.
    c.checkpointing = args.memory.checkpointing().unwrap_or(false);
    c.precision = args.memory.precision.unwrap_or_default();
    if let Some(p) = args.placement {
        c.placement = p.into();
    }
    if let Some(l) = length_from(args) {
        c.length = l;
    }
    if let Some(lr) = args.lr {
        c.lr = lr;
    }
    if let Some(clip) = args.clip_norm {
        c.clip_norm = Some(clip);
    }
    if let Some(seed) = args.seed {
        c.seed = seed;
    }
    if let Some(n) = args.checkpoint_every {
        c.checkpoint_every = n;
    }
    if let Some(n) = args.validate_every {
        c.validate_every = n;
    }
    if let Some(n) = args.empty_cache_every {
        c.empty_cache_every = n;
    }
    Ok(c)
}

/// Trains the built-in model `name`: its features' mel bands, unless --n-mels asked for
/// others, which the model then cannot read.
fn set_model(config: &mut TrainConfig, name: &str, n_mels: Option<usize>) -> Result<()> {
    config.set_built_in_model(name)?;
    let mels = config.dataset.mels();
    if let Some(asked) = n_mels {
        anyhow::ensure!(
            asked == mels,
            "--n-mels {asked} does not fit --model {name}, which reads {mels} mel bands; \
             leave --n-mels out"
        );
    }
    Ok(())
}

fn length_from(args: &TrainArgs) -> Option<RunLength> {
    args.steps
        .map(RunLength::Steps)
        .or(args.epochs.map(RunLength::Epochs))
}

/// Checkpoints go where the user says, else back into the run being resumed, else runs/latest.
fn out_dir(args: &TrainArgs) -> PathBuf {
    if let Some(out) = &args.out {
        return out.clone();
    }
    match &args.resume {
        // A checkpoint directory (RUN/checkpoints/step-N) belongs to RUN.
        Some(dir) if dir.join("state.json").is_file() => dir
            .parent()
            .and_then(Path::parent)
            .map_or_else(|| dir.clone(), Path::to_path_buf),
        Some(dir) => dir.clone(),
        None => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            PathBuf::from(format!("runs/run-{now}"))
        }
    }
}

pub fn run(args: TrainArgs) -> Result<()> {
    crate::set_threads(args.threads)?;
    let features = &args.data.features;
    anyhow::ensure!(
        args.data.data_root.is_some()
            || (features.n_mels.is_none() && features.sample_rate.is_none() && !features.resample),
        "--n-mels, --sample-rate and --resample describe the recordings under --data-root; \
         the synthetic dataset has its own"
    );
    anyhow::ensure!(
        args.resume.is_none() || args.data.data_root.is_none(),
        "--resume continues a run on the dataset it started with; --data-root cannot change it"
    );
    let mut options = RunOptions {
        out_dir: Some(out_dir(&args)),
        stop_after: args.stop_after,
        loader: args.loader.options()?,
        ..RunOptions::default()
    };
    let mut renderer = (!args.json).then(ProgressRenderer::new);
    let mut emit = |event: Event| match &mut renderer {
        Some(r) => r.handle(&event),
        None => println!(
            "{}",
            serde_json::to_string(&event).expect("events always serialise")
        ),
    };
    // Auto times the model --model names (else the default), the one a new run trains.
    let model = args.model.as_deref().unwrap_or(VqAutoencoderConfig::NAME);
    // A resumed run keeps its backend unless one is named.
    let resolved: Option<Resolved> = match (args.backend, &args.device) {
        (Some(backend), Some(device)) if !device.accepts(backend) => anyhow::bail!(
            "--backend {} and --device {} disagree; give one of them",
            BackendKind::from(backend),
            device.label()
        ),
        (_, Some(device)) if device.selector.is_some() => Some(device.resolve()?),
        (Some(backend), _) => Some(backend.resolve_for(model)),
        (None, Some(device)) => Some(device.backend().resolve_for(model)),
        (None, None) if args.resume.is_some() => None,
        (None, None) => Some(Backend::Auto.resolve_for(model)),
    };
    if let Some(Resolved {
        kind,
        reason: Some(reason),
        ..
    }) = &resolved
    {
        emit(Event::BackendChoice {
            backend: kind.name().to_string(),
            reason: reason.clone(),
        });
    }
    let target = resolved.as_ref().map(Resolved::target);
    let saved = match &args.resume {
        Some(dir) => Some(
            headroom_core::checkpoint::read_state(dir)
                .with_context(|| format!("cannot resume from {}", dir.display()))?,
        ),
        None => None,
    };
    let resume = match &saved {
        Some(state) => Some(crate::resume::changes(&args, &state.config, target)?),
        None => None,
    };
    let budget_backend = match (target, &saved) {
        (Some(t), _) => t.backend,
        (None, Some(state)) => state.config.backend,
        (None, None) => BackendKind::Flex,
    };
    let budget = crate::budget::resolve(
        &args.memory,
        budget_backend,
        resolved.as_ref().and_then(|r| r.device.as_ref()),
    )?;
    tracing::info!(bytes = budget.bytes, source = %budget.source, "memory budget");
    options.budget = Some(Budget::new(budget.bytes));
    if args.no_plan {
        anyhow::ensure!(
            args.memory.effective_batch.is_none(),
            "--effective-batch needs the planner to split it; with --no-plan give \
             --batch-size, --n-patches and --gradient-accumulation-steps"
        );
    } else {
        // A resumed run keeps its own effective batch and patch count; these are unused.
        let defaults = headroom_core::model::info_of(model)?.default_batch;
        options.planning = Some(planning(&args.memory, &args.split, budget.bytes, defaults)?);
    }
    emit(Event::Budget {
        bytes: budget.bytes,
        source: budget.source,
    });
    let mut trainer = match (&args.resume, resume, &saved) {
        (Some(dir), Some(resume), Some(state)) => {
            emit(Event::Resumed {
                from: dir.display().to_string(),
                step: state.step,
                changes: resume.said,
            });
            Trainer::resume(dir, &resume.changes, options)
                .with_context(|| format!("cannot resume from {}", dir.display()))?
        }
        _ => Trainer::new(
            config_from(&args, target.unwrap_or(BackendKind::Flex.into()))?,
            options,
        )
        .context("cannot start training")?,
    };

    trainer.run(&mut emit)?;
    if !args.no_eval {
        let evaluation = trainer.evaluate().context("cannot score the test split")?;
        emit(Event::Evaluation(evaluation.report));
    }
    Ok(())
}
