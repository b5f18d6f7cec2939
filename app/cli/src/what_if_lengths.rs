//! `plan --what-if` for a kind of training planned by length (the speech recogniser): its
//! steps measured here at several lengths of the run's own utterances, then for each GPU's
//! budget and this CPU's, the buckets those lengths would be packed by, the padding, speed
//! and peak predicted.

use anyhow::{Context, Result};
use headroom_core::Target;
use headroom_core::plan::cache::Kept;
use headroom_core::plan::{self, lengths::LengthModel};
use headroom_core::readback::block_on;
use headroom_core::registry::BuiltIn;
use headroom_core::size::human as gib;
use headroom_core::train::TaskData;

use crate::args::PlanArgs;
use crate::budget::what_if_devices;

/// One device's answer.
#[derive(serde::Serialize)]
struct Row {
    device: String,
    budget_bytes: u64,
    plan: Result<Answer, String>,
}

#[derive(serde::Serialize)]
struct Answer {
    buckets: headroom_core::lengths::LengthBuckets,
    padding: f64,
    /// This machine's speed: on the CPU row only.
    utterances_per_s: Option<f64>,
    predicted_peak_bytes: u64,
}

pub fn what_if<T: BuiltIn>(args: &PlanArgs, target: Target, resident: u64) -> Result<()> {
    let spec = args.spec()?;
    let devices = what_if_devices(&spec, resident)?;
    // The run's own utterances: the task sized and its data read as `train` reads them.
    let config = spec.train_config(target)?;
    let task: T = config.model.config()?;
    let loader = args.loader.options()?;
    let (task, mut data) = task.open(&config, &loader)?;
    data.check()?;
    let task = task.for_data(&data)?;
    let lengths = data.lengths();
    let longest = lengths
        .iter()
        .copied()
        .max()
        .context("the data holds no utterance")?;
    let effective_batch = spec.planning_for(0, task.default_batch())?.effective_batch;
    let parts = [
        "what-if lengths".into(),
        serde_json::to_string(&target).unwrap_or_default(),
        format!("{} threads", rayon::current_num_threads()),
        format!("{task:?}"),
        longest.to_string(),
        format!("{effective_batch} a step"),
    ];
    let (measured, kept) = crate::kept::kept(
        args.recalibrate,
        &parts,
        |_| true,
        || {
            if !args.json {
                println!(
                    "Calibrating {} ({} parameters) on {} at lengths up to {longest} frames...",
                    T::NAME,
                    task.parameters(),
                    target.backend
                );
            }
            Ok(block_on(plan::lengths::calibrate(
                target,
                &task,
                longest,
                effective_batch,
            ))?)
        },
    )?;
    let model = LengthModel::fit(
        &measured,
        task.parameters() * 4,
        plan::calibrate::MEMORY_MARGIN,
        plan::lengths::scratch_threads(target),
        plan::lengths::held_input_bytes_per_frame(target, &task, longest),
    )
    .context("no step was measured")?;
    let rows: Vec<Row> = devices
        .into_iter()
        .map(|d| {
            let available = d.budget_bytes.saturating_sub(d.resident_bytes);
            // This machine's times say nothing of a GPU's: a GPU row packs each micro-batch
            // as full as its bucket allows, and predicts no speed.
            let plan = model
                .plan(&lengths, effective_batch, available, !d.gpu)
                .map(|(buckets, predicted)| Answer {
                    padding: predicted.padding.share(),
                    utterances_per_s: (!d.gpu).then_some(predicted.examples_per_s),
                    predicted_peak_bytes: d.resident_bytes + predicted.step_bytes,
                    buckets,
                })
                .map_err(|needed| {
                    format!(
                        "one utterance of the longest ({longest} frames) needs {}",
                        gib(needed)
                    )
                });
            Row {
                device: d.name,
                budget_bytes: d.budget_bytes,
                plan,
            }
        })
        .collect();
    let source = format!(
        "memory measured on {} here; for the GPU rows an estimate, since a GPU's pool rounds \
         allocations its own way (the dry-run checks it when you train there), each \
         micro-batch as full as its bucket allows",
        target.backend
    );
    if args.json {
        let out = serde_json::json!({
            "model": T::NAME,
            "parameters": task.parameters(),
            "longest_frames": longest,
            "utterances": lengths.len(),
            "effective_batch": effective_batch,
            "calibration": measured,
            "calibrations": if kept == Kept::Read { "kept" } else { "measured" },
            "memory": source,
            "rows": rows,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "What-if for {effective_batch} utterances a step, {} utterances up to {longest} frames:",
        lengths.len()
    );
    println!(
        "{:<28} {:>10}  {:<58} {:>12}",
        "device", "budget", "utterances a micro-batch holds, shortest to longest", "predicted"
    );
    for row in &rows {
        let (plan, predicted) = match &row.plan {
            Ok(a) => {
                let caps: Vec<String> = a
                    .buckets
                    .buckets
                    .iter()
                    .map(|b| b.examples.to_string())
                    .collect();
                (
                    format!(
                        "{}; {:.0}% padding{}",
                        caps.join(" "),
                        a.padding * 100.0,
                        a.utterances_per_s
                            .map(|s| format!(", {s:.1}/s here"))
                            .unwrap_or_default()
                    ),
                    gib(a.predicted_peak_bytes),
                )
            }
            Err(e) => (format!("does not fit: {e}"), String::new()),
        };
        println!(
            "{:<28} {:>10}  {:<58} {:>12}",
            row.device,
            gib(row.budget_bytes),
            plan,
            predicted
        );
    }
    if let Some(Ok(a)) = rows.first().map(|r| &r.plan) {
        println!("Buckets (frames): {}", a.buckets.words());
    }
    println!("{source}.");
    println!("{}", crate::kept::words(&[kept]));
    Ok(())
}
