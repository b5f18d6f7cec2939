//! The DCASE 2020 Task 2 layout: `ROOT/<machine_type>/{train,test}/` holding
//! `normal_id_XX_NNNNNNNN.wav`, `anomaly_id_XX_NNNNNNNN.wav` or, in evaluation sets,
//! unlabelled `id_XX_NNNNNNNN.wav`; `.npy` spectrograms may stand in for the recordings.
//! Scanning lists files and parses names; nothing is read.

use std::path::{Path, PathBuf};

use crate::clip::{ClipInfo, Label, Origin, Split};
use crate::error::{FileError, FileProblem};

/// The machine types of the challenge; other folder names are accepted too.
pub const MACHINE_TYPES: [&str; 6] = ["ToyCar", "ToyConveyor", "fan", "pump", "slider", "valve"];

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("{}: {source}; --data-root must be a folder in the DCASE layout", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} holds no machine-type folder with train/ or test/ inside (expected \
         ROOT/<machine_type>/train/normal_id_00_00000000.wav, e.g. ROOT/fan/train/...)",
        root.display()
    )]
    NoMachineTypes { root: PathBuf },
    #[error("{} has no machine type {asked:?}; it has: {}", root.display(), found.join(", "))]
    UnknownMachineType {
        root: PathBuf,
        asked: String,
        found: Vec<String>,
    },
    #[error(
        "{} holds no .wav or .npy files in train/ or test/ folders{}",
        root.display(),
        machine_type.as_ref().map(|t| format!(" of machine type {t}")).unwrap_or_default()
    )]
    NoFiles {
        root: PathBuf,
        machine_type: Option<String>,
    },
}

/// What a scan found: the clips, and the files that could not be clips.
#[derive(Debug)]
pub struct DcaseIndex {
    pub root: PathBuf,
    pub machine_types: Vec<String>,
    pub clips: Vec<ClipInfo>,
    /// Files with a clip's extension that break the layout (bad names, anomalies in train/).
    pub problems: Vec<FileError>,
}

/// A parsed clip file name (without its extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClipName {
    pub label: Option<Label>,
    pub machine_id: u32,
    pub number: u64,
}

/// Parses `normal_id_00_00000003`, `anomaly_id_02_00000127` or `id_05_00000000`.
pub fn parse_name(stem: &str) -> Result<ClipName, FileProblem> {
    let bad = || FileProblem::Name(stem.to_string());
    let (label, rest) = if let Some(rest) = stem.strip_prefix("normal_") {
        (Some(Label::Normal), rest)
    } else if let Some(rest) = stem.strip_prefix("anomaly_") {
        (Some(Label::Anomaly), rest)
    } else {
        (None, stem)
    };
    let rest = rest.strip_prefix("id_").ok_or_else(bad)?;
    let (id, number) = rest.split_once('_').ok_or_else(bad)?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(id) || !digits(number) {
        return Err(bad());
    }
    Ok(ClipName {
        label,
        machine_id: id.parse().map_err(|_| bad())?,
        number: number.parse().map_err(|_| bad())?,
    })
}

fn has_split_folders(dir: &Path) -> bool {
    ["train", "test"].iter().any(|s| dir.join(s).is_dir())
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, LayoutError> {
    let io = |source| LayoutError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        paths.push(entry.map_err(io)?.path());
    }
    paths.sort();
    Ok(paths)
}

/// The machine-type folders under `root`, by name. A root that is itself one machine
/// type's folder (it holds train/ or test/) counts as that type.
pub fn machine_types(root: &Path) -> Result<Vec<(String, PathBuf)>, LayoutError> {
    if !root.is_dir() {
        return Err(LayoutError::Io {
            path: root.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such folder"),
        });
    }
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    if has_split_folders(root) {
        let canonical = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        let type_name = name(&canonical).unwrap_or_else(|| "machine".into());
        return Ok(vec![(type_name, root.to_path_buf())]);
    }
    Ok(read_dir_sorted(root)?
        .into_iter()
        .filter(|p| p.is_dir() && has_split_folders(p))
        .filter_map(|p| name(&p).map(|n| (n, p)))
        .collect())
}

