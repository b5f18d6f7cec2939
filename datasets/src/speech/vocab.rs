//! The character vocabulary a transcription model spells with: every character of the
//! train transcripts, plus CTC's blank and the decoder's start/end token. Built from the
//! train split and saved with the model, so validation and test transcripts are spelled
//! with the same tokens; a character the train split never had is an error that names it
//! (a model cannot learn to write it).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Characters by token: [`Vocabulary::BLANK`], [`Vocabulary::BOUNDARY`], then the characters
/// in code-point order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vocabulary {
    chars: Vec<char>,
}

/// Characters a transcript holds that the vocabulary lacks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the transcript holds {} that the train transcripts never do; train on transcripts that \
     have {}, or leave this utterance out",
    describe(.0),
    if .0.len() == 1 { "it" } else { "them" }
)]
pub struct UnknownChars(pub Vec<char>);

fn describe(chars: &[char]) -> String {
    let listed: Vec<String> = chars.iter().map(|c| format!("{c:?}")).collect();
    match chars.len() {
        1 => format!("the character {}", listed[0]),
        _ => format!("the characters {}", listed.join(", ")),
    }
}

impl Vocabulary {
    /// CTC's blank: no character at this frame.
    pub const BLANK: usize = 0;
    /// The attention decoder's start of a transcript, and its end.
    pub const BOUNDARY: usize = 1;
    const SPECIAL: usize = 2;

    /// Every character of `transcripts` (after [`normalise`]).
    pub fn from_transcripts<'a>(transcripts: impl IntoIterator<Item = &'a str>) -> Self {
        let chars: BTreeSet<char> = transcripts
            .into_iter()
            .flat_map(|t| normalise(t).chars().collect::<Vec<_>>())
            .collect();
        Self {
            chars: chars.into_iter().collect(),
        }
    }

    /// Tokens, the two special ones included: the size of a model's output.
    pub fn len(&self) -> usize {
        self.chars.len() + Self::SPECIAL
    }

    /// Whether it has no character.
    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    /// `transcript`'s tokens, after [`normalise`]; every character it lacks is named.
    pub fn encode(&self, transcript: &str) -> Result<Vec<usize>, UnknownChars> {
        let text = normalise(transcript);
        let mut unknown = BTreeSet::new();
        let tokens: Vec<usize> = text
            .chars()
            .filter_map(|c| match self.chars.binary_search(&c) {
                Ok(at) => Some(at + Self::SPECIAL),
                Err(_) => {
                    unknown.insert(c);
                    None
                }
            })
            .collect();
        if unknown.is_empty() {
            Ok(tokens)
        } else {
            Err(UnknownChars(unknown.into_iter().collect()))
        }
    }

    /// The text of `tokens`, the special tokens (and any out of range) left out.
    pub fn decode(&self, tokens: &[usize]) -> String {
        tokens
            .iter()
            .filter_map(|&t| t.checked_sub(Self::SPECIAL))
            .filter_map(|at| self.chars.get(at))
            .collect()
    }
}

/// A transcript as the vocabulary spells it: runs of white space as one space, none at
/// either end.
pub fn normalise(transcript: &str) -> String {
    transcript.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcripts_round_trip_through_their_tokens() {
        let vocab = Vocabulary::from_transcripts(["HELLO WORLD", "GOOD  DAY\t"]);
        // Blank, boundary, then ' ' A D E G H L O R W Y.
        assert_eq!(vocab.len(), 2 + 11);
        let tokens = vocab.encode("  GOOD WORLD ").unwrap();
        assert_eq!(tokens.len(), "GOOD WORLD".len());
        assert!(
            tokens.iter().all(|&t| t >= 2),
            "no special token in a transcript"
        );
        assert_eq!(vocab.decode(&tokens), "GOOD WORLD");
        let with_specials = [vec![Vocabulary::BOUNDARY], tokens, vec![Vocabulary::BLANK]].concat();
        assert_eq!(vocab.decode(&with_specials), "GOOD WORLD");
    }

    #[test]
    fn a_character_the_train_split_lacks_is_named() {
        let vocab = Vocabulary::from_transcripts(["ABC"]);
        let error = vocab.encode("CAB'S ZZ").unwrap_err();
        assert_eq!(error, UnknownChars(vec![' ', '\'', 'S', 'Z']));
        let words = error.to_string();
        assert!(
            words.contains("the characters ' ', '\\'', 'S', 'Z'"),
            "{words}"
        );
        let one = vocab.encode("AQ").unwrap_err().to_string();
        assert!(
            one.contains("the character 'Q'") && one.contains("have it"),
            "{one}"
        );
    }

    #[test]
    fn it_is_saved_and_read_back_as_it_was() {
        let vocab = Vocabulary::from_transcripts(["ÉTÉ À LA MER"]);
        let json = serde_json::to_string(&vocab).unwrap();
        assert_eq!(serde_json::from_str::<Vocabulary>(&json).unwrap(), vocab);
    }
}
