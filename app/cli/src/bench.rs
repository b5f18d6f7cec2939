//! `trainer-cli bench`.

use anyhow::Result;
use headroom_core::bench::{self, BenchConfig};
use headroom_core::model::{ModelConfig, VqAutoencoderConfig};
use headroom_core::registry::{BuiltIn, WithTask, with_saved};
use headroom_core::spec::RunSpec;

use crate::args::{Backend, BenchArgs};
use crate::render::mib;

pub fn run(args: BenchArgs) -> Result<()> {
    let threads = crate::set_threads(args.threads)?;
    if let Some(path) = &args.report {
        return crate::report::run(&args, path, threads);
    }
    let resolved = args
        .backend
        .unwrap_or(Backend::Flex)
        .resolve_for(args.model.as_deref().unwrap_or(VqAutoencoderConfig::NAME));
    if let Some(reason) = &resolved.reason {
        // On stderr: --json keeps stdout to one line.
        eprintln!("{reason}");
    }
    let config = BenchConfig {
        backend: resolved.kind,
        device: resolved.target().device,
        checkpointing: args.use_gradient_checkpointing,
        precision: args.precision,
        micro_batch: args.batch_size,
        n_patches: args.n_patches,
        accumulation: args.gradient_accumulation_steps,
        steps: args.steps.unwrap_or(20),
        warmup: args.warmup.unwrap_or(3),
        seed: args.seed,
        plain_layers: args.plain_layers,
        frames: args.frames,
    };
    anyhow::ensure!(
        config.micro_batch > 0
            && config.n_patches > 0
            && config.accumulation > 0
            && config.steps > 0
            && config.frames != Some(0),
        "--batch-size, --n-patches, --gradient-accumulation-steps, --steps and --frames must \
         be at least 1"
    );
    // The model as a run of it is configured (the recogniser's size and the classifier's
    // network applied, refused for another model), then timed.
    let model = args.model.as_deref().unwrap_or(VqAutoencoderConfig::NAME);
    let spec = RunSpec {
        model: Some(model.to_string()),
        asr_size: args.asr_size.map(Into::into),
        classifier: headroom_core::spec::ClassifierSpec {
            arch: args.classifier.map(Into::into),
            ..Default::default()
        },
        sashimi: args.sashimi.spec(),
        ..RunSpec::default()
    };
    let run = spec.train_config(resolved.target())?;
    let result = if model == VqAutoencoderConfig::NAME {
        // Before the profile and the trace, which would not read it.
        if config.frames.is_some() {
            Err(bench::BenchError::FixedLength {
                model: model.to_string(),
            })?;
        }
        if args.profile {
            return print_profile(&bench::profile(&config, threads)?, args.json);
        }
        if args.memory_trace {
            return print_trace(&bench::memory_trace(&config)?, args.json);
        }
        bench::run(&config, threads)?
    } else {
        anyhow::ensure!(
            !(args.profile || args.memory_trace || args.plain_layers),
            "--profile, --memory-trace and --plain-layers look inside the default model's \
             layers; {model} is timed as a whole"
        );
        struct Time<'a>(&'a BenchConfig, usize);
        impl WithTask for Time<'_> {
            type Output = Result<bench::BenchResult, bench::BenchError>;
            fn run<T: BuiltIn>(self, model: T) -> Self::Output {
                bench::run_model(&model, self.0, self.1)
            }
        }
        with_saved(&run.model, Time(&config, threads))??
    };
    if args.json {
        println!("{}", serde_json::to_string(&result)?);
    } else {
        // A device pool's peak is what it reserved; say what was in use when that differs.
        let in_use = if result.mem_in_use_peak_bytes == result.mem_peak_bytes {
            String::new()
        } else {
            format!(
                " (reserved; in use at most {})",
                mib(result.mem_in_use_peak_bytes)
            )
        };
        let (rate, micro_batch) = match result.frames {
            Some(frames) => (
                "examples/s",
                format!("{} examples of {frames} frames", result.batch),
            ),
            None => (
                "patches/s",
                format!("{} x {} patches", result.batch, result.patches),
            ),
        };
        let launches = result
            .launches_per_step
            .map(|n| format!(", {n:.0} kernel launches a step"))
            .unwrap_or_default();
        println!(
            "{} ({} threads): {:.1} {rate}, median step {:.1} ms, peak memory {}{in_use}, micro-batch {micro_batch} x {} accumulation{launches}",
            result.backend,
            result.threads,
            result.patches_per_s,
            result.step_ms_median,
            mib(result.mem_peak_bytes),
            result.accum
        );
    }
    Ok(())
}

fn print_profile(profile: &bench::Profile, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(profile)?);
        return Ok(());
    }
    println!(
        "{} ({} threads), {} patches a step: median step {:.1} ms",
        profile.backend, profile.threads, profile.patches, profile.step_ms
    );
    println!("{:<10} {:<26} {:>9} {:>7}", "stage", "op", "ms", "share");
    for op in &profile.ops {
        println!(
            "{:<10} {:<26} {:>9.2} {:>6.1}%",
            op.stage,
            op.op,
            op.ms,
            100.0 * op.ms / profile.step_ms
        );
    }
    Ok(())
}

fn print_trace(trace: &bench::MemoryTrace, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(trace)?);
        return Ok(());
    }
    let device = trace.source == headroom_core::memory::MemorySource::DevicePool;
    println!(
        "{} ({} forms), one step of {} patches, memory after each stage",
        trace.backend, trace.forms, trace.patches
    );
    let last = if device {
        "reserved"
    } else {
        "peak since previous"
    };
    println!("{:<10} {:>10} {:>20}", "stage", "in use", last);
    for s in &trace.stages {
        let other = if device {
            s.reserved_bytes.unwrap_or(0)
        } else {
            s.peak_bytes
        };
        println!(
            "{:<10} {:>10} {:>20}",
            s.stage,
            mib(s.in_use_bytes),
            mib(other)
        );
    }
    Ok(())
}
