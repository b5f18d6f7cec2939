//! Precomputed spectrograms as `.npy` files: `[n_mels, frames]`, float32 or float16, the
//! format of the "64mel-spectr-dcase2020-task2-dev-dataset" that seed 001 reads.
//!
//! Read and written here rather than with npyz: fuzzing found npyz 0.9 allocating a header's
//! declared length unchecked (632 MiB for a 160-byte file) and its header grammar (pest)
//! taking 81 s on 167 bytes of nested braces, and pest's stack guard builds C and assembly
//! (psm) that stops the macOS cross-check. A plain array's header is a three-key dict; the
//! parser below reads exactly that, in one pass. npyz still writes the tests' inputs.

use std::path::Path;

use half::f16;

use crate::error::{FileError, FileProblem, check_finite, write_atomically};
use crate::spectrogram::Spectrogram;

const MAGIC: &[u8] = b"\x93NUMPY";

/// Reads a spectrogram; `n_mels` is what the dataset's features are (checked).
pub fn read_npy(path: &Path, n_mels: usize) -> Result<Spectrogram, FileError> {
    let bytes = std::fs::read(path).map_err(|e| FileError::new(path, e.into()))?;
    decode_npy(&bytes, n_mels).map_err(|p| FileError::new(path, p))
}

/// What a header says.
struct Header {
    little_endian: bool,
    /// Bytes per value: 2 (float16) or 4 (float32).
    width: u64,
    fortran_order: bool,
    shape: Vec<u64>,
}

