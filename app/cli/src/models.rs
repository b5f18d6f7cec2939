//! `trainer-cli models`: the models `--model` takes.

use anyhow::Result;
use headroom_core::registry::built_in;

use crate::args::ModelsArgs;

pub fn run(args: ModelsArgs) -> Result<()> {
    let models = built_in();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&models)?);
        return Ok(());
    }
    println!(
        "{:<14} {:>11}  {:<22} {:<16} about",
        "model", "parameters", "input (mels x frames)", "default step"
    );
    for m in &models {
        let step = m.default_batch;
        println!(
            "{:<14} {:>11}  {:<22} {:<16} {}",
            m.name,
            m.parameters,
            match m.input.frames {
                // Whole utterances of every length.
                0 => format!("{} x any", m.input.mels),
                frames => format!("{} x {frames}", m.input.mels),
            },
            format!("{} x {}", step.spectrograms, step.patches),
            m.summary
        );
    }
    println!(
        "The first is the default. Train one with `trainer-cli train --model NAME`; its default \
         step is spectrograms x patches from each (the effective batch when no batch flag is given)."
    );
    Ok(())
}
