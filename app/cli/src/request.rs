//! What the `train` and `plan` commands ask of core, from their flags: the dataset and the
//! planner's request. One place, so that `plan` predicts what `train` will reach.

use anyhow::Result;
use headroom_core::model::DefaultBatch;
use headroom_core::plan::{Fixed, Planning};
use headroom_core::train::DatasetSource;

use crate::args::{DataArgs, MemoryArgs, SplitArgs};

/// The planner's request: the effective batch the flags describe (or `--effective-batch`),
/// and every flag the user set as a constraint. `defaults` is the model's step where the
/// flags leave it open.
pub fn planning(
    memory: &MemoryArgs,
    split: &SplitArgs,
    budget_bytes: u64,
    defaults: DefaultBatch,
) -> Result<Planning> {
    let fixed = Fixed {
        micro_batch: split.batch_size,
        n_patches: split.n_patches,
        accumulation: split.gradient_accumulation_steps,
        checkpointing: memory.checkpointing(),
        precision: memory.precision,
    };
    Ok(Planning::new(
        budget_bytes,
        memory.effective_batch,
        fixed,
        defaults,
    )?)
}

/// The dataset the flags name: the recordings under --data-root, else the built-in
/// synthetic one (`default`) with its size flags applied.
pub fn dataset_source(
    data: &DataArgs,
    machine_ids: Option<u32>,
    train_clips_per_id: Option<usize>,
    default: DatasetSource,
) -> DatasetSource {
    match &data.data_root {
        Some(root) => DatasetSource::Dcase {
            root: root.clone(),
            machine_type: data.machine_type.clone(),
            features: data.features.settings(),
        },
        None => {
            let mut source = default;
            if let DatasetSource::Synthetic(synthetic) = &mut source {
                if let Some(n) = train_clips_per_id {
                    synthetic.train_per_id = n;
                }
                if let Some(ids) = machine_ids {
                    synthetic.machine_ids = ids;
                }
            }
            source
        }
    }
}
