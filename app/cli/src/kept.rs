//! The what-if's calibrations kept between runs (`headroom_core::plan::cache`): asked again
//! on the same build, device and model, `plan --what-if` answers from what it measured before;
//! `--recalibrate` measures anew (and keeps that).

use anyhow::Result;
use headroom_core::plan::cache::{CacheKey, CalibrationCache, Kept};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What `measure` gives, or what it gave on an earlier run for the same `parts` (with this
/// build) where `stands` says that still answers; `recalibrate`: measure whatever is kept.
pub fn kept<V: Serialize + DeserializeOwned>(
    recalibrate: bool,
    parts: &[String],
    stands: impl Fn(&V) -> bool,
    measure: impl FnOnce() -> Result<V>,
) -> Result<(V, Kept)> {
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let (Some(cache), Some(key)) = (CalibrationCache::user(), CacheKey::for_this_build(&parts))
    else {
        return Ok((measure()?, Kept::Measured));
    };
    if !recalibrate {
        return cache.read_or(&key, stands, measure);
    }
    let value = measure()?;
    if let Err(error) = cache.write(&key, &value) {
        tracing::warn!(
            "could not keep the calibration in {}: {error}",
            cache.dir().display()
        );
    }
    Ok((value, Kept::Measured))
}

/// Whether a calibration that `stands` is kept for `parts` with this build.
pub fn is_kept<V: DeserializeOwned>(parts: &[String], stands: impl Fn(&V) -> bool) -> bool {
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let (Some(cache), Some(key)) = (CalibrationCache::user(), CacheKey::for_this_build(&parts))
    else {
        return false;
    };
    cache.read::<V>(&key).is_some_and(|v| stands(&v))
}

/// One word for the JSON: "kept" where any calibration was read from an earlier run,
/// "shipped" where one came with the build, else "measured".
pub fn name(kept: &[Kept]) -> &'static str {
    if kept.contains(&Kept::Read) {
        "kept"
    } else if kept.contains(&Kept::Shipped) {
        "shipped"
    } else {
        "measured"
    }
}

/// The table's line on where its calibrations came from.
pub fn words(kept: &[Kept]) -> String {
    let dir = CalibrationCache::user()
        .map(|c| c.dir().display().to_string())
        .unwrap_or_default();
    if kept.contains(&Kept::Read) {
        format!(
            "Calibrations kept from an earlier run of this build on this machine ({dir}); \
             --recalibrate measures again."
        )
    } else if kept.contains(&Kept::Shipped) {
        format!(
            "The GPU rows' calibration came with this build; what was measured here is kept \
             for the next what-if ({dir})."
        )
    } else {
        format!("Calibrations measured now and kept for the next what-if ({dir}).")
    }
}
