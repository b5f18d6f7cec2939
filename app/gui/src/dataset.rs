//! What the dataset panel shows: machine types, IDs and clip counts per split, and the
//! problems found, from an index (nothing is read to build it).

use std::collections::BTreeMap;
use std::path::PathBuf;

use headroom_datasets::dcase::DcaseIndex;
use headroom_datasets::{ClipInfo, Label, Split};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub train: usize,
    pub test_normal: usize,
    pub test_anomaly: usize,
    pub test_unlabelled: usize,
}

#[derive(Debug, Clone)]
pub struct DatasetSummary {
    pub name: String,
    /// `None` for the built-in dataset.
    pub root: Option<PathBuf>,
    /// Per machine type, per ID.
    pub counts: BTreeMap<String, BTreeMap<u32, Counts>>,
    pub problems: Vec<String>,
    /// Files still being checked; `None` once done (or when there is nothing to check).
    pub checking: Option<usize>,
}

impl DatasetSummary {
    pub fn from_clips(name: String, root: Option<PathBuf>, clips: &[ClipInfo]) -> Self {
        let mut counts: BTreeMap<String, BTreeMap<u32, Counts>> = BTreeMap::new();
        for clip in clips {
            let c = counts
                .entry(clip.machine_type.clone())
                .or_default()
                .entry(clip.machine_id)
                .or_default();
            match (clip.split, clip.label) {
                (Split::Train, _) => c.train += 1,
                (Split::Test, Some(Label::Normal)) => c.test_normal += 1,
                (Split::Test, Some(Label::Anomaly)) => c.test_anomaly += 1,
                (Split::Test, None) => c.test_unlabelled += 1,
            }
        }
        Self {
            name,
            root,
            counts,
            problems: Vec::new(),
            checking: None,
        }
    }

    pub fn from_index(index: &DcaseIndex) -> Self {
        let mut summary = Self::from_clips(
            index.root.display().to_string(),
            Some(index.root.clone()),
            &index.clips,
        );
        summary.problems = index.problems.iter().map(|p| p.to_string()).collect();
        summary.checking = Some(index.clips.len());
        summary
    }

    pub fn clips(&self) -> usize {
        self.counts
            .values()
            .flat_map(|ids| ids.values())
            .map(|c| c.train + c.test_normal + c.test_anomaly + c.test_unlabelled)
            .sum()
    }
}
