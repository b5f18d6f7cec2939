//! The DCASE 2020 Task 2 layout: `ROOT/<machine_type>/{train,test}/` holding
//! `normal_id_XX_NNNNNNNN.wav`, `anomaly_id_XX_NNNNNNNN.wav` or, in evaluation sets,
//! unlabelled `id_XX_NNNNNNNN.wav`; `.npy` spectrograms may stand in for the recordings.
//! Scanning lists files and parses names; nothing is read.

use std::path::{Path, PathBuf};

use crate::clip::{ClipInfo, LoadedFile, Origin};
use crate::error::{FileError, FileProblem};
use crate::label::{Label, Split};

/// The machine types of the challenge; other folder names are accepted too.
pub const MACHINE_TYPES: [&str; 6] = ["ToyCar", "ToyConveyor", "fan", "pump", "slider", "valve"];

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("{}: {source}; the data root must be a folder in the DCASE layout", path.display())]
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
    let mut found = Found::default();
    for (type_name, dir) in &types {
        for (split, folder) in [(Split::Train, "train"), (Split::Test, "test")] {
            let folder = dir.join(folder);
            if !folder.is_dir() {
                continue;
            }
            for path in read_dir_sorted(&folder)? {
                found.add(&path, type_name, split, |format| match format {
                    ClipFormat::Wav => Origin::Wav(path.clone()),
                    ClipFormat::Npy => Origin::Npy(path.clone()),
                });
            }
        }
    }
    found.into_index(
        root,
        types.into_iter().map(|(n, _)| n).collect(),
        machine_type,
    )
}

/// The two kinds of clip file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClipFormat {
    Wav,
    Npy,
}

/// What a scan has found so far: one rule for files on disk and files handed over.
#[derive(Default)]
struct Found {
    clips: Vec<ClipInfo>,
    problems: Vec<FileError>,
}

impl Found {
    /// Adds the file at `path`, in `split` of `type_name`, if its extension makes it a clip.
    fn add(
        &mut self,
        path: &Path,
        type_name: &str,
        split: Split,
        origin: impl FnOnce(ClipFormat) -> Origin,
    ) {
        let extension = path.extension().and_then(|e| e.to_str());
        let format = match extension.map(str::to_ascii_lowercase).as_deref() {
            Some("wav") => ClipFormat::Wav,
            Some("npy") => ClipFormat::Npy,
            // README files, .DS_Store, score files: not clips.
            _ => return,
        };
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        match parse_name(stem.as_deref().unwrap_or_default()) {
            Ok(name) if split == Split::Train && name.label == Some(Label::Anomaly) => {
                self.problems
                    .push(FileError::new(path, FileProblem::AnomalyInTrain));
            }
            Ok(name) => self.clips.push(ClipInfo {
                name: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                machine_type: type_name.to_string(),
                machine_id: name.machine_id,
                split,
                label: name.label,
                origin: origin(format),
            }),
            Err(problem) => self.problems.push(FileError::new(path, problem)),
        }
    }

    fn into_index(
        self,
        root: &Path,
        machine_types: Vec<String>,
        machine_type: Option<&str>,
    ) -> Result<DcaseIndex, LayoutError> {
        if self.clips.is_empty() && self.problems.is_empty() {
            return Err(LayoutError::NoFiles {
                root: root.to_path_buf(),
                machine_type: machine_type.map(str::to_string),
            });
        }
        Ok(DcaseIndex {
            root: root.to_path_buf(),
            machine_types,
            clips: self.clips,
            problems: self.problems,
        })
    }
}

