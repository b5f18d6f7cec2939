//! Where a run directory's checkpoints are: the pointer to the newest, the step directories,
//! and the pruning of old ones.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{CheckpointError, KEEP, POINTER_FILE, Pointer, STATE_FILE, invalid};

const STEP_PREFIX: &str = "step-";

/// Finds the checkpoint a path names: a run directory (its newest checkpoint) or a
/// checkpoint directory itself.
///
/// A run killed between renaming a checkpoint into place and replacing the pointer leaves a
/// complete step directory and no pointer (its first checkpoint) or a pointer one behind.
/// Without a pointer the newest step directory is taken: only complete checkpoints are ever
/// renamed to `step-*`, so what is there is whole, and the steps it holds are not lost.
pub fn resolve(path: &Path) -> Result<PathBuf, CheckpointError> {
    let pointer_path = path.join(POINTER_FILE);
    if pointer_path.is_file() {
        let text = fs::read(&pointer_path).map_err(|source| CheckpointError::Read {
            path: pointer_path.clone(),
            source,
        })?;
        let pointer: Pointer =
            serde_json::from_slice(&text).map_err(|e| invalid(&pointer_path, e))?;
        return Ok(path.join(pointer.latest));
    }
    if path.join(STATE_FILE).is_file() {
        return Ok(path.to_path_buf());
    }
    let checkpoints = path.join("checkpoints");
    if let Some(newest) = step_names(&checkpoints).pop() {
        let dir = checkpoints.join(newest);
        if dir.join(STATE_FILE).is_file() {
            tracing::info!(
                "{} has no {POINTER_FILE} (the run stopped before writing it); resuming \
                 from its newest complete checkpoint, {}",
                path.display(),
                dir.display()
            );
            return Ok(dir);
        }
    }
    Err(CheckpointError::Missing {
        path: path.to_path_buf(),
    })
}

/// The step directories in `checkpoints`, oldest first (names carry the step in eight
/// digits, so they sort by step).
fn step_names(checkpoints: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(checkpoints) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(STEP_PREFIX))
        .collect();
    names.sort();
    names
}

pub(super) fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Makes renames inside `dir` durable; best effort, as not every filesystem supports it.
pub(super) fn sync_dir(dir: &Path) {
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Deletes all but the newest `KEEP` complete checkpoints, never `current`.
pub(super) fn prune(checkpoints: &Path, current: &str) {
    let names = step_names(checkpoints);
    let excess = names.len().saturating_sub(KEEP);
    for name in names.into_iter().take(excess) {
        if name != current {
            let _ = fs::remove_dir_all(checkpoints.join(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_killed_before_its_pointer_resumes_from_its_newest_step_directory() {
        let run = tempfile::tempdir().unwrap();
        let checkpoints = run.path().join("checkpoints");
        for step in ["step-00000004", "step-00000008"] {
            fs::create_dir_all(checkpoints.join(step)).unwrap();
            fs::write(checkpoints.join(step).join(STATE_FILE), b"{}").unwrap();
        }
        // A scratch directory being written is never taken.
        fs::create_dir_all(checkpoints.join(".step-00000012.7.tmp")).unwrap();
        assert_eq!(
            resolve(run.path()).unwrap(),
            checkpoints.join("step-00000008")
        );
        // A pointer, where there is one, decides.
        fs::write(
            run.path().join(POINTER_FILE),
            br#"{"latest": "checkpoints/step-00000004", "step": 4}"#,
        )
        .unwrap();
        assert_eq!(
            resolve(run.path()).unwrap(),
            checkpoints.join("step-00000004")
        );
    }

    #[test]
    fn a_step_directory_without_its_state_is_no_checkpoint() {
        let run = tempfile::tempdir().unwrap();
        fs::create_dir_all(run.path().join("checkpoints/step-00000004")).unwrap();
        assert!(matches!(
            resolve(run.path()),
            Err(CheckpointError::Missing { .. })
        ));
    }
}
