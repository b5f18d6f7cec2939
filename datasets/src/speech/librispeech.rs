//! The LibriSpeech layout: `ROOT/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt`, each line
//! `<speaker>-<chapter>-<utterance> TRANSCRIPT`, beside `<speaker>-<chapter>-<utterance>.flac`
//! (WAV accepted too). ROOT is one split's folder (`train-clean-100`, `dev-clean`, ...); any
//! depth of folders is searched for transcript files.

use std::path::{Path, PathBuf};

use super::{SpeechIndex, Utterance};
use crate::error::{FileError, FileProblem};

#[derive(Debug, thiserror::Error)]
pub enum LibriSpeechError {
    #[error("{}: {source}; the data root must be a folder in the LibriSpeech layout", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} holds no *.trans.txt file (expected ROOT/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt \
         beside the chapter's .flac files, e.g. train-clean-100/19/198/19-198.trans.txt)",
        root.display()
    )]
    NoTranscripts { root: PathBuf },
}

/// Finds every transcript file under `root` and lists its utterances, in path order.
pub fn scan(root: &Path) -> Result<SpeechIndex, LibriSpeechError> {
    let mut transcripts = Vec::new();
    find_transcripts(root, &mut transcripts)?;
    if transcripts.is_empty() {
        return Err(LibriSpeechError::NoTranscripts {
            root: root.to_path_buf(),
        });
    }
    transcripts.sort();
    let mut index = SpeechIndex::default();
    for path in transcripts {
        let text = std::fs::read_to_string(&path).map_err(|source| LibriSpeechError::Io {
            path: path.clone(),
            source,
        })?;
        let found = parse(&text, &path, &|audio: &Path| audio.is_file());
        index.utterances.extend(found.utterances);
        index.problems.extend(found.problems);
    }
    Ok(index)
}

fn find_transcripts(dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), LibriSpeechError> {
    let entries = std::fs::read_dir(dir).map_err(|source| LibriSpeechError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let path = entry
            .map_err(|source| LibriSpeechError::Io {
                path: dir.to_path_buf(),
                source,
            })?
            .path();
        if path.is_dir() {
            find_transcripts(&path, found)?;
        } else if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().ends_with(".trans.txt"))
        {
            found.push(path);
        }
    }
    Ok(())
}

/// The utterances of one chapter's transcript file `text`, read from `path`; `exists` says
/// whether an audio file is there. Each utterance's audio is its id with `.flac`, else
/// `.wav`, in the transcript's folder; its speaker the id's first part.
pub fn parse(text: &str, path: &Path, exists: &dyn Fn(&Path) -> bool) -> SpeechIndex {
    let folder = path.parent().unwrap_or(Path::new(""));
    let mut index = SpeechIndex::default();
    for (at, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let here = PathBuf::from(format!("{}:{}", path.display(), at + 1));
        let problem = |reason: String| FileError::new(&here, FileProblem::Listing(reason));
        let (id, transcript) = line.split_once(' ').unwrap_or((line, ""));
        if transcript.trim().is_empty() {
            index
                .problems
                .push(problem(format!("utterance {id}: the transcript is empty")));
            continue;
        }
        let candidates = ["flac", "wav"].map(|ext| folder.join(format!("{id}.{ext}")));
        let Some(audio) = candidates.iter().find(|a| exists(a)) else {
            index.problems.push(problem(format!(
                "utterance {id}: no {id}.flac or {id}.wav beside the transcript"
            )));
            continue;
        };
        index.utterances.push(Utterance {
            id: id.to_string(),
            audio: audio.clone(),
            transcript: transcript.trim().to_string(),
            duration_s: None,
            speaker: id.split('-').next().map(str::to_string),
        });
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chapter_lists_its_utterances_with_their_speaker() {
        let text = "19-198-0000 NORTHANGER ABBEY\n19-198-0001 THIS LITTLE WORK\n\n";
        let exists = |p: &Path| p.ends_with("19-198-0000.flac") || p.ends_with("19-198-0001.wav");
        let index = parse(text, Path::new("/ls/19/198/19-198.trans.txt"), &exists);
        assert!(index.problems.is_empty(), "{:?}", index.problems);
        let [a, b] = &index.utterances[..] else {
            panic!("{:?}", index.utterances)
        };
        assert_eq!(a.audio, Path::new("/ls/19/198/19-198-0000.flac"));
        assert_eq!(a.transcript, "NORTHANGER ABBEY");
        assert_eq!(a.speaker.as_deref(), Some("19"));
        assert_eq!(
            b.audio,
            Path::new("/ls/19/198/19-198-0001.wav"),
            "WAV where no FLAC is"
        );
    }

    #[test]
    fn a_missing_recording_or_an_empty_transcript_is_a_problem_on_its_line() {
        let text = "19-198-0000 FINE\n19-198-0001\n19-198-0002 GONE\n";
        let exists = |p: &Path| !p.to_string_lossy().contains("0002");
        let index = parse(text, Path::new("19-198.trans.txt"), &exists);
        assert_eq!(index.utterances.len(), 1);
        let problems: Vec<String> = index.problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            problems,
            [
                "19-198.trans.txt:2: utterance 19-198-0001: the transcript is empty",
                "19-198.trans.txt:3: utterance 19-198-0002: no 19-198-0002.flac or \
                 19-198-0002.wav beside the transcript",
            ]
        );
    }

    #[test]
    fn a_folder_tree_is_searched_and_an_empty_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let chapter = dir.path().join("train-clean-5/19/198");
        std::fs::create_dir_all(&chapter).unwrap();
        std::fs::write(chapter.join("19-198.trans.txt"), "19-198-0000 HELLO\n").unwrap();
        std::fs::write(chapter.join("19-198-0000.flac"), b"").unwrap();
        let index = scan(dir.path()).unwrap();
        assert_eq!(index.utterances.len(), 1);
        assert_eq!(index.utterances[0].transcript, "HELLO");

        let empty = tempfile::tempdir().unwrap();
        let error = scan(empty.path()).unwrap_err().to_string();
        assert!(error.contains("holds no *.trans.txt file"), "{error}");
    }
}
