//! Greedy decoding, both ways the recogniser is trained: CTC's (the most likely token per
//! frame, repeats merged, blanks dropped) and the attention decoder's (the most likely next
//! character, one at a time, until the end token).

use burn::tensor::Tensor;
use headroom_datasets::speech::vocab::Vocabulary;

use crate::model::asr::AsrNetworks;
use crate::readback::{self, ReadbackError};

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

/// Greedy attention decoding of a micro-batch: from the start token (`boundary`), each
/// utterance's most likely next token given those before it, until the decoder says
/// `boundary` or the utterance has `most[i]` tokens. The whole prefix is decoded again at
/// each token (no cache of the decoder's keys): a transcript of k characters costs k
/// decoder passes over up to k tokens.
pub async fn attention_greedy(
    networks: &AsrNetworks,
    memory: Tensor<3>,
    memory_lengths: &[usize],
    boundary: usize,
    most: &[usize],
) -> Result<Vec<Vec<usize>>, ReadbackError> {
    let n = memory_lengths.len();
    // Rows of one length: a finished row goes on with `boundary`, left out of its tokens.
    let mut prefixes = vec![vec![boundary]; n];
    let mut heard: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut done: Vec<bool> = most.iter().map(|&m| m == 0).collect();
    while !done.iter().all(|&d| d) {
        let next =
            readback::floats(networks.next_tokens(&prefixes, memory.clone(), memory_lengths))
                .await?;
        for (i, prefix) in prefixes.iter_mut().enumerate() {
            let token = next[i] as usize;
            if !done[i] {
                if token == boundary {
                    done[i] = true;
                } else {
                    heard[i].push(token);
                    done[i] = heard[i].len() >= most[i];
                }
            }
            prefix.push(if done[i] { boundary } else { token });
        }
    }
    Ok(heard
        .into_iter()
        .map(|tokens| {
            tokens
                .into_iter()
                .filter(|&t| t != Vocabulary::BLANK)
                .collect()
        })
        .collect())
}

/// The most tokens attention decoding gives an utterance: twice what greedy CTC heard in
/// it, and ten more, and never more than its encoder frames (what CTC could spell at
/// most). A decoder that has not learnt to end its transcripts (the built-in corpus's
/// random letters take it more than the default run's 480 steps) would otherwise decode
/// every utterance to its encoder frames, hundreds of passes a batch.
pub fn most_tokens(ctc_tokens: usize, encoder_frames: usize) -> usize {
    (2 * ctc_tokens + 10).min(encoder_frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of three utterances (60, 40 and 20 frames) decoded at once: each row stops at
    /// its cap (none for the second), holds no start/end or blank token, and the shortest,
    /// padded in the batch, decodes as it does alone.
    #[test]
    fn attention_decoding_keeps_rows_apart_and_within_their_caps() {
        use crate::backend::BackendKind;
        use crate::model::asr::AsrShape;
        use burn::tensor::Distribution;

        const MELS: usize = 80;
        let device = BackendKind::Flex.device().unwrap();
        device.seed(11);
        let networks = AsrNetworks::new(AsrShape::TINY, MELS, 30, &device);
        let frames = [60, 40, 20];
        let features: Tensor<3> =
            Tensor::random([3, 60, MELS], Distribution::Normal(0.0, 1.0), &device);
        let (memory, lengths) = networks.encode(features.clone(), &frames);
        let most = [12, 0, 12];
        let boundary = Vocabulary::BOUNDARY;
        let heard = crate::readback::block_on(attention_greedy(
            &networks, memory, &lengths, boundary, &most,
        ))
        .unwrap();
        assert!(heard[1].is_empty());
        for (tokens, cap) in heard.iter().zip(most) {
            assert!(tokens.len() <= cap, "{tokens:?}");
            assert!(
                !tokens.contains(&boundary) && !tokens.contains(&Vocabulary::BLANK),
                "{tokens:?}"
            );
        }
        let alone = features.narrow(0, 2, 1).narrow(1, 0, 20);
        let (memory, lengths) = networks.encode(alone, &frames[2..]);
        let by_itself = crate::readback::block_on(attention_greedy(
            &networks,
            memory,
            &lengths,
            boundary,
            &most[2..],
        ))
        .unwrap();
        assert_eq!(by_itself[0], heard[2]);
    }

    #[test]
    fn most_tokens_follow_ctc_and_stay_within_the_encoder_frames() {
        assert_eq!(most_tokens(0, 100), 10);
        assert_eq!(most_tokens(20, 100), 50);
        assert_eq!(most_tokens(60, 100), 100);
    }

    #[test]
    fn repeats_merge_and_blanks_separate() {
        let b = Vocabulary::BLANK;
        assert_eq!(collapse(&[b, 5, 5, b, 5, 6, 6, b, b]), vec![5, 5, 6]);
        assert_eq!(collapse(&[b, b]), Vec::<usize>::new());
        assert_eq!(collapse(&[]), Vec::<usize>::new());
    }
}
