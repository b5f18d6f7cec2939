//! The user's own folder, picked or dropped in the page: what the run calls it.

use headroom_datasets::LoadedFile;

/// The picked folder's name, which stands for `--data-root`: the first folder of the files'
/// paths when they share one, else a name for loose files.
pub fn folder_name(files: &[LoadedFile]) -> Option<String> {
    let first = |f: &LoadedFile| {
        f.path
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
    };
    let name = first(files.first()?)?;
    let shared = files
        .iter()
        .all(|f| f.path.components().count() > 1 && first(f).as_ref() == Some(&name));
    Some(if shared { name } else { "dropped files".into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(paths: &[&str]) -> Vec<LoadedFile> {
        paths
            .iter()
            .map(|p| LoadedFile {
                path: p.into(),
                bytes: Vec::new().into(),
            })
            .collect()
    }

    #[test]
    fn a_folder_is_named_by_its_files_first_folder_and_loose_files_say_so() {
        let picked = files(&["dev_data/fan/train/a.wav", "dev_data/pump/test/b.wav"]);
        assert_eq!(folder_name(&picked).as_deref(), Some("dev_data"));
        let two = files(&["fan/train/a.wav", "pump/train/b.wav"]);
        assert_eq!(folder_name(&two).as_deref(), Some("dropped files"));
        let loose = files(&["a.wav"]);
        assert_eq!(folder_name(&loose).as_deref(), Some("dropped files"));
        assert_eq!(folder_name(&[]), None, "no files: the built-in dataset");
    }
}
