//! Anomaly scoring: a clip's score is the mean reconstruction error of its patches
//! (MODEL.md); AUC per machine ID, averaged as the DCASE challenge does.

use std::collections::BTreeMap;

use burn::tensor::Device;
use headroom_datasets::{Clip, Label};

use crate::data::{Normalization, clip_patches};
use crate::events::{EvaluationReport, MachineScore};
use crate::metrics::{partial_auc, roc_auc};

/// The DCASE 2020 Task 2 pAUC's false-positive range.
pub const PAUC_MAX_FPR: f64 = 0.1;
use crate::model::VqAutoencoder;

/// Score of each clip, in the order given, from at most `chunk` patches on the device at
/// a time.
pub fn clip_scores(
    model: &VqAutoencoder,
    device: &Device,
    clips: &[Clip],
    stride: usize,
    chunk: usize,
    normalization: &Normalization,
) -> Vec<f64> {
    clips
        .iter()
        .map(|clip| {
            let batch = clip_patches(clip, stride, normalization)
                .expect("test clips were checked against the patch settings");
            let sum: f64 = batch
                .chunks(chunk)
                .map(|part| {
                    let errors = model.patch_errors(part.to_tensor(device));
                    errors.sum().into_scalar::<f32>() as f64
                })
                .sum();
            sum / batch.patches.max(1) as f64
        })
        .collect()
}

pub fn evaluate(
    model: &VqAutoencoder,
    device: &Device,
    clips: &[Clip],
    stride: usize,
    chunk: usize,
    normalization: &Normalization,
) -> EvaluationReport {
    let scores = clip_scores(model, device, clips, stride, chunk, normalization);
    let mut by_machine: BTreeMap<u32, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for (clip, score) in clips.iter().zip(scores) {
        let entry = by_machine.entry(clip.machine_id).or_default();
        match clip.label {
            Label::Normal => entry.0.push(score),
            Label::Anomaly => entry.1.push(score),
        }
    }
    let per_machine: Vec<MachineScore> = by_machine
        .into_iter()
        .filter_map(|(machine_id, (normal, anomalous))| {
            let pauc = partial_auc(&normal, &anomalous, PAUC_MAX_FPR)?;
            roc_auc(&normal, &anomalous).map(|auc| MachineScore {
                machine_id,
                auc,
                pauc,
                normal_clips: normal.len(),
                anomalous_clips: anomalous.len(),
            })
        })
        .collect();
    let mean = |f: fn(&MachineScore) -> f64| {
        per_machine.iter().map(f).sum::<f64>() / per_machine.len().max(1) as f64
    };
    EvaluationReport {
        auc: mean(|m| m.auc),
        pauc: mean(|m| m.pauc),
        per_machine,
        clips: clips.len(),
    }
}
