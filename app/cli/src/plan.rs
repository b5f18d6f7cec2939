//! `trainer-cli plan`: the plan a run would train with, its memory breakdown, and with
//! `--what-if` the plans for common GPUs and this CPU from one calibration.

use anyhow::{Result, anyhow};
use headroom_core::Target;
use headroom_core::events::Event;
use headroom_core::memory::MemoryMeter;
use headroom_core::memory::human as gib;
use headroom_core::model::{LayerForms, VqAutoencoderConfig};
use headroom_core::plan::{self, Breakdown, Calibration, Plan, devices};
use headroom_core::probe::Precision;

use crate::args::PlanArgs;
use crate::render::mib;

pub fn run(args: PlanArgs) -> Result<()> {
    crate::set_threads(args.threads)?;
    let resolved = args.backend.resolve();
    if let Some(reason) = &resolved.reason
        && !args.json
    {
        println!("{reason}");
    }
    let target = resolved.target();
    let backend = target.backend;
    let model = VqAutoencoderConfig {
        forms: if args.plain_layers {
            LayerForms::Plain
        } else {
            LayerForms::Auto
        },
        ..VqAutoencoderConfig::default()
    };
    // Planning here happens before any dataset is loaded: nothing is resident yet.
    let resident = MemoryMeter::new(backend, &target.device()?)
        .sample()
        .allocated_bytes;
    if args.what_if {
        return what_if(&args, target, &model, resident);
    }
    if let Some(spec) = &args.verify {
        return verify(spec, args.json, target, &model);
    }
    let budget = crate::budget::resolve(&args.memory, backend, resolved.device.as_ref())?;
    let planning = crate::train::planning(&args.memory, &args.split, budget.bytes)?;
    let mut events: Vec<Event> = Vec::new();
    let share = plan::RunShare {
        resident_bytes: resident,
        read_ahead: plan::ReadAhead::NONE,
    };
    let prepared = if args.no_dry_run {
        plan::unchecked(target, &model, &planning, share)?
    } else {
        plan::prepare(target, &model, &planning, share, &mut events)?
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
    println!(
        "{}, {}, checkpointing {}",
        crate::render::effective_batch_words(
            p.effective_batch,
            p.micro_batch,
            p.n_patches,
            p.accumulation
        ),
        p.precision,
        if p.checkpointing { "on" } else { "off" },
    );
    println!("{}", describe_breakdown(&prepared.breakdown));
    println!(
        "Predicted peak {} of {}, {:.0} patches/s",
        gib(prepared.plan.predicted_peak_bytes),
        gib(prepared.plan.budget_bytes),
        prepared.plan.predicted_patches_per_s
    );
    Ok(())
}

pub fn describe_breakdown(b: &Breakdown) -> String {
    format!(
        "Memory: parameters {} | gradients {} | optimizer {} | activations {} | data {} | overhead {} | resident {} | free {}",
        mib(b.parameters),
        mib(b.gradients),
        mib(b.optimizer),
        mib(b.activations),
        mib(b.data),
        mib(b.overhead),
        mib(b.resident),
        mib(b.free),
    )
}

/// One row of the what-if table.
#[derive(serde::Serialize)]
struct Row {
    device: String,
    budget_bytes: u64,
    plan: Result<Plan, String>,
}

fn what_if(
    args: &PlanArgs,
    target: Target,
    model: &VqAutoencoderConfig,
    resident: u64,
) -> Result<()> {
    let f = args.memory.memory_fraction;
    anyhow::ensure!(
        f > 0.0 && f <= 1.0,
        "--memory-fraction must be above 0 and at most 1 (got {f})"
    );
    let backend = target.backend;
    let calibration: Calibration = plan::calibrate(target, model)?;
    let planning = crate::train::planning(&args.memory, &args.split, 0)?;
    let cpu = headroom_core::probe::cpu::probe()
        .into_iter()
        .find(|d| d.backend.is_host())
        .and_then(|d| d.free_memory.bytes)
        .ok_or_else(|| anyhow!("the CPU probe did not report free RAM"))?;
    let mut targets: Vec<(String, u64, u64)> = devices::DEVICES
        .iter()
        .map(|d| (d.label.to_string(), (d.memory_bytes as f64 * f) as u64, 0))
        .collect();
    targets.push((
        format!("this CPU ({} RAM free)", gib(cpu)),
        (cpu as f64 * f) as u64,
        resident,
    ));
    let rows: Vec<Row> = targets
        .into_iter()
        .map(|(device, budget_bytes, resident_bytes)| {
            let request = plan::Planning {
                budget_bytes,
                ..planning
            }
            .request(resident_bytes, plan::ReadAhead::NONE);
            let plan = plan::search(&calibration.memory, &calibration.speed, &request)
                .map_err(|e| e.to_string());
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
    println!(
        "Memory per patch was measured on {backend} \
         on this machine; a GPU's memory pool adds its own rounding, which the dry-run step \
         checks when training there."
    );
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
fn verify(spec: &str, json: bool, target: Target, model: &VqAutoencoderConfig) -> Result<()> {
    let backend = target.backend;
    let configs = parse_configs(spec)?;
    let calibration = plan::calibrate(target, model)?;
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
        let patches = micro_batch * n_patches;
        let predicted = calibration
            .memory
            .predict(patches, precision, checkpointing)
            .ok_or_else(|| {
                anyhow!(
                    "{precision} with checkpointing was not calibrated; verify one or the other"
                )
            })?;
        let measured =
            plan::measure_step(target, model, patches, precision, checkpointing)?.peak_bytes;
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
