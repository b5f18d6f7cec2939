//! `trainer-cli plan`: the plan a run would train with, its memory breakdown, and with
//! `--what-if` the plans for common GPUs and this CPU from one calibration.

use anyhow::{Result, anyhow};
use headroom_core::events::Event;
use headroom_core::memory::MemoryMeter;
use headroom_core::model::{LayerForms, ModelConfig, VqAutoencoderConfig};
use headroom_core::plan::{self, Calibration, Plan};
use headroom_core::precision::Precision;
use headroom_core::readback::block_on;
use headroom_core::registry::{BuiltIn, WithTask, with_default};
use headroom_core::size::human as gib;
use headroom_core::split::Split;
use headroom_core::train::WeightAverage;
use headroom_core::{BackendKind, Target};

use crate::args::PlanArgs;
use crate::render::mib;
use crate::what_if_calibration;
use headroom_core::plan::cache::Kept;

pub fn run(args: PlanArgs) -> Result<()> {
    crate::set_threads(args.threads)?;
    let name = args
        .model
        .clone()
        .unwrap_or_else(|| VqAutoencoderConfig::NAME.to_string());
    if args.plain_layers {
        anyhow::ensure!(
            name == VqAutoencoderConfig::NAME,
            "--plain-layers compares the default model's layer forms; {name} has none of its own"
        );
        let model = VqAutoencoderConfig {
            forms: LayerForms::Plain,
            ..VqAutoencoderConfig::default()
        };
        return plan_for(args, model);
    }
    struct Plan(PlanArgs);
    impl WithTask for Plan {
        type Output = Result<()>;
        fn run<T: BuiltIn>(self, model: T) -> Result<()> {
            plan_for(self.0, model)
        }
    }
    with_default(&name, Plan(args))?
}

