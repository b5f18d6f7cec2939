//! Greedy CTC decoding: the most likely token per frame, repeats merged, blanks dropped.

use headroom_datasets::speech::vocab::Vocabulary;

/// The tokens a best path spells: runs of the same token merged, then CTC's blanks left
/// out (a blank between two equal tokens keeps both).
pub fn collapse(path: &[usize]) -> Vec<usize> {
    let mut tokens = Vec::new();
    let mut previous = None;
    for &token in path {
        if previous != Some(token) && token != Vocabulary::BLANK {
            tokens.push(token);
        }
        previous = Some(token);
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_merge_and_blanks_separate() {
        let b = Vocabulary::BLANK;
        assert_eq!(collapse(&[b, 5, 5, b, 5, 6, 6, b, b]), vec![5, 5, 6]);
        assert_eq!(collapse(&[b, b]), Vec::<usize>::new());
        assert_eq!(collapse(&[]), Vec::<usize>::new());
    }
}
