//! How a clip of the built-in dataset is named: its place in the dataset and its anomaly,
//! which together fix its random stream. Below both the index ([`crate::clip`]) and the
//! generator ([`crate::synthetic`]), which each need it.

use serde::{Deserialize, Serialize};

use crate::label::{Label, Split};

/// The anomalies the built-in machines have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyKind {
    Clicks,
    ShiftedHarmonic,
    MissingHarmonic,
}

impl AnomalyKind {
    pub const ALL: [AnomalyKind; 3] = [
        AnomalyKind::Clicks,
        AnomalyKind::ShiftedHarmonic,
        AnomalyKind::MissingHarmonic,
    ];
}

/// One clip's place in the dataset, which fixes its random stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClipKey {
    pub split: Split,
    pub machine_id: u32,
    pub index: usize,
    pub anomaly: Option<AnomalyKind>,
}

impl ClipKey {
    pub fn label(&self) -> Label {
        if self.anomaly.is_some() {
            Label::Anomaly
        } else {
            Label::Normal
        }
    }

    /// DCASE-style file stem: `normal_id_00_00000003`.
    pub fn name(&self) -> String {
        let kind = match self.label() {
            Label::Normal => "normal",
            Label::Anomaly => "anomaly",
        };
        format!("{kind}_id_{:02}_{:08}", self.machine_id, self.index)
    }
}
