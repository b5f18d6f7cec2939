//! What the train stream holds while it reads ahead, as the planner and a recovery count it.

use headroom_datasets::PatchShape;

use crate::config::TrainConfig;
use crate::data::LoaderOptions;
use crate::plan::ReadAhead;

/// What the train stream holds while reading ahead, as the planner counts it: each
/// spectrogram read ahead holds its patches and, when the spectrograms are not resident, the
/// loader's workers each hold a clip being decoded. The depth is bounded by the loader's
/// host memory (half of it when the spectrograms are resident and use the other half).
pub(super) fn read_ahead(
    loader: &LoaderOptions,
    resident: bool,
    config: &TrainConfig,
    shape: PatchShape,
) -> ReadAhead {
    let patch_bytes = (shape.values() * 4) as u64;
    let bytes_per_clip = config.n_patches as u64 * patch_bytes;
    // A 10-second clip's log-mel (313 frames) plus its decoded audio.
    let reading = (shape.mels * 313 * 4 + 160_000 * 4) as u64;
    let (share, per_clip) = if resident {
        (loader.host_memory_bytes / 2, bytes_per_clip)
    } else {
        (loader.host_memory_bytes, bytes_per_clip + reading)
    };
    ReadAhead {
        micro_batches: loader.prefetch.max(1),
        bytes_per_clip,
        max_clips: (share / per_clip.max(1)).max(1) as usize,
        reading_bytes: if resident {
            0
        } else {
            loader.workers.max(1) as u64 * reading
        },
    }
}

/// The read-ahead as the budget sees it: host memory counts on the CPU backends only.
pub(super) fn read_ahead_counted(
    config: &TrainConfig,
    shape: PatchShape,
    loader: &LoaderOptions,
    resident: bool,
) -> ReadAhead {
    if config.backend.is_host() {
        read_ahead(loader, resident, config, shape)
    } else {
        ReadAhead::NONE
    }
}
