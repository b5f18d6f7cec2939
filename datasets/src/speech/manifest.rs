//! Manifests: one utterance per line, as TSV (`audio<TAB>transcript[<TAB>duration]`, an
//! optional header line starting `audio`) or as JSON lines (`{"audio": ..., "text": ...,
//! "duration": ...}`, `transcript` accepted for `text`), chosen by the file's extension
//! (`.jsonl` or `.json`: JSON lines; anything else: TSV). A relative audio path is relative to
//! the manifest's folder. A line that cannot be an utterance is a problem naming the file and
//! the line, never a reason to drop the rest.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{SpeechIndex, Utterance};
use crate::error::{FileError, FileProblem};

/// Why a manifest could not be read at all (its lines' problems are listed instead).
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{}: cannot read the manifest ({source})", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: the manifest lists no utterance", path.display())]
    Empty { path: PathBuf },
}

/// A JSON line's fields.
#[derive(Deserialize)]
struct JsonEntry {
    audio: String,
    #[serde(alias = "transcript")]
    text: String,
    #[serde(default)]
    duration: Option<f64>,
}

/// Reads the manifest at `path`; each listed audio file must exist.
pub fn read(path: &Path) -> Result<SpeechIndex, ManifestError> {
    let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let index = parse(&text, path, &|audio: &Path| audio.is_file());
    if index.utterances.is_empty() && index.problems.is_empty() {
        return Err(ManifestError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(index)
}

/// The utterances of a manifest's `text`, read from `path` (what errors name and relative
/// audio paths start from); `exists` says whether an audio file is there.
pub fn parse(text: &str, path: &Path, exists: &dyn Fn(&Path) -> bool) -> SpeechIndex {
    let json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("jsonl") || e.eq_ignore_ascii_case("json"));
    let folder = path.parent().unwrap_or(Path::new(""));
    let mut index = SpeechIndex::default();
    for (at, line) in text.lines().enumerate() {
        let number = at + 1;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || (!json && at == 0 && is_tsv_header(line)) {
            continue;
        }
        let here = || PathBuf::from(format!("{}:{number}", path.display()));
        let entry = if json {
            json_entry(line)
        } else {
            tsv_entry(line)
        };
        let (audio, transcript, duration_s) = match entry {
            Ok(entry) => entry,
            Err(reason) => {
                index
                    .problems
                    .push(FileError::new(here(), FileProblem::Listing(reason)));
                continue;
            }
        };
        let audio = folder.join(audio);
        let problem = if transcript.trim().is_empty() {
            Some(format!("{}: the transcript is empty", audio.display()))
        } else if !exists(&audio) {
            Some(format!("{}: no such audio file", audio.display()))
        } else {
            None
        };
        if let Some(reason) = problem {
            index
                .problems
                .push(FileError::new(here(), FileProblem::Listing(reason)));
            continue;
        }
        index.utterances.push(Utterance {
            id: format!("{}:{number}", file_name(path)),
            audio,
            transcript: transcript.trim().to_string(),
            duration_s,
            speaker: None,
        });
    }
    index
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

fn is_tsv_header(line: &str) -> bool {
    line.split('\t')
        .next()
        .is_some_and(|first| first.trim().eq_ignore_ascii_case("audio"))
}

type Entry = (String, String, Option<f64>);

fn tsv_entry(line: &str) -> Result<Entry, String> {
    let mut fields = line.split('\t');
    let (Some(audio), Some(transcript)) = (fields.next(), fields.next()) else {
        return Err("expected audio<TAB>transcript[<TAB>duration]".into());
    };
    let duration_s = match fields.next().map(str::trim) {
        None | Some("") => None,
        Some(d) => Some(duration(
            d.parse()
                .map_err(|_| format!("duration {d:?} is not a number"))?,
        )?),
    };
    Ok((audio.trim().to_string(), transcript.to_string(), duration_s))
}

fn json_entry(line: &str) -> Result<Entry, String> {
    let entry: JsonEntry = serde_json::from_str(line)
        .map_err(|e| format!("not a JSON object with \"audio\" and \"text\" ({e})"))?;
    let duration_s = entry.duration.map(duration).transpose()?;
    Ok((entry.audio, entry.text, duration_s))
}

fn duration(seconds: f64) -> Result<f64, String> {
    if seconds.is_finite() && seconds > 0.0 {
        Ok(seconds)
    } else {
        Err(format!(
            "duration {seconds} is not a positive number of seconds"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_exist(_: &Path) -> bool {
        true
    }

    #[test]
    fn a_tsv_manifest_lists_utterances_relative_to_its_folder() {
        let text = "audio\ttranscript\tduration\na.flac\tHELLO WORLD\t1.5\nsub/b.wav\tGOOD DAY\n";
        let index = parse(text, Path::new("/data/train.tsv"), &all_exist);
        assert!(index.problems.is_empty(), "{:?}", index.problems);
        let [a, b] = &index.utterances[..] else {
            panic!("two utterances: {:?}", index.utterances)
        };
        assert_eq!(a.audio, Path::new("/data/a.flac"));
        assert_eq!(
            (a.transcript.as_str(), a.duration_s),
            ("HELLO WORLD", Some(1.5))
        );
        assert_eq!(a.id, "train.tsv:2");
        assert_eq!(b.audio, Path::new("/data/sub/b.wav"));
        assert_eq!(b.duration_s, None);
    }

    #[test]
    fn a_json_lines_manifest_takes_text_or_transcript() {
        let text = concat!(
            "{\"audio\": \"a.flac\", \"text\": \"yes\", \"duration\": 0.8}\n",
            "\n",
            "{\"audio\": \"/abs/b.flac\", \"transcript\": \"no\"}\n"
        );
        let index = parse(text, Path::new("/data/dev.jsonl"), &all_exist);
        assert!(index.problems.is_empty(), "{:?}", index.problems);
        assert_eq!(index.utterances.len(), 2);
        assert_eq!(index.utterances[1].audio, Path::new("/abs/b.flac"));
        assert_eq!(index.utterances[1].transcript, "no");
    }

    #[test]
    fn each_bad_line_is_a_problem_naming_its_line_and_the_rest_are_kept() {
        let text =
            "a.flac\tFINE\nonly-a-path\nb.flac\t   \nc.flac\tX\t-2\ngone.flac\tHI\nd.flac\tOK\t2\n";
        let exists = |p: &Path| !p.ends_with("gone.flac");
        let index = parse(text, Path::new("m.tsv"), &exists);
        let kept: Vec<&str> = index
            .utterances
            .iter()
            .map(|u| u.transcript.as_str())
            .collect();
        assert_eq!(kept, ["FINE", "OK"]);
        let problems: Vec<String> = index.problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(
            problems[0].starts_with("m.tsv:2: ") && problems[0].contains("audio<TAB>transcript")
        );
        assert!(
            problems[1].starts_with("m.tsv:3: ") && problems[1].contains("transcript is empty")
        );
        assert!(problems[2].starts_with("m.tsv:4: ") && problems[2].contains("positive number"));
        assert!(
            problems[3].starts_with("m.tsv:5: ")
                && problems[3].contains("gone.flac: no such audio file")
        );
    }

    #[test]
    fn a_missing_or_empty_manifest_is_an_error_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read(&dir.path().join("none.tsv")).unwrap_err().to_string();
        assert!(
            missing.contains("none.tsv: cannot read the manifest"),
            "{missing}"
        );
        std::fs::write(dir.path().join("empty.tsv"), "audio\ttranscript\n").unwrap();
        let empty = read(&dir.path().join("empty.tsv")).unwrap_err().to_string();
        assert!(empty.contains("lists no utterance"), "{empty}");
    }
}