/// Lists the clips under `root`, of one machine type or of all.
pub fn scan(root: &Path, machine_type: Option<&str>) -> Result<DcaseIndex, LayoutError> {
    let mut types = machine_types(root)?;
    if types.is_empty() {
        return Err(LayoutError::NoMachineTypes {
            root: root.to_path_buf(),
        });
    }
    if let Some(asked) = machine_type {
        let found: Vec<String> = types.iter().map(|(n, _)| n.clone()).collect();
        types.retain(|(n, _)| n == asked);
        if types.is_empty() {
            return Err(LayoutError::UnknownMachineType {
                root: root.to_path_buf(),
                asked: asked.to_string(),
                found,
            });
        }
    }
    let mut clips = Vec::new();
    let mut problems = Vec::new();
    for (type_name, dir) in &types {
        for (split, folder) in [(Split::Train, "train"), (Split::Test, "test")] {
            let folder = dir.join(folder);
            if !folder.is_dir() {
                continue;
            }
            for path in read_dir_sorted(&folder)? {
                let extension = path.extension().and_then(|e| e.to_str());
                let origin = match extension.map(str::to_ascii_lowercase).as_deref() {
                    Some("wav") => Origin::Wav(path.clone()),
                    Some("npy") => Origin::Npy(path.clone()),
                    // README files, .DS_Store, score files: not clips.
                    _ => continue,
                };
                let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
                let parsed = parse_name(stem.as_deref().unwrap_or_default());
                match parsed {
                    Ok(name) if split == Split::Train && name.label == Some(Label::Anomaly) => {
                        problems.push(FileError::new(&path, FileProblem::AnomalyInTrain));
                    }
                    Ok(name) => clips.push(ClipInfo {
                        name: path
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        machine_type: type_name.clone(),
                        machine_id: name.machine_id,
                        split,
                        label: name.label,
                        origin,
                    }),
                    Err(problem) => problems.push(FileError::new(&path, problem)),
                }
            }
        }
    }
    if clips.is_empty() && problems.is_empty() {
        return Err(LayoutError::NoFiles {
            root: root.to_path_buf(),
            machine_type: machine_type.map(str::to_string),
        });
    }
    Ok(DcaseIndex {
        root: root.to_path_buf(),
        machine_types: types.into_iter().map(|(n, _)| n).collect(),
        clips,
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_all_three_kinds_parse_and_others_do_not() {
        assert_eq!(
            parse_name("normal_id_00_00000003").unwrap(),
            ClipName {
                label: Some(Label::Normal),
                machine_id: 0,
                number: 3
            }
        );
        assert_eq!(
            parse_name("anomaly_id_06_00000127").unwrap().label,
            Some(Label::Anomaly)
        );
        assert_eq!(parse_name("id_05_00000000").unwrap().label, None);
        for bad in [
            "",
            "normal",
            "normal_id_xx_00000001",
            "normal_id_00",
            "normal_id_00_",
            "abnormal_id_00_00000001",
            "normal_id_00_0000000a",
            "normal_id_-1_00000001",
        ] {
            assert!(
                matches!(parse_name(bad), Err(FileProblem::Name(ref n)) if n == bad),
                "{bad:?} parsed"
            );
        }
    }

    fn touch(root: &Path, rel: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"").unwrap();
    }

    #[test]
    fn a_scan_lists_clips_by_type_and_split_and_reports_misfits() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(root, "fan/train/normal_id_00_00000001.wav");
        touch(root, "fan/train/normal_id_00_00000000.wav");
        touch(root, "fan/train/anomaly_id_00_00000000.wav");
        touch(root, "fan/train/notes.txt");
        touch(root, "fan/test/anomaly_id_02_00000000.npy");
        touch(root, "fan/test/id_04_00000000.wav");
        touch(root, "fan/test/recording 7.wav");
        touch(root, "pump/train/normal_id_01_00000000.wav");
        std::fs::create_dir_all(root.join("not_a_type")).unwrap();

        let all = scan(root, None).unwrap();
        assert_eq!(all.machine_types, ["fan", "pump"]);
        let names: Vec<(&str, &str, Split, Option<Label>)> = all
            .clips
            .iter()
            .map(|c| (c.machine_type.as_str(), c.name.as_str(), c.split, c.label))
            .collect();
        assert_eq!(
            names,
            [
                (
                    "fan",
                    "normal_id_00_00000000.wav",
                    Split::Train,
                    Some(Label::Normal)
                ),
                (
                    "fan",
                    "normal_id_00_00000001.wav",
                    Split::Train,
                    Some(Label::Normal)
                ),
                (
                    "fan",
                    "anomaly_id_02_00000000.npy",
                    Split::Test,
                    Some(Label::Anomaly)
                ),
                ("fan", "id_04_00000000.wav", Split::Test, None),
                (
                    "pump",
                    "normal_id_01_00000000.wav",
                    Split::Train,
                    Some(Label::Normal)
                ),
            ]
        );
        let problems: Vec<String> = all.problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("anomaly_id_00_00000000.wav: an anomalous clip in a train/"));
        assert!(problems[1].contains("recording 7.wav: the file name does not follow"));

        let fan = scan(&root.join("fan"), None).unwrap();
        assert_eq!(
            fan.machine_types,
            ["fan"],
            "a machine type's own folder is a root too"
        );
        assert_eq!(scan(root, Some("pump")).unwrap().clips.len(), 1);
        let unknown = scan(root, Some("valve")).unwrap_err().to_string();
        assert!(
            unknown.contains("no machine type \"valve\"; it has: fan, pump"),
            "{unknown}"
        );
    }

    #[test]
    fn empty_and_missing_roots_say_what_is_expected() {
        let dir = tempfile::tempdir().unwrap();
        let none = scan(dir.path(), None).unwrap_err().to_string();
        assert!(none.contains("no machine-type folder"), "{none}");
        std::fs::create_dir_all(dir.path().join("fan/train")).unwrap();
        let empty = scan(dir.path(), None).unwrap_err().to_string();
        assert!(empty.contains("holds no .wav or .npy files"), "{empty}");
        let missing = scan(&dir.path().join("nope"), None)
            .unwrap_err()
            .to_string();
        assert!(missing.contains("nope: no such folder"), "{missing}");
    }
}
