//! `trainer-cli generate`: WAV files sampled from a trained sashimi run.

use anyhow::{Context, Result, bail};
use headroom_core::waveform::generate::generate_from_checkpoint;
use headroom_datasets::audio::{Audio, write_wav};

use crate::args::GenerateArgs;

pub fn run(args: GenerateArgs) -> Result<()> {
    if args.clips == 0 || !(args.seconds > 0.0 && args.seconds.is_finite()) {
        bail!(
            "--clips {} --seconds {}: ask for at least one clip of a positive length",
            args.clips,
            args.seconds
        );
    }
    let started = std::time::Instant::now();
    let generated = generate_from_checkpoint(&args.checkpoint, args.clips, args.seconds, args.seed)
        .with_context(|| format!("cannot generate from {}", args.checkpoint.display()))?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot make {}", args.out.display()))?;
    let samples = generated.clips.first().map_or(0, Vec::len);
    for (i, samples) in generated.clips.into_iter().enumerate() {
        let path = args.out.join(format!("sample-{i:02}.wav"));
        let audio = Audio {
            sample_rate: generated.sample_rate,
            samples,
        };
        write_wav(&path, &audio).with_context(|| format!("cannot write {}", path.display()))?;
        println!("{}", path.display());
    }
    println!(
        "{} clips of {samples} samples ({} Hz) in {:.1} s",
        args.clips,
        generated.sample_rate,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