/// Decodes a whole `.npy` file held in memory. The header's shape is checked against the
/// bytes that follow it before anything is allocated.
pub fn decode_npy(bytes: &[u8], n_mels: usize) -> Result<Spectrogram, FileProblem> {
    let (header, data) = split_header(bytes)?;
    let header = parse_header(header)?;
    let shape_error = || FileProblem::Shape {
        shape: header.shape.clone(),
        n_mels,
    };
    let [mels, frames] = header.shape[..] else {
        return Err(shape_error());
    };
    if mels != n_mels as u64 || frames == 0 {
        return Err(shape_error());
    }
    let held = data.len() as u64;
    let asked = mels
        .checked_mul(frames)
        .and_then(|n| n.checked_mul(header.width))
        .unwrap_or(u64::MAX);
    if asked > held {
        return Err(FileProblem::Oversized { asked, held });
    }
    let data = &data[..asked as usize];
    let values: Vec<f32> = match (header.width, header.little_endian) {
        (4, true) => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        (4, false) => data
            .chunks_exact(4)
            .map(|b| f32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        (_, true) => data
            .chunks_exact(2)
            .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        (_, false) => data
            .chunks_exact(2)
            .map(|b| f16::from_be_bytes([b[0], b[1]]).to_f32())
            .collect(),
    };
    let (mels, frames) = (mels as usize, frames as usize);
    let data = if header.fortran_order {
        // Column-major: value (m, f) sits at f * mels + m.
        (0..mels * frames)
            .map(|i| values[(i % frames) * mels + i / frames])
            .collect()
    } else {
        values
    };
    check_finite(&data)?;
    Ok(Spectrogram {
        n_mels: mels,
        frames,
        data,
    })
}

/// The header's text and the data after it, from the magic string and the declared length.
fn split_header(bytes: &[u8]) -> Result<(&str, &[u8]), FileProblem> {
    let bad = |why: &str| FileProblem::Npy(why.to_string());
    if !bytes.starts_with(MAGIC) {
        return Err(bad("it does not start with the .npy magic string"));
    }
    let (start, declared) = match (bytes.get(6), bytes.get(8..12)) {
        (Some(1), Some(b)) => (10, u64::from(u16::from_le_bytes([b[0], b[1]]))),
        (Some(2 | 3), Some(b)) => (12, u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        (Some(v), Some(_)) => {
            return Err(FileProblem::Npy(format!("format version {v} is unknown")));
        }
        _ => return Err(bad("it ends inside its preamble")),
    };
    let held = (bytes.len() as u64).saturating_sub(start);
    if declared > held {
        return Err(FileProblem::Npy(format!(
            "its header declares {declared} bytes but the file holds {held} after the preamble"
        )));
    }
    let end = (start + declared) as usize;
    let text = std::str::from_utf8(&bytes[start as usize..end])
        .map_err(|_| bad("its header is not text"))?;
    Ok((text, &bytes[end..]))
}

/// Reads `{'descr': '<f4', 'fortran_order': False, 'shape': (64, 313), }` in any key order,
/// with either quote; anything else a plain float array would not have is an error.
fn parse_header(text: &str) -> Result<Header, FileProblem> {
    let bad = |why: String| FileProblem::Npy(why);
    let value_after = |key: &str| -> Result<&str, FileProblem> {
        let at = ["'", "\""]
            .iter()
            .find_map(|q| {
                text.find(&format!("{q}{key}{q}"))
                    .map(|i| i + key.len() + 2)
            })
            .ok_or_else(|| bad(format!("its header has no '{key}'")))?;
        let rest = text[at..].trim_start();
        rest.strip_prefix(':')
            .map(str::trim_start)
            .ok_or_else(|| bad(format!("its header's '{key}' has no value")))
    };
    let descr = value_after("descr")?;
    let quote = descr.chars().next().filter(|c| *c == '\'' || *c == '"');
    let descr = quote
        .and_then(|q| descr[1..].split_once(q).map(|(d, _)| d))
        .ok_or_else(|| FileProblem::Dtype(descr.chars().take(40).collect()))?;
    let (little_endian, width) = match descr {
        "<f4" | "=f4" | "|f4" => (true, 4),
        ">f4" => (false, 4),
        "<f2" | "=f2" | "|f2" => (true, 2),
        ">f2" => (false, 2),
        other => return Err(FileProblem::Dtype(other.to_string())),
    };
    let order = value_after("fortran_order")?;
    let fortran_order = if order.starts_with("True") {
        true
    } else if order.starts_with("False") {
        false
    } else {
        return Err(bad(
            "its header's 'fortran_order' is neither True nor False".into(),
        ));
    };
    let shape = value_after("shape")?;
    let inner = shape
        .strip_prefix('(')
        .and_then(|s| s.split_once(')'))
        .map(|(inner, _)| inner)
        .ok_or_else(|| bad("its header's 'shape' is not a tuple".into()))?;
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.trim_end_matches('L').parse::<u64>())
        .collect::<Result<Vec<u64>, _>>()
        .map_err(|_| {
            bad(format!(
                "its header's shape ({inner}) is not a tuple of sizes"
            ))
        })?;
    Ok(Header {
        little_endian,
        width,
        fortran_order,
        shape,
    })
}

/// Writes `[n_mels, frames]` little-endian float32, atomically.
pub fn write_npy(path: &Path, spectrogram: &Spectrogram) -> std::io::Result<()> {
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}",
        spectrogram.n_mels, spectrogram.frames
    );
    // numpy pads the header with spaces so the data starts on a 64-byte boundary.
    while !(MAGIC.len() + 4 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    write_atomically(path, |out| {
        use std::io::Write;
        out.write_all(MAGIC)?;
        out.write_all(&[1, 0])?;
        out.write_all(&(header.len() as u16).to_le_bytes())?;
        out.write_all(header.as_bytes())?;
        for v in &spectrogram.data {
            out.write_all(&v.to_le_bytes())?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use npyz::{Order, WriterBuilder};

    fn spectrogram(n_mels: usize, frames: usize) -> Spectrogram {
        Spectrogram {
            n_mels,
            frames,
            data: (0..n_mels * frames).map(|i| i as f32 * 0.5 - 3.0).collect(),
        }
    }

    fn npy_bytes<T: npyz::AutoSerialize + Copy>(
        shape: &[u64],
        order: Order,
        values: &[T],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = npyz::WriteOptions::<T>::new()
            .default_dtype()
            .shape(shape)
            .order(order)
            .writer(&mut out)
            .begin_nd()
            .unwrap();
        w.extend(values.iter().copied()).unwrap();
        w.finish().unwrap();
        out
    }

    #[test]
    fn float32_round_trips_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.npy");
        let s = spectrogram(4, 5);
        write_npy(&path, &s).unwrap();
        assert_eq!(read_npy(&path, 4).unwrap(), s);
    }

    #[test]
    fn float16_and_fortran_order_read_as_the_same_spectrogram() {
        let s = spectrogram(3, 4);
        let halves: Vec<f16> = s.data.iter().map(|&v| f16::from_f32(v)).collect();
        assert_eq!(
            decode_npy(&npy_bytes(&[3, 4], Order::C, &halves), 3).unwrap(),
            s
        );
        let column_major: Vec<f32> = (0..12).map(|i| s.at(i % 3, i / 3)).collect();
        assert_eq!(
            decode_npy(&npy_bytes(&[3, 4], Order::Fortran, &column_major), 3).unwrap(),
            s
        );
    }

    #[test]
    fn wrong_shape_dtype_and_values_are_named() {
        let s = spectrogram(4, 5);
        let three_d = npy_bytes(&[1, 4, 5], Order::C, &s.data);
        assert!(matches!(
            decode_npy(&three_d, 4),
            Err(FileProblem::Shape { .. })
        ));
        let wrong_mels = npy_bytes(&[4, 5], Order::C, &s.data);
        let error = decode_npy(&wrong_mels, 64).unwrap_err();
        assert!(error.to_string().contains("n_mels = 64"), "{error}");
        let ints = npy_bytes(&[4, 5], Order::C, &[1i32; 20]);
        assert!(matches!(decode_npy(&ints, 4), Err(FileProblem::Dtype(d)) if d == "<i4"));
        let mut nan = s.data.clone();
        nan[7] = f32::NAN;
        assert!(matches!(
            decode_npy(&npy_bytes(&[4, 5], Order::C, &nan), 4),
            Err(FileProblem::NonFinite { first: 7, .. })
        ));
        assert!(matches!(
            decode_npy(b"\x93NUMPY", 4),
            Err(FileProblem::Npy(_))
        ));
        assert!(matches!(decode_npy(b"", 4), Err(FileProblem::Npy(_))));
    }

    /// A version-1.0 header written by hand, so that it can lie about the shape.
    fn raw_header(descr: &str, shape: &str) -> Vec<u8> {
        let mut dict =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + dict.len() + 1) % 64 != 0 {
            dict.push(' ');
        }
        dict.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        bytes.extend_from_slice(dict.as_bytes());
        bytes
    }

    #[test]
    fn an_absurd_shape_is_rejected_before_allocating() {
        let honest = raw_header("<f4", "(4, 5)");
        assert_eq!(honest.len() % 64, 0);
        let mut ok = honest.clone();
        ok.extend_from_slice(&[0u8; 80]);
        assert_eq!(decode_npy(&ok, 4).unwrap().frames, 5);

        let mut liar = raw_header("<f4", "(4, 4000000000000)");
        liar.extend_from_slice(&[0u8; 80]);
        assert!(matches!(
            decode_npy(&liar, 4),
            Err(FileProblem::Oversized {
                asked: 64_000_000_000_000,
                held: 80
            })
        ));
        // A lie that still looks plausible in size is caught by the exact check.
        let mut small_lie = raw_header("<f4", "(4, 6)");
        small_lie.extend_from_slice(&[0u8; 80]);
        assert!(matches!(
            decode_npy(&small_lie, 4),
            Err(FileProblem::Oversized {
                asked: 96,
                held: 80
            })
        ));
        let mut overflow = raw_header("<f4", "(4, 9223372036854775807)");
        overflow.extend_from_slice(&[0u8; 80]);
        assert!(matches!(
            decode_npy(&overflow, 4),
            Err(FileProblem::Oversized {
                asked: u64::MAX,
                ..
            })
        ));
        // A file cut inside its data.
        assert!(matches!(
            decode_npy(&ok[..ok.len() - 4], 4),
            Err(FileProblem::Oversized {
                asked: 80,
                held: 76
            })
        ));
    }
}
