//! `trainer-cli train`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use headroom_core::budget::Budget;
use headroom_core::events::Event;
use headroom_core::{BackendKind, RunOptions, Trainer};

use crate::args::{Backend, DeviceArg, Resolved, TrainArgs};
use crate::flags::Flags;
use crate::render::ProgressRenderer;

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
        None => PathBuf::from(format!("runs/run-{}", now())),
    }
}

/// Seconds since 1970, UTC.
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn run(args: TrainArgs) -> Result<()> {
    crate::set_threads(args.threads)?;
    let request = args.request()?;
    let spec = &request.spec;
    if args.resume.is_none() {
        // Before auto's quick benchmark: a setting of the other kind of dataset fails at once.
        spec.dataset()?;
    }
    let out = out_dir(&args);
    let mut options = RunOptions {
        out_dir: Some(out.clone()),
        stop_after: args.stop_after,
        loader: args.loader.options()?,
        // A plan by length packs by the timings the first run here measured, so that runs
        // of one seed compute alike (docs/PLANNER.md, "Packing a step").
        timings: headroom_core::plan::cache::CalibrationCache::user(),
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
    let model = spec.model_name();
    // Where the flags say, else the run file (--backend auto is no backend in the spec).
    let backend = args.backend.or(spec.backend.map(Backend::from));
    let device = match &spec.device {
        Some(device) => Some(
            device
                .parse::<DeviceArg>()
                .map_err(|words| anyhow::anyhow!("--device: {words}"))?,
        ),
        None => None,
    };
    // A resumed run keeps its backend unless one is named.
    let resolved: Option<Resolved> = match (backend, &device) {
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
    let resumed = match &saved {
        Some(state) => Some(spec.resume(&state.config, target)?),
        None => None,
    };
    let budget_backend = match (target, &saved) {
        (Some(t), _) => t.backend,
        (None, Some(state)) => state.config.backend,
        (None, None) => BackendKind::Flex,
    };
    let budget = crate::budget::resolve(
        spec,
        budget_backend,
        resolved.as_ref().and_then(|r| r.device.as_ref()),
    )?;
    tracing::info!(bytes = budget.bytes, source = %budget.source, "memory budget");
    options.budget = Some(Budget::new(budget.bytes));
    // A resumed run keeps its own effective batch and patch count over the request's.
    options.planning = spec.planning(budget.bytes)?;
    emit(Event::Budget {
        bytes: budget.bytes,
        source: budget.source,
    });
    let mut trainer = match (&args.resume, resumed, &saved) {
        (Some(dir), Some(resumed), Some(state)) => {
            emit(Event::Resumed {
                from: dir.display().to_string(),
                step: state.step,
                changes: resumed.said(&Flags),
            });
            Trainer::resume(dir, &resumed.changes, options)
                .with_context(|| format!("cannot resume from {}", dir.display()))?
        }
        _ => {
            let config = spec.train_config(target.unwrap_or(BackendKind::Flex.into()))?;
            let trainer = Trainer::new(config.clone(), options).context("cannot start training")?;
            // The run's settings as it trains, for `--config` to give back.
            let text = crate::run_file::text(&spec.resolved(&config), now())?;
            let path = crate::run_file::write(&out, &text)?;
            emit(Event::RunFile {
                path: path.display().to_string(),
                config: request.config.as_ref().map(|c| c.display().to_string()),
                overridden: request.overridden.clone(),
            });
            trainer
        }
    };

    trainer.run(&mut emit)?;
    if !args.no_eval {
        let evaluation = trainer.evaluate().context("cannot score the test split")?;
        emit(evaluation.event());
    }
    Ok(())
}
