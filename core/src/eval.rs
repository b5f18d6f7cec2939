//! Anomaly scoring: a clip's score is the mean of its patches' scores (for an autoencoder the
//! reconstruction error, MODEL.md); AUC and pAUC per machine type and ID, averaged as the
//! DCASE challenge does.

use std::collections::BTreeMap;
use std::sync::Arc;

use burn::tensor::Device;
use headroom_datasets::{ClipStore, FileError, Label, PatchShape};
use serde::{Deserialize, Serialize};

use crate::data::{Normalization, PatchBatch, clip_patches};
use crate::data::{OnBadFile, report_bad_files};
use crate::events::{EvaluationReport, MachineScore, TypeScore};
use crate::metrics::{partial_auc, roc_auc};
use crate::model::SpectrogramModel;

/// The DCASE 2020 Task 2 pAUC's false-positive range.
pub const PAUC_MAX_FPR: f64 = 0.1;

/// One scored clip, as the challenge's score files list it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClipScore {
    pub machine_type: String,
    pub machine_id: u32,
    /// File name (`anomaly_id_00_00000012.wav`).
    pub name: String,
    pub label: Option<Label>,
    pub score: f64,
}

/// How scoring reads and splits clips.
#[derive(Debug, Clone, Copy)]
pub struct ScoreSettings {
    /// The model's patch.
    pub shape: PatchShape,
    pub stride: usize,
    /// Patches on the device at once.
    pub chunk: usize,
    pub workers: usize,
    pub on_bad_file: OnBadFile,
}