/// Lists the clips among files handed over as bytes (a web page's picked or dropped
/// folder), by their paths, as `scan` lists a folder: a file counts when it sits directly in
/// a `train/` or `test/` folder, whose parent names its machine type (`root` when the split
/// folder is the path's first).
pub fn index_files(
    root: &Path,
    files: &[LoadedFile],
    machine_type: Option<&str>,
) -> Result<DcaseIndex, LayoutError> {
    let root_name = root.to_string_lossy().into_owned();
    let mut placed: Vec<(String, Split, LoadedFile)> = Vec::new();
    for file in files {
        let folders: Vec<String> = file
            .path
            .parent()
            .map(|p| {
                p.components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let split = match folders.last().map(String::as_str) {
            Some("train") => Split::Train,
            Some("test") => Split::Test,
            _ => continue,
        };
        let type_name = match folders.len() {
            1 => root_name.clone(),
            n => folders[n - 2].clone(),
        };
        placed.push((type_name, split, file.clone()));
    }
    let mut types: Vec<String> = placed.iter().map(|(t, _, _)| t.clone()).collect();
    types.sort();
    types.dedup();
    if types.is_empty() {
        return Err(LayoutError::NoMachineTypes {
            root: root.to_path_buf(),
        });
    }
    if let Some(asked) = machine_type {
        if !types.iter().any(|t| t == asked) {
            return Err(LayoutError::UnknownMachineType {
                root: root.to_path_buf(),
                asked: asked.to_string(),
                found: types,
            });
        }
        placed.retain(|(t, _, _)| t == asked);
        types.retain(|t| t == asked);
    }
    // The order `scan` gives: by type, train before test, then by path.
    placed.sort_by(|a, b| (&a.0, a.1, &a.2.path).cmp(&(&b.0, b.1, &b.2.path)));
    let mut found = Found::default();
    for (type_name, split, file) in placed {
        let path = file.path.clone();
        found.add(&path, &type_name, split, |format| match format {
            ClipFormat::Wav => Origin::WavBytes(file),
            ClipFormat::Npy => Origin::NpyBytes(file),
        });
    }
    found.into_index(root, types, machine_type)
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

    /// Two machine types, with what a real folder holds besides clips: a misnamed recording,
    /// an anomaly in train/, a text file, a recording outside train/ and test/, a folder
    /// that is not a machine type.
    fn sample_layout(root: &Path) {
        touch(root, "fan/train/normal_id_00_00000001.wav");
        touch(root, "fan/train/normal_id_00_00000000.wav");
        touch(root, "fan/train/anomaly_id_00_00000000.wav");
        touch(root, "fan/train/notes.txt");
        touch(root, "fan/test/anomaly_id_02_00000000.npy");
        touch(root, "fan/test/id_04_00000000.wav");
        touch(root, "fan/test/recording 7.wav");
        touch(root, "fan/normal_id_00_00000009.wav");
        touch(root, "pump/train/normal_id_01_00000000.wav");
        std::fs::create_dir_all(root.join("not_a_type")).unwrap();
    }

    #[test]
    fn a_scan_lists_clips_by_type_and_split_and_reports_misfits() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        sample_layout(root);

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

    /// The files under `dir`, as a page has them when its user picks `dir`: by paths that
    /// start with the folder's name.
    fn picked(dir: &Path, name: &str) -> Vec<LoadedFile> {
        let mut files = Vec::new();
        let mut folders = vec![dir.to_path_buf()];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    folders.push(path);
                } else {
                    files.push(LoadedFile {
                        path: Path::new(name).join(path.strip_prefix(dir).unwrap()),
                        bytes: std::fs::read(&path).unwrap().into(),
                    });
                }
            }
        }
        files
    }

    #[test]
    fn files_handed_over_index_as_a_scan_of_their_folder_does() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        sample_layout(root);
        let listed = |index: &DcaseIndex| -> Vec<(String, String, Split, Option<Label>)> {
            index
                .clips
                .iter()
                .map(|c| (c.machine_type.clone(), c.name.clone(), c.split, c.label))
                .collect()
        };
        let on_disk = scan(root, None).unwrap();
        let handed = index_files(Path::new("dev_data"), &picked(root, "dev_data"), None).unwrap();
        assert_eq!(listed(&handed), listed(&on_disk));
        assert_eq!(handed.machine_types, on_disk.machine_types);
        assert_eq!(handed.problems.len(), 2, "{:?}", handed.problems);
        assert!(matches!(
            &handed.clips[0].origin,
            Origin::WavBytes(f) if f.path == Path::new("dev_data/fan/train/normal_id_00_00000000.wav")
        ));
        assert!(matches!(handed.clips[2].origin, Origin::NpyBytes(_)));
        let problem = handed.problems[0].to_string();
        assert!(
            problem.contains("dev_data/fan/train/anomaly_id_00_00000000.wav"),
            "{problem}"
        );

        // A machine type's own folder picked: its name is the type.
        let fan = index_files(Path::new("fan"), &picked(&root.join("fan"), "fan"), None).unwrap();
        assert_eq!(fan.machine_types, ["fan"]);
        let pump = index_files(Path::new("d"), &picked(root, "d"), Some("pump")).unwrap();
        assert_eq!(pump.clips.len(), 1);
        let unknown = index_files(Path::new("d"), &picked(root, "d"), Some("valve"))
            .unwrap_err()
            .to_string();
        assert!(
            unknown.contains("d has no machine type \"valve\"; it has: fan, pump"),
            "{unknown}"
        );
        let loose = index_files(
            Path::new("music"),
            &picked(&root.join("fan/test"), "music"),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            loose.contains("music holds no machine-type folder"),
            "{loose}"
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
