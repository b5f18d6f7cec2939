//! `trainer-cli bench --report FILE`: what a user runs on their own machine to check
//! Headroom's promise there and attach the result to a bug report. Each built-in model's
//! step is timed at its default batch, and the planner is checked against real runs over a
//! grid of budgets; the device's own count of its memory (NVML) is sampled beside both.
//! One JSON file (`headroom_core::report::Report`) and a table.
//!
//! Each timing and each run is a child process of this program (`bench --json`, `train
//! --json`), the commands a user would type: a cubecl device pool keeps the pages a run grew
//! for the life of its process, so runs sharing one process would measure each other's
//! pages, and a child that fails (a model the device refuses) is a row of the report rather
//! than its end.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use headroom_core::events::Event;
use headroom_core::model::ModelInfo;
use headroom_core::probe::device_use::{DeviceUse, sampled_while};
use headroom_core::probe::gpus::ProbeSettings;
use headroom_core::probe::{DeviceClass, DeviceReport, MachineReport, isolate};
use headroom_core::registry;
use headroom_core::report::{
    MEDIAN_TARGET, PlanCheck, PlannerRow, PlannerSummary, Report, SpeedRow, WORST_TARGET,
};
use headroom_core::{BackendKind, size};

use crate::args::{Backend, BenchArgs};
use crate::render::mib;

/// The planner's grid when none is given, `budget:effective batch`: small budgets on the
/// CPU, where each run takes seconds; a GPU's from a laptop card's share up (cells past
/// the device's free memory are left out); two tiny ones on a software adapter, where a
/// step of the default model takes seconds.
const CPU_CELLS: &str = "128MiB:256,256MiB:512,512MiB:1024";
const GPU_CELLS: &str = "256MiB:512,1GiB:1024,4GiB:4096";
const SOFTWARE_CELLS: &str = "64MiB:64,128MiB:256";

/// One budget of the grid.
struct Cell {
    budget_bytes: u64,
    effective_batch: usize,
}

fn parse_cell(text: &str) -> Result<Cell> {
    let (budget, effective) = text.split_once(':').with_context(|| {
        format!("--report-cells takes BUDGET:EFFECTIVE_BATCH, e.g. 256MiB:512, not {text:?}")
    })?;
    let budget_bytes = size::parse_size(budget)?;
    let effective_batch = effective
        .trim()
        .parse()
        .ok()
        .filter(|&e| e > 0)
        .with_context(|| {
            format!("the effective batch of {text:?} must be a whole number above 0")
        })?;
    Ok(Cell {
        budget_bytes,
        effective_batch,
    })
}

