//! Where a clip sits in a dataset and what is known of it: the words every index and
//! generator shares.

use serde::{Deserialize, Serialize};

/// Which part of a dataset a clip belongs to; ordered as a scan lists them, train first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Train,
    Test,
}

/// Ground truth of a clip, when the dataset has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    Normal,
    Anomaly,
}