/// `plan` for one model.
fn plan_for<T: BuiltIn>(args: PlanArgs, model: T) -> Result<()> {
    let spec = args.spec()?;
    let model = spec.sized(model)?;
    let resolved = args.backend.resolve_for(T::NAME);
    if let Some(reason) = &resolved.reason
        && !args.json
    {
        println!("{reason}");
    }
    let target = resolved.target();
    let backend = target.backend;
    // Planning here happens before any dataset is loaded: nothing is resident yet.
    let resident = MemoryMeter::new(backend, &target.device()?)
        .sample()
        .allocated_bytes;
    if args.what_if {
        if model.at_length(1).is_some() {
            return crate::what_if_lengths::what_if::<T>(&args, target, resident);
        }
        return what_if(&args, target, &model, resident);
    }
    if let Some(spec) = &args.verify {
        return verify(spec, args.json, target, &model);
    }
    let budget = crate::budget::resolve(&spec, backend, resolved.device.as_ref())?;
    let planning = spec.planning_for(budget.bytes, model.default_batch())?;
    let mut events: Vec<Event> = Vec::new();
    let prepared = if args.no_dry_run {
        let share = plan::RunShare {
            resident_bytes: resident,
            read_ahead: plan::ReadAhead::NONE,
            held_bytes: WeightAverage::bytes(spec.ema, model.parameters()),
        };
        block_on(plan::unchecked(target, &model, &planning, share))?
    } else {
        // As `train` plans: the dataset opened first (a recogniser's recordings too), so
        // what it holds counts.
        let config = spec.train_config(target)?;
        let loader = args.loader.options()?;
        headroom_core::registry::plan_only(config, &planning, &loader, &mut events)?
    };
    let dry_runs: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::DryRun(_)))
        .collect();
    if args.json {
        let out = serde_json::json!({
            "backend": backend,
            "budget_source": budget.source,
            "plan": prepared.plan,
            "breakdown": prepared.breakdown,
            "calibration": prepared.calibration,
            "dry_runs": dry_runs,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("Budget: {} ({})", gib(budget.bytes), budget.source);
    for event in dry_runs {
        if let Event::DryRun(d) = event {
            println!("{}", crate::render::describe_dry_run(d));
        }
    }
    println!("Plan on {backend}: {}", prepared.plan.reason);
    let p = &prepared.plan;
    let batch = match &p.lengths {
        Some(lengths) => crate::render::length_batch_words(p.effective_batch, &lengths.buckets),
        None => crate::render::effective_batch_words(
            p.effective_batch,
            p.micro_batch,
            p.n_patches,
            p.accumulation,
        ),
    };
    println!(
        "{batch}, {}, checkpointing {}",
        p.precision,
        if p.checkpointing { "on" } else { "off" },
    );
    println!("{}", crate::render::describe_breakdown(&prepared.breakdown));
    let (unit, most) = match &prepared.plan.lengths {
        Some(lengths) => (
            "utterances",
            format!(" (every bucket full: at most {})", gib(lengths.most_bytes)),
        ),
        None => ("patches", String::new()),
    };
    println!(
        "Predicted peak {} of {}{most}, {:.0} {unit}/s",
        gib(prepared.plan.predicted_peak_bytes),
        gib(prepared.plan.budget_bytes),
        prepared.plan.predicted_patches_per_s
    );
    Ok(())
}

/// The memory model for the GPU rows: the GPU path's (the cubecl pool's footprint, the GPU
/// forms of the layers), measured on a wgpu adapter where this machine has one (a software
/// one's pool accounts as a GPU's does); else the local figures, said to be an estimate.
fn gpu_calibration<T: BuiltIn>(
    args: &PlanArgs,
    local: Target,
    model: &T,
    calibration: &Calibration,
) -> (Calibration, String, Kept) {
    if !local.backend.is_host() {
        return (
            calibration.clone(),
            format!("measured on {} here", local.backend),
            Kept::Measured,
        );
    }
    let settings = headroom_core::probe::gpus::ProbeSettings {
        allocation_cap: None,
        software_adapters: false,
    };
    // In a child process, as `auto` probes: a driver's complaints stay off the terminal.
    let probe = headroom_core::probe::isolate::probe_machine(
        headroom_core::probe::isolate::TIMEOUT,
        settings,
    );
    let adapter = probe
        .devices
        .into_iter()
        .find(|d| d.backend == headroom_core::BackendKind::Wgpu && d.usable);
    let carried = || {
        (
            calibration.clone(),
            format!(
                "an estimate carried over from {} (no wgpu adapter here to measure a GPU's \
                 memory pool); a GPU's pool rounds allocations its own way, which the dry-run \
                 checks when you train there",
                local.backend
            ),
            Kept::Measured,
        )
    };
    let Some(adapter) = adapter else {
        return carried();
    };
    let target = Target {
        backend: headroom_core::BackendKind::Wgpu,
        device: adapter.target,
    };
    // A software adapter's memory is this machine's RAM, and its free figure says so.
    let room = adapter.free_memory.bytes.map(|free| free / 2);
    let device = format!("{} {}", adapter.name, adapter.api);
    // Nothing kept for this build and machine: what was shipped with the build for these
    // settings, measured on a software adapter such as this one.
    let kept_here = what_if_calibration::is_kept(target, &device, model, room);
    if let (false, false, true, Some(shipped)) = (
        args.recalibrate,
        kept_here,
        adapter.class == headroom_core::probe::DeviceClass::SoftwareAdapter,
        plan::shipped::gpu_calibration(&format!("{model:?}")),
    ) {
        return (
            shipped.calibration,
            format!(
                "measured on wgpu ({}) when this build was made ({}), shipped with it; \
                 --recalibrate measures on this machine's {}",
                shipped.adapter, shipped.measured, adapter.name
            ),
            Kept::Shipped,
        );
    }
    let announce = || {
        if !args.json {
            println!("Calibrating the GPU path on wgpu ({})...", adapter.name);
        }
    };
    match what_if_calibration::kept(args.recalibrate, target, &device, model, room, announce) {
        Ok((measured, kept)) => (
            measured,
            format!(
                "measured on wgpu ({}, {}): the cubecl pool's footprint with Headroom's GPU \
                 layers",
                adapter.name, adapter.api
            ),
            kept,
        ),
        Err(error) => {
            // One line on the terminal (the table says the GPU rows are then an estimate);
            // cubecl's whole chain at debug.
            let text = error.to_string();
            let first = text.lines().next().unwrap_or_default();
            tracing::warn!("calibration on wgpu failed: {first}");
            tracing::debug!(%error, "calibration on wgpu failed");
            carried()
        }
    }
}

/// This machine's free RAM, as the CPU probe reads it.
fn host_free_bytes() -> Option<u64> {
    headroom_core::probe::cpu::probe()
        .into_iter()
        .find(|d| d.backend.is_host())
        .and_then(|d| d.free_memory.bytes)
}

/// One row of the what-if table.
#[derive(serde::Serialize)]
struct Row {
    device: String,
    budget_bytes: u64,
    plan: Result<Plan, String>,
}

fn what_if<T: BuiltIn>(args: &PlanArgs, target: Target, model: &T, resident: u64) -> Result<()> {
    let spec = args.spec()?;
    let f = spec.memory.fraction;
    // Each device's budget, resolved before calibrating so a bad fraction fails fast.
    let targets = crate::budget::what_if_devices(&spec, resident)?;
    let backend = target.backend;
    let room = backend
        .is_host()
        .then(host_free_bytes)
        .flatten()
        .map(|free| free / 2);
    let here = format!("{} threads", rayon::current_num_threads());
    let (calibration, kept_here) =
        what_if_calibration::kept(args.recalibrate, target, &here, model, room, || {})?;
    let (gpu_calibration, gpu_source, kept_gpu) =
        gpu_calibration(args, target, model, &calibration);
    // The CPU row plans training on this CPU, so it is measured on one, also where the
    // what-if runs on a GPU (whose calibration, f16 included, says nothing of a CPU's).
    let cpu = Target::from(BackendKind::Flex);
    let (cpu_calibration, kept_cpu) = if backend.is_host() {
        (calibration.clone(), kept_here)
    } else {
        let room = host_free_bytes().map(|free| free / 2);
        what_if_calibration::kept(args.recalibrate, cpu, &here, model, room, || {})?
    };
    let cpu_backend = if backend.is_host() {
        backend
    } else {
        BackendKind::Flex
    };
    let planning = spec.planning_for(0, model.default_batch())?;
    let rows: Vec<Row> = targets
        .into_iter()
        .map(|d| {
            let calibration = if d.gpu {
                &gpu_calibration
            } else {
                &cpu_calibration
            };
            (d.name, d.budget_bytes, d.resident_bytes, calibration)
        })
        .map(|(device, budget_bytes, resident_bytes, calibration)| {
            let asked = plan::Planning {
                budget_bytes,
                ..planning
            };
            let share = plan::RunShare {
                resident_bytes,
                read_ahead: plan::ReadAhead::NONE,
                held_bytes: WeightAverage::bytes(spec.ema, model.parameters()),
            };
            let plan = plan::from_calibration(model, calibration, &asked, share)
                .map(|(plan, _)| plan)
                .map_err(|e| crate::flags::error_words(&e.into()));
            Row {
                device,
                budget_bytes,
                plan,
            }
        })
        .collect();
    if args.json {
        let out = serde_json::json!({
            "calibrated_on": backend,
            "calibration": calibration,
            "gpu_memory": gpu_source,
            "gpu_calibration": gpu_calibration,
            "cpu_calibration": cpu_calibration,
            "calibrations": crate::kept::name(&[kept_here, kept_gpu, kept_cpu]),
            "model_settings": format!("{model:?}"),
            "effective_batch": planning.effective_batch,
            "rows": rows,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "What-if for an effective batch of {} patches (budget = memory x {f}):",
        planning.effective_batch
    );
    println!(
        "{:<28} {:>10}  {:<62} {:>12}",
        "device", "budget", "plan", "predicted"
    );
    for row in &rows {
        let (plan, predicted) = match &row.plan {
            // A task of several phases: each phase's own cut of the effective batch.
            Ok(p) if !p.phases.is_empty() => (
                p.phases
                    .iter()
                    .map(|phase| {
                        format!(
                            "{} {} x {}",
                            phase.phase, phase.micro_batch, phase.accumulation
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                gib(p.predicted_peak_bytes),
            ),
            Ok(p) => (p.split_words(), gib(p.predicted_peak_bytes)),
            Err(e) => (format!("does not fit: {e}"), String::new()),
        };
        println!(
            "{:<28} {:>10}  {:<62} {:>12}",
            row.device,
            gib(row.budget_bytes),
            plan,
            predicted
        );
    }
    println!("GPU rows: {gpu_source}. The CPU row: measured on {cpu_backend} here.");
    println!("{}", crate::kept::words(&[kept_here, kept_gpu, kept_cpu]));
    Ok(())
}

/// One `--verify` configuration: spectrograms x patches, then `c` for checkpointing or `h`
/// for the device's half precision.
#[derive(Debug, Clone, Copy, PartialEq)]
struct VerifyConfig {
    micro_batch: usize,
    n_patches: usize,
    checkpointing: bool,
    half: bool,
}

fn parse_configs(spec: &str) -> Result<Vec<VerifyConfig>> {
    spec.split([' ', ','])
        .filter(|t| !t.is_empty())
        .map(|t| {
            let body = t.trim_end_matches(['c', 'h']);
            let flags = &t[body.len()..];
            let parsed = body
                .split_once('x')
                .and_then(|(m, n)| Some((m.parse().ok()?, n.parse().ok()?)))
                .filter(|&(m, n): &(usize, usize)| m > 0 && n > 0);
            let (micro_batch, n_patches) = parsed.ok_or_else(|| {
                anyhow!(
                    "cannot read {t:?} in --verify; write spectrograms x patches, e.g. 8x4, 8x4c (checkpointing) or 8x4h (half precision)"
                )
            })?;
            Ok(VerifyConfig {
                micro_batch,
                n_patches,
                checkpointing: flags.contains('c'),
                half: flags.contains('h'),
            })
        })
        .collect()
}

#[derive(serde::Serialize)]
struct Verified {
    micro_batch: usize,
    n_patches: usize,
    checkpointing: bool,
    precision: Precision,
    predicted_bytes: u64,
    measured_bytes: u64,
    /// (predicted - measured) / measured: positive errs high.
    error: f64,
}

/// Calibrates once, then measures a real step at each configuration.
fn verify<T: BuiltIn>(spec: &str, json: bool, target: Target, model: &T) -> Result<()> {
    let backend = target.backend;
    let configs = parse_configs(spec)?;
    let calibration = block_on(plan::calibrate(target, model))?;
    let mut rows = Vec::with_capacity(configs.len());
    let half = calibration.memory.half.as_ref().map(|h| h.precision);
    for config in configs {
        let VerifyConfig {
            micro_batch,
            n_patches,
            checkpointing,
            ..
        } = config;
        let precision = match (config.half, half) {
            (false, _) => Precision::F32,
            (true, Some(p)) => p,
            (true, None) => anyhow::bail!("{backend} has no half precision to verify"),
        };
        let patches = Split::even(micro_batch, n_patches, 1).patches_per_micro_batch();
        let predicted = calibration
            .memory
            .predict(patches, precision, checkpointing)
            .ok_or_else(|| {
                anyhow!(
                    "{precision} with checkpointing was not calibrated; verify one or the other"
                )
            })?;
        let measured = block_on(plan::measure_step(
            target,
            model,
            patches,
            precision,
            checkpointing,
        ))?
        .peak_bytes;
        let row = Verified {
            micro_batch,
            n_patches,
            checkpointing,
            precision,
            predicted_bytes: predicted,
            measured_bytes: measured,
            error: (predicted as f64 - measured as f64) / measured.max(1) as f64,
        };
        if !json {
            println!(
                "{:>4} x {:>2} patches, {}{:<15} predicted {:>10} measured {:>10} error {:+.1}%",
                row.micro_batch,
                row.n_patches,
                precision,
                if checkpointing { ", checkpointing" } else { "" },
                mib(row.predicted_bytes),
                mib(row.measured_bytes),
                row.error * 100.0
            );
        }
        rows.push(row);
    }
    let mut errors: Vec<f64> = rows.iter().map(|r| r.error.abs()).collect();
    errors.sort_by(f64::total_cmp);
    let median = errors.get(errors.len() / 2).copied().unwrap_or(f64::NAN);
    let worst = errors.last().copied().unwrap_or(f64::NAN);
    let most_under = rows
        .iter()
        .map(|r| r.error)
        .fold(f64::INFINITY, f64::min)
        .min(0.0);
    if json {
        let out = serde_json::json!({
            "backend": backend,
            "calibration": calibration,
            "rows": rows,
            "median_abs_error": median,
            "worst_abs_error": worst,
            "most_under": most_under,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "{} configurations on {backend}: median |error| {:.1}%, worst {:.1}%, most under {:.1}%",
            rows.len(),
            median * 100.0,
            worst * 100.0,
            (-most_under * 100.0).max(0.0)
        );
    }
    Ok(())
}