pub fn run(args: &BenchArgs, path: &Path, threads: usize) -> Result<()> {
    let plan_model = args
        .report_plan_model
        .clone()
        .unwrap_or_else(|| registry::built_in()[0].name.to_string());
    // What the user gave is read before anything runs: a misspelt name costs no probing.
    let models: Vec<ModelInfo> = if args.report_models.is_empty() {
        registry::built_in()
    } else {
        let named: Result<_, _> = args
            .report_models
            .iter()
            .map(|m| registry::info_of(m))
            .collect();
        named?
    };
    registry::info_of(&plan_model)?;
    let given_cells = match &args.report_cells[..] {
        [] => None,
        given => Some(
            given
                .iter()
                .map(|c| parse_cell(c))
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    let resolved = args
        .backend
        .unwrap_or(Backend::Auto)
        .resolve_for(&plan_model);
    if let Some(reason) = &resolved.reason {
        eprintln!("{reason}");
    }
    let backend = resolved.kind;
    eprintln!("probing the machine...");
    let machine = isolate::probe_machine(isolate::TIMEOUT, ProbeSettings::default());
    let device = resolved
        .device
        .clone()
        .or_else(|| default_device(&machine, backend));
    let device_words = match (&device, backend.is_host()) {
        (_, true) => headroom_core::probe::cpu::describe(),
        (Some(d), false) => format!("{}, {}", d.name, d.api),
        (None, false) => format!("{backend} device"),
    };
    let cells = match given_cells {
        Some(cells) => cells,
        None => default_cells(backend, device.as_ref())?,
    };
    let exe = std::env::current_exe().context("cannot find this program to run its steps")?;
    let child = Child {
        exe: &exe,
        backend,
        threads,
    };

    let steps = args.steps.unwrap_or(REPORT_STEPS).to_string();
    let warmup = args.warmup.unwrap_or(REPORT_WARMUP).to_string();
    let mut speed = Vec::new();
    for info in &models {
        let name = info.name;
        let batch = info.default_batch;
        eprintln!(
            "timing {name}: {} x {} a micro-batch, {} steps...",
            batch.spectrograms, batch.patches, steps
        );
        let (result, device_use) = sampled_while(|| {
            child.output(&[
                "bench",
                "--json",
                "--model",
                name,
                "--batch-size",
                &batch.spectrograms.to_string(),
                "--n-patches",
                &batch.patches.to_string(),
                "--steps",
                &steps,
                "--warmup",
                &warmup,
            ])
        });
        let result = result.and_then(|out| {
            let line = out.lines().last().unwrap_or_default();
            serde_json::from_str(line).map_err(|e| format!("unreadable timing ({e}): {line}"))
        });
        speed.push(SpeedRow {
            model: name.to_string(),
            result,
            device_use,
        });
    }

    let runs = tempfile::tempdir().context("cannot make a folder for the planner's runs")?;
    let mut planner = Vec::new();
    for (i, cell) in cells.iter().enumerate() {
        eprintln!(
            "planning {plan_model} for {} at an effective batch of {}, then {} steps...",
            mib(cell.budget_bytes),
            cell.effective_batch,
            args.report_run_steps
        );
        let out = runs.path().join(format!("cell-{i}"));
        let started = std::time::Instant::now();
        let (events, device_use) = sampled_while(|| {
            child.output(&[
                "train",
                "--json",
                "--no-eval",
                "--model",
                &plan_model,
                "--memory-budget",
                &cell.budget_bytes.to_string(),
                "--effective-batch",
                &cell.effective_batch.to_string(),
                "--steps",
                &args.report_run_steps.to_string(),
                "--out",
                &out.display().to_string(),
            ])
        });
        let check = events.and_then(|out| {
            let events: Vec<Event> = out
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            PlanCheck::from_events(&events)
        });
        planner.push(PlannerRow {
            model: plan_model.clone(),
            budget_bytes: cell.budget_bytes,
            effective_batch: cell.effective_batch,
            check,
            device_use,
            seconds: started.elapsed().as_secs_f64(),
        });
    }

    let report = Report {
        headroom: format!("headroom {}", env!("CARGO_PKG_VERSION")),
        created_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        backend: backend.name().to_string(),
        device: device_words,
        backend_reason: resolved.reason.clone(),
        threads,
        summary: PlannerSummary::of(&planner),
        machine,
        speed,
        planner,
    };
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(path, json + "\n")
        .with_context(|| format!("cannot write the report to {}", path.display()))?;
    print_table(&report);
    println!("written to {}", path.display());
    Ok(())
}

/// Steps a model is timed for in a report when `--steps` is not given: a report times
/// every model, so fewer than `bench`'s 20.
const REPORT_STEPS: usize = 5;
const REPORT_WARMUP: usize = 2;

fn default_cells(backend: BackendKind, device: Option<&DeviceReport>) -> Result<Vec<Cell>> {
    let (grid, free) = match device {
        _ if backend.is_host() => (CPU_CELLS, None),
        Some(d) if d.class == DeviceClass::SoftwareAdapter => (SOFTWARE_CELLS, None),
        Some(d) => (GPU_CELLS, d.free_memory.bytes),
        None => (GPU_CELLS, None),
    };
    let cells: Vec<Cell> = grid.split(',').map(parse_cell).collect::<Result<_>>()?;
    // A budget past the device's free memory would measure the device running out, not
    // the plan.
    let fitting: Vec<Cell> = cells
        .into_iter()
        .filter(|c| free.is_none_or(|f| c.budget_bytes <= f))
        .collect();
    anyhow::ensure!(
        !fitting.is_empty(),
        "the device has less free memory than the smallest budget of the planner's grid; \
         give smaller ones with --report-cells, e.g. 64MiB:64"
    );
    Ok(fitting)
}

/// The device a named backend trains on, as the probe saw it: one burn can address, a GPU
/// before a software adapter, the order in which burn's default device is taken.
fn default_device(machine: &MachineReport, backend: BackendKind) -> Option<DeviceReport> {
    let rank = |class: DeviceClass| match class {
        DeviceClass::DiscreteGpu => 0,
        DeviceClass::IntegratedGpu => 1,
        DeviceClass::VirtualGpu => 2,
        DeviceClass::SoftwareAdapter => 3,
        DeviceClass::Cpu | DeviceClass::Other => 4,
    };
    machine
        .devices
        .iter()
        .filter(|d| d.backend == backend && d.usable && (backend.is_host() || d.target.is_some()))
        .min_by_key(|d| rank(d.class))
        .cloned()
}

/// How the report runs this program again.
struct Child<'a> {
    exe: &'a Path,
    backend: BackendKind,
    threads: usize,
}

impl Child<'_> {
    /// The child's standard output, or the last line it wrote as an error.
    fn output(&self, args: &[&str]) -> Result<String, String> {
        let output = Command::new(self.exe)
            .args(args)
            .args(["--backend", self.backend.name()])
            .args(["--threads", &self.threads.to_string()])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.exe.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            return Ok(stdout);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message");
        Err(format!(
            "{} ({})",
            last.trim_start_matches("error: "),
            output.status
        ))
    }
}

