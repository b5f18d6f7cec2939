//! Speech corpora for transcription: utterances (a recording and its transcript) listed by
//! a manifest (TSV or JSON lines, [`manifest`]) or found in the LibriSpeech folder layout
//! ([`librispeech`]), and the character vocabulary a model spells them with ([`vocab`]).
//! Indexing reads the listings, never the audio: a corpus of any size is indexed in
//! moments and its recordings are read when a batch needs them.

pub mod librispeech;
pub mod manifest;
pub mod synthetic;
pub mod vocab;

use std::path::PathBuf;

use crate::error::FileError;

/// One utterance: where its audio is and what is said in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Utterance {
    /// A name unique in its corpus (LibriSpeech's `19-198-0001`, or the manifest's line).
    pub id: String,
    /// A WAV or FLAC file.
    pub audio: PathBuf,
    /// What is said, as written in the listing (trimmed).
    pub transcript: String,
    /// Seconds, when the listing gives it: the planner sorts by length without reading the
    /// audio (otherwise the audio's header is read once when the run checks its data).
    pub duration_s: Option<f64>,
    /// Who speaks, when the layout says (LibriSpeech's speaker folder).
    pub speaker: Option<String>,
}

/// What an index found: the utterances, and the entries that could not be utterances (a
/// missing audio file, an empty transcript, a line that does not parse), each naming its
/// file and line.
#[derive(Debug, Default)]
pub struct SpeechIndex {
    pub utterances: Vec<Utterance>,
    pub problems: Vec<FileError>,
}
