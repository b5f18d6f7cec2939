//! `trainer-cli models`: the models `--model` takes.

use anyhow::Result;
use headroom_core::model::built_in;

use crate::args::ModelsArgs;

pub fn run(args: ModelsArgs) -> Result<()> {
    let models = built_in();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&models)?);
        return Ok(());
    }
    println!(
        "{:<14} {:>11}  {:<24} about",
        "model", "parameters", "input (mels x frames)"
    );
    for m in &models {
        println!(
            "{:<14} {:>11}  {:<24} {}",
            m.name,
            m.parameters,
            format!("{} x {}", m.input.mels, m.input.frames),
            m.summary
        );
    }
    println!("The first is the default. Train one with `trainer-cli train --model NAME`.");
    Ok(())
}