fn device_added(uses: &[DeviceUse]) -> String {
    match uses.first() {
        Some(u) => format!("+{} ({})", mib(u.added_bytes()), u.source),
        None => "-".into(),
    }
}

fn percent(fraction: f64) -> String {
    format!("{:+.1}%", 100.0 * fraction)
}

fn print_table(report: &Report) {
    // The CPU's words already say its threads.
    let threads = if report.device.contains("threads") {
        String::new()
    } else {
        format!(", {} threads", report.threads)
    };
    println!(
        "{} on {}: {}{threads}",
        report.headroom, report.backend, report.device
    );
    println!();
    println!("Each model's training step at its default batch (median step):");
    println!(
        "{:<18} {:>22} {:>10} {:>12} {:>12} {:>18}",
        "model", "micro-batch", "step ms", "examples/s", "peak memory", "device in use"
    );
    for row in &report.speed {
        match &row.result {
            Ok(r) => {
                let shape = match (r.frames, r.patches) {
                    (Some(frames), _) => format!("{} x {frames} frames", r.batch),
                    (None, 1) => format!("{} examples", r.batch),
                    (None, patches) => format!("{} x {patches} patches", r.batch),
                };
                println!(
                    "{:<18} {:>22} {:>10.1} {:>12.1} {:>12} {:>18}",
                    row.model,
                    shape,
                    r.step_ms_median,
                    r.patches_per_s,
                    mib(r.mem_peak_bytes),
                    device_added(&row.device_use)
                );
            }
            Err(why) => println!("{:<18} failed: {why}", row.model),
        }
    }
    println!();
    if let Some(first) = report.planner.first() {
        println!("The planner against real runs of {}:", first.model);
    }
    println!(
        "{:<10} {:>9} {:>16} {:>24} {:>11} {:>11} {:>8} {:>10} {:>18}",
        "budget",
        "effective",
        "plan",
        "dry-runs (pred / meas)",
        "predicted",
        "reached",
        "error",
        "recovered",
        "device in use"
    );
    for row in &report.planner {
        match &row.check {
            Ok(c) => {
                let dry = c
                    .dry_runs
                    .iter()
                    .map(|d| match &d.refused {
                        Some(_) => format!("{}: refused", d.micro_batch),
                        None => format!(
                            "{}: {:.0} / {:.0}",
                            d.micro_batch,
                            d.predicted_peak_bytes as f64 / (1u64 << 20) as f64,
                            d.measured_peak_bytes as f64 / (1u64 << 20) as f64
                        ),
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let p = &c.plan;
                println!(
                    "{:<10} {:>9} {:>16} {:>24} {:>11} {:>11} {:>8} {:>10} {:>18}",
                    mib(row.budget_bytes),
                    row.effective_batch,
                    format!("{} x {} x {}", p.micro_batch, p.n_patches, p.accumulation),
                    dry,
                    mib(p.predicted_peak_bytes),
                    mib(c.measured_peak_bytes),
                    percent(c.error),
                    c.recoveries,
                    device_added(&row.device_use)
                );
            }
            Err(why) => println!("{:<10} failed: {why}", mib(row.budget_bytes)),
        }
    }
    let s = &report.summary;
    let figure = |f: Option<f64>| f.map_or("-".into(), |f| format!("{:.1}%", 100.0 * f));
    println!();
    println!(
        "{} of {} runs checked: median |error| {}, worst {} (targets {:.0}% and {:.0}%), \
         most under {}, dry-runs within {}; {} recoveries, {} over the budget: {}",
        s.checked,
        s.cells,
        figure(s.median_abs_error),
        figure(s.worst_abs_error),
        100.0 * MEDIAN_TARGET,
        100.0 * WORST_TARGET,
        figure(s.most_under),
        figure(s.worst_dry_run_abs_error),
        s.recoveries,
        s.over_budget,
        if s.holds {
            "the planner holds on this machine"
        } else {
            "the planner does NOT hold here: please attach the report to an issue"
        }
    );
}
