//! Precomputed spectrograms as `.npy` files: `[n_mels, frames]`, float32 or float16, the
//! format of the "64mel-spectr-dcase2020-task2-dev-dataset" that seed 001 reads.

use std::io::Cursor;
use std::path::Path;

use half::f16;
use npyz::{DType, NpyFile, Order, TypeChar, WriterBuilder};

use crate::clip::Spectrogram;
use crate::error::{FileError, FileProblem, check_finite, write_atomically};

/// Reads a spectrogram; `n_mels` is what the dataset's features are (checked).
pub fn read_npy(path: &Path, n_mels: usize) -> Result<Spectrogram, FileError> {
    let bytes = std::fs::read(path).map_err(|e| FileError::new(path, e.into()))?;
    decode_npy(&bytes, n_mels).map_err(|p| FileError::new(path, p))
}

/// Decodes a whole `.npy` file held in memory. The header's shape is checked against the
/// bytes that follow it before anything is allocated.
pub fn decode_npy(bytes: &[u8], n_mels: usize) -> Result<Spectrogram, FileProblem> {
    let bad = |e: std::io::Error| FileProblem::Npy(e.to_string());
    check_header_length(bytes)?;
    if let Some(elements) = declared_elements(bytes)
        && elements.is_none_or(|n| n.saturating_mul(2) > bytes.len() as u64)
    {
        // Smallest accepted dtype is 2 bytes; the exact check follows once npyz parsed it.
        return Err(FileProblem::Oversized {
            asked: elements.map_or(u64::MAX, |n| n.saturating_mul(2)),
            held: bytes.len() as u64,
        });
    }
    let mut cursor = Cursor::new(bytes);
    let header = npyz::NpyHeader::from_reader(&mut cursor).map_err(bad)?;
    let held = bytes.len() as u64 - cursor.position();
    let file = NpyFile::with_header(header, Cursor::new(&bytes[cursor.position() as usize..]));
    let shape = file.shape().to_vec();
    let width = match file.dtype() {
        DType::Plain(t) if t.type_char() == TypeChar::Float && matches!(t.size_field(), 2 | 4) => {
            t.size_field()
        }
        DType::Plain(t) => return Err(FileProblem::Dtype(t.to_string())),
        other => return Err(FileProblem::Dtype(other.descr())),
    };
    let shape_error = || FileProblem::Shape {
        shape: shape.clone(),
        n_mels,
    };
    let [mels, frames] = shape[..] else {
        return Err(shape_error());
    };
    if mels != n_mels as u64 || frames == 0 {
        return Err(shape_error());
    }
    let asked = mels
        .checked_mul(frames)
        .and_then(|n| n.checked_mul(width))
        .unwrap_or(u64::MAX);
    if asked > held {
        return Err(FileProblem::Oversized { asked, held });
    }
    let order = file.order();
    let values: Vec<f32> = if width == 4 {
        file.into_vec::<f32>().map_err(bad)?
    } else {
        let halves = file.into_vec::<f16>().map_err(bad)?;
        halves.into_iter().map(f32::from).collect()
    };
    let (mels, frames) = (mels as usize, frames as usize);
    let data = match order {
        Order::C => values,
        // Column-major: value (m, f) sits at f * mels + m.
        Order::Fortran => (0..mels * frames)
            .map(|i| values[(i % frames) * mels + i / frames])
            .collect(),
    };
    check_finite(&data)?;
    Ok(Spectrogram {
        n_mels: mels,
        frames,
        data,
    })
}

/// npyz 0.9 allocates the header's declared length before reading it; a version-2/3 header
/// declares it in 4 bytes, so a corrupt one asked for 632 MiB from a 160-byte file (found
/// by `fuzz/run`, kept in `datasets/tests/fuzz_regressions/npy/`).
fn check_header_length(bytes: &[u8]) -> Result<(), FileProblem> {
    let (start, declared) = match (bytes.get(6), bytes.get(8..12)) {
        (Some(1), Some(b)) => (10, u64::from(u16::from_le_bytes([b[0], b[1]]))),
        (Some(2 | 3), Some(b)) => (12, u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        // Too short or an unknown version: npyz says what is wrong.
        _ => return Ok(()),
    };
    let held = (bytes.len() as u64).saturating_sub(start);
    if declared > held {
        return Err(FileProblem::Npy(format!(
            "its header declares {declared} bytes but the file holds {held} after the preamble"
        )));
    }
    // The header of a plain array is one dict holding one shape tuple. npyz parses it with
    // a backtracking grammar that took 81 s on 167 bytes of nested braces (found by
    // `fuzz/run`), so anything more nested is refused before it is parsed.
    let header = &bytes[start as usize..(start + declared) as usize];
    let brackets = header
        .iter()
        .filter(|b| matches!(b, b'{' | b'[' | b'('))
        .count();
    if brackets > 2 {
        return Err(FileProblem::Npy(
            "its header is not the plain dictionary of a float array".into(),
        ));
    }
    Ok(())
}

/// The element count a header's `'shape'` declares: `None` inside when it overflows u64,
/// `None` outside when the shape cannot be found (npyz then reports the header). npyz 0.9
/// multiplies the shape without overflow checks (a panic in debug builds and a wrapped
/// count in release ones, found by this module's shape tests), so an absurd shape is
/// stopped here first.
fn declared_elements(bytes: &[u8]) -> Option<Option<u64>> {
    let header = bytes.get(..bytes.len().min(65_536 + 12))?;
    let text = String::from_utf8_lossy(header);
    let after = &text[text.find("'shape'")? + "'shape'".len()..];
    let open = after.find('(')?;
    let close = after.find(')')?;
    let inner = after.get(open + 1..close)?;
    let mut product = Some(1u64);
    for part in inner.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let n: u64 = part.trim_end_matches('L').parse().ok()?;
        product = product.and_then(|p| p.checked_mul(n));
    }
    Some(product)
}

/// Writes `[n_mels, frames]` float32, atomically.
pub fn write_npy(path: &Path, spectrogram: &Spectrogram) -> std::io::Result<()> {
    write_atomically(path, |out| {
        let shape = [spectrogram.n_mels as u64, spectrogram.frames as u64];
        let mut writer = npyz::WriteOptions::<f32>::new()
            .default_dtype()
            .shape(&shape)
            .writer(out)
            .begin_nd()?;
        writer.extend(spectrogram.data.iter().copied())?;
        writer.finish()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_nested_header_is_refused_before_it_is_parsed() {
        let mut nested = raw_header("<f4", "(4, 2)");
        // Same length, braces where the padding was.
        let pad = nested.iter().position(|&b| b == b'}').unwrap() + 1;
        for b in &mut nested[pad..pad + 40] {
            *b = b'{';
        }
        nested.extend_from_slice(&[0u8; 32]);
        let error = decode_npy(&nested, 4).unwrap_err().to_string();
        assert!(error.contains("not the plain dictionary"), "{error}");
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
            Err(FileProblem::Oversized { asked, .. }) if asked >= 32_000_000_000_000
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
