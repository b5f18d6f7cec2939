//! Calibrations shipped with the build: the GPU path of the default model, dcase-ae,
//! id-classifier and the GAN (small) at their default settings on the built-in dataset,
//! measured on Mesa's software Vulkan adapter (lavapipe), for `plan --what-if` on a machine
//! without a GPU, whose first answer would otherwise spend a minute measuring the same
//! thing on its own software adapter (cubecl's pool rounds a step's allocations the same way
//! on any machine; only the GPU rows use it, as an estimate the dry-run checks where the run
//! trains).
//!
//! A shipped calibration is used only for the model settings it was measured with, and only
//! when nothing newer is kept for this build and machine (`plan::cache`); `--recalibrate`
//! measures anew. Each file says when, at which commit and with which command it was
//! measured; `tests/cli_plan.rs` measures dcase-ae's again and compares, and
//! `bench/ship_calibrations` writes them again.

use serde::{Deserialize, Serialize};

use super::Calibration;

/// One shipped calibration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Shipped {
    /// The model's settings it was measured with (the task's `Debug` form).
    pub model: String,
    /// The adapter it was measured on.
    pub adapter: String,
    /// When, at which commit, by which command.
    pub measured: String,
    pub calibration: Calibration,
}

/// The files, as the build read them.
const FILES: [&str; 4] = [
    include_str!("shipped/vq-patch-ae.wgpu.json"),
    include_str!("shipped/dcase-ae.wgpu.json"),
    include_str!("shipped/id-classifier.wgpu.json"),
    include_str!("shipped/spec-gan.wgpu.json"),
];

/// Every shipped calibration this build can read.
pub fn all() -> Vec<Shipped> {
    FILES
        .iter()
        .filter_map(|text| match serde_json::from_str(text) {
            Ok(shipped) => Some(shipped),
            Err(error) => {
                tracing::debug!(%error, "a shipped calibration could not be read");
                None
            }
        })
        .collect()
}

/// The GPU path's shipped calibration for a model of these settings (its `Debug` form).
pub fn gpu_calibration(model: &str) -> Option<Shipped> {
    all().into_iter().find(|s| s.model == model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DcaseAeConfig, IdClassifierConfig, VqAutoencoderConfig};

    /// Every file parses, was measured on wgpu, and is found for the default settings of its
    /// model (a change to those settings leaves it unused and fails here, to be measured
    /// again with `bench/ship_calibrations`). The GAN's settings hold the built-in
    /// dataset's machines, which the run reads from the data.
    #[test]
    fn each_shipped_calibration_belongs_to_its_models_default_settings() {
        let shipped = all();
        assert_eq!(shipped.len(), FILES.len(), "a shipped file does not parse");
        assert!(shipped.iter().any(|s| s.model.starts_with("GanConfig {")));
        for model in [
            format!("{:?}", VqAutoencoderConfig::default()),
            format!("{:?}", DcaseAeConfig::default()),
            format!("{:?}", IdClassifierConfig::default()),
        ] {
            let found = gpu_calibration(&model)
                .unwrap_or_else(|| panic!("nothing shipped for the settings {model}"));
            assert_eq!(found.calibration.backend, crate::BackendKind::Wgpu);
            assert!(!found.calibration.measurements.is_empty());
        }
    }
}