/// Why a test split could not be scored.
#[derive(Debug, thiserror::Error)]
pub enum ScoreError {
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    #[error(transparent)]
    Readback(#[from] crate::readback::ReadbackError),
}

/// Scores of the clips at `indices` of `store`, in that order, reading ahead on worker
/// threads; with [`OnBadFile::Skip`] unreadable clips are left out and listed in `skipped`.
/// `classes` holds each store clip's class.
#[allow(clippy::too_many_arguments)]
pub async fn clip_scores<M: SpectrogramModel>(
    model: &M,
    device: &Device,
    store: &Arc<ClipStore>,
    classes: &Arc<Vec<i64>>,
    indices: &[usize],
    normalization: &Normalization,
    settings: ScoreSettings,
    skipped: &mut Vec<String>,
) -> Result<Vec<ClipScore>, ScoreError> {
    let reader = store.clone();
    let classes = classes.clone();
    let normalization = *normalization;
    let (shape, stride) = (settings.shape, settings.stride);
    let jobs: Vec<usize> = indices.to_vec();
    let batches = crate::data::read_ahead(
        jobs.into_iter(),
        settings.workers,
        2 * settings.workers.max(1),
        move |i| -> (usize, Result<PatchBatch, FileError>) {
            let batch = reader.read(i).and_then(|s| {
                let class = classes.get(i).copied().unwrap_or(0);
                clip_patches(&s, shape, stride, class, &normalization)
                    .map_err(|e| FileError::new(reader.clips()[i].describe(), e.into()))
            });
            (i, batch)
        },
    );
    let mut scores = Vec::with_capacity(indices.len());
    let mut bad = Vec::new();
    for (i, batch) in batches {
        let batch = match batch {
            Ok(batch) => batch,
            Err(error) => {
                bad.push(error);
                if settings.on_bad_file == OnBadFile::Fail {
                    break;
                }
                continue;
            }
        };
        let mut sum = 0.0;
        for part in batch.chunks(settings.chunk) {
            let scores = model.patch_scores(part.to_tensor(device));
            sum += crate::readback::scalar(scores.sum()).await? as f64;
        }
        let clip = &store.clips()[i];
        scores.push(ClipScore {
            machine_type: clip.machine_type.clone(),
            machine_id: clip.machine_id,
            name: clip.name.clone(),
            label: clip.label,
            score: sum / batch.patches.max(1) as f64,
        });
    }
    report_bad_files(bad, settings.on_bad_file, skipped)?;
    Ok(scores)
}

type NormalAndAnomalous = (Vec<f64>, Vec<f64>);

/// AUC and pAUC per machine type and ID (IDs without both normal and anomalous clips have
/// none), with their means.
pub fn report(scores: &[ClipScore]) -> EvaluationReport {
    let mut groups: BTreeMap<(&str, u32), NormalAndAnomalous> = BTreeMap::new();
    for clip in scores {
        let entry = groups
            .entry((clip.machine_type.as_str(), clip.machine_id))
            .or_default();
        match clip.label {
            Some(Label::Normal) => entry.0.push(clip.score),
            Some(Label::Anomaly) => entry.1.push(clip.score),
            None => {}
        }
    }
    let per_machine: Vec<MachineScore> = groups
        .into_iter()
        .filter_map(|((machine_type, machine_id), (normal, anomalous))| {
            let pauc = partial_auc(&normal, &anomalous, PAUC_MAX_FPR)?;
            roc_auc(&normal, &anomalous).map(|auc| MachineScore {
                machine_type: machine_type.to_string(),
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
    let mut per_type: Vec<TypeScore> = Vec::new();
    for m in &per_machine {
        match per_type.last_mut() {
            Some(t) if t.machine_type == m.machine_type => {
                t.auc += m.auc;
                t.pauc += m.pauc;
                t.machine_ids += 1;
            }
            _ => per_type.push(TypeScore {
                machine_type: m.machine_type.clone(),
                auc: m.auc,
                pauc: m.pauc,
                machine_ids: 1,
            }),
        }
    }
    for t in &mut per_type {
        t.auc /= t.machine_ids as f64;
        t.pauc /= t.machine_ids as f64;
    }
    EvaluationReport {
        auc: mean(|m| m.auc),
        pauc: mean(|m| m.pauc),
        per_machine,
        per_type,
        clips: scores.len(),
        skipped: Vec::new(),
    }
}

/// One row per machine type and ID, each type's mean (`id` = `mean`), then the overall mean.
pub fn results_csv(report: &EvaluationReport) -> String {
    let mut csv = String::from("machine_type,id,auc,pauc,normal_clips,anomalous_clips\n");
    for t in &report.per_type {
        for m in report
            .per_machine
            .iter()
            .filter(|m| m.machine_type == t.machine_type)
        {
            csv.push_str(&format!(
                "{},{:02},{},{},{},{}\n",
                m.machine_type, m.machine_id, m.auc, m.pauc, m.normal_clips, m.anomalous_clips
            ));
        }
        csv.push_str(&format!("{},mean,{},{},,\n", t.machine_type, t.auc, t.pauc));
    }
    // Unlabelled clips only (an evaluation set): scores, but no AUC to average.
    if !report.per_machine.is_empty() {
        csv.push_str(&format!("all,mean,{},{},,\n", report.auc, report.pauc));
    }
    csv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(machine_type: &str, id: u32, label: Option<Label>, score: f64) -> ClipScore {
        ClipScore {
            machine_type: machine_type.into(),
            machine_id: id,
            name: String::new(),
            label,
            score,
        }
    }

    #[test]
    fn machine_types_and_ids_are_scored_apart_and_unlabelled_clips_are_not_scored() {
        use Label::*;
        let scores = [
            score("fan", 0, Some(Normal), 0.1),
            score("fan", 0, Some(Anomaly), 0.9),
            score("pump", 0, Some(Normal), 0.9),
            score("pump", 0, Some(Anomaly), 0.1),
            score("pump", 1, None, 0.5),
        ];
        let report = report(&scores);
        let rows: Vec<(&str, u32, f64)> = report
            .per_machine
            .iter()
            .map(|m| (m.machine_type.as_str(), m.machine_id, m.auc))
            .collect();
        assert_eq!(rows, [("fan", 0, 1.0), ("pump", 0, 0.0)]);
        assert_eq!(report.auc, 0.5);
        let types: Vec<(&str, f64, usize)> = report
            .per_type
            .iter()
            .map(|t| (t.machine_type.as_str(), t.auc, t.machine_ids))
            .collect();
        assert_eq!(types, [("fan", 1.0, 1), ("pump", 0.0, 1)]);
        assert_eq!(report.clips, 5);
    }
}
