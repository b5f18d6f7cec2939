//! Calibrations kept between runs, per build, device and model: what `plan --what-if`
//! measured the last time it was asked the same question on this machine, so that it answers
//! again in a moment instead of calibrating anew (a minute on a 2-core machine, most of it on
//! the software GPU adapter).
//!
//! A calibration is found again only by the same build of Headroom (the executable's size and
//! modification time: a rebuilt binary measures anew, its code may hold different memory),
//! on the same device (the backend, the adapter or the CPU's threads) and for the same model
//! settings; anything else is a new key. Files live in `$HEADROOM_CACHE_DIR`, else the user's
//! cache directory (`~/.cache/headroom/calibrations` on Linux). A file that cannot be read
//! or parsed is measured again and overwritten; one that cannot be written is left out with
//! a warning: a cache never stops an answer.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

/// The environment variable that moves the cache (a test's own directory, a shared one).
pub const CACHE_DIR_VARIABLE: &str = "HEADROOM_CACHE_DIR";

/// A directory of calibrations, one JSON file per key.
#[derive(Debug, Clone)]
pub struct CalibrationCache {
    dir: PathBuf,
}

impl CalibrationCache {
    /// The cache in `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// `$HEADROOM_CACHE_DIR`, else the user's cache directory; `None` where there is
    /// neither.
    pub fn user() -> Option<Self> {
        let dir = match std::env::var_os(CACHE_DIR_VARIABLE) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => dirs::cache_dir()?.join("headroom"),
        };
        Some(Self::at(dir.join("calibrations")))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file a key's calibration lives in.
    fn path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.json", key.0))
    }

    /// The value kept under `key`, when there is one this build can read.
    pub fn read<T: DeserializeOwned>(&self, key: &CacheKey) -> Option<T> {
        let text = std::fs::read_to_string(self.path(key)).ok()?;
        match serde_json::from_str(&text) {
            Ok(value) => Some(value),
            Err(error) => {
                tracing::debug!(%error, key = %key.0, "a kept calibration could not be read");
                None
            }
        }
    }

    /// Keeps `value` under `key`: written beside its place, then moved there, so that a
    /// reader never sees half a file.
    pub fn write<T: Serialize>(&self, key: &CacheKey, value: &T) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let text = serde_json::to_string(value).map_err(std::io::Error::other)?;
        let path = self.path(key);
        let partial = path.with_extension(format!("{}.partial", std::process::id()));
        std::fs::write(&partial, text)?;
        std::fs::rename(&partial, &path)
    }

    /// The value kept under `key` where `stands` says it still answers (what the key cannot
    /// hold: a figure that moves between runs), else `measure`'s, kept for next time (a value
    /// that cannot be kept is returned all the same). Says which it was.
    pub fn read_or<T, E>(
        &self,
        key: &CacheKey,
        stands: impl Fn(&T) -> bool,
        measure: impl FnOnce() -> Result<T, E>,
    ) -> Result<(T, Kept), E>
    where
        T: Serialize + DeserializeOwned,
    {
        if let Some(value) = self.read(key).filter(|v| stands(v)) {
            return Ok((value, Kept::Read));
        }
        let value = measure()?;
        if let Err(error) = self.write(key, &value) {
            tracing::warn!(
                "could not keep the calibration in {}: {error}",
                self.dir.display()
            );
        }
        Ok((value, Kept::Measured))
    }
}

/// Whether a calibration was measured now, read from an earlier run or shipped with the
/// build (`plan::shipped`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    Measured,
    Read,
    Shipped,
}

/// What a calibration depends on, hashed: this build, then the caller's parts (the device,
/// the model's settings, anything else that changes what is measured).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey(String);

impl CacheKey {
    /// The key of `parts` for this build; `None` where this build cannot be told apart from
    /// another (no executable to read), so that nothing stale is ever read.
    pub fn for_this_build(parts: &[&str]) -> Option<Self> {
        Some(Self::of(&build_identity()?, parts))
    }

    /// The key of `parts` for the build `build`.
    pub fn of(build: &str, parts: &[&str]) -> Self {
        let mut hash = Sha256::new();
        for part in std::iter::once(build).chain(parts.iter().copied()) {
            // Each part's length first, so that ("ab", "c") and ("a", "bc") differ.
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part.as_bytes());
        }
        let digest = hash.finalize();
        Self(digest.iter().take(16).map(|b| format!("{b:02x}")).collect())
    }
}

/// This executable's version, size and modification time.
fn build_identity() -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    let meta = std::fs::metadata(exe).ok()?;
    let modified = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(format!(
        "{} {} {}",
        env!("CARGO_PKG_VERSION"),
        meta.len(),
        modified.as_nanos()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_changes_with_every_part_and_their_boundaries() {
        let base = CacheKey::of("build 1", &["flex", "model a"]);
        assert_eq!(base, CacheKey::of("build 1", &["flex", "model a"]));
        assert_ne!(base, CacheKey::of("build 2", &["flex", "model a"]));
        assert_ne!(base, CacheKey::of("build 1", &["wgpu", "model a"]));
        assert_ne!(base, CacheKey::of("build 1", &["flex", "model b"]));
        assert_ne!(
            CacheKey::of("b", &["ab", "c"]),
            CacheKey::of("b", &["a", "bc"])
        );
    }

    #[test]
    fn a_value_is_measured_once_then_read_and_a_broken_file_measured_again() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CalibrationCache::at(dir.path().join("calibrations"));
        let key = CacheKey::of("build", &["device", "model"]);
        let measured = std::cell::Cell::new(0);
        let ask = || {
            cache.read_or(
                &key,
                |_| true,
                || {
                    measured.set(measured.get() + 1);
                    Ok::<_, ()>(vec![1.5f64, 2.5])
                },
            )
        };
        assert_eq!(ask().unwrap(), (vec![1.5, 2.5], Kept::Measured));
        assert_eq!(ask().unwrap(), (vec![1.5, 2.5], Kept::Read));
        assert_eq!(measured.get(), 1);
        std::fs::write(cache.path(&key), "{ half a file").unwrap();
        assert_eq!(ask().unwrap().1, Kept::Measured);
        assert_eq!(measured.get(), 2);
        // A measurement that fails keeps nothing.
        let other = CacheKey::of("build", &["device", "other model"]);
        assert_eq!(
            cache.read_or::<Vec<f64>, _>(&other, |_| true, || Err("refused")),
            Err("refused")
        );
        assert!(cache.read::<Vec<f64>>(&other).is_none());
        // A kept value that no longer stands is measured again, and the new one kept.
        let newer = cache.read_or(&key, |v: &Vec<f64>| v[0] > 2.0, || Ok::<_, ()>(vec![3.0]));
        assert_eq!(newer, Ok((vec![3.0], Kept::Measured)));
        assert_eq!(cache.read::<Vec<f64>>(&key), Some(vec![3.0]));
    }
}
