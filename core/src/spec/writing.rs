//! A run's spec written as a run file: the header and a note of what a re-run keeps, then
//! the settings in a fixed order, as trainer-cli writes one into every run's directory and
//! the desktop app into its runs' and its saved files (the `run-files` feature; the page
//! writes none).

use std::path::{Path, PathBuf};

use super::RunSpec;
use super::file::{FILE_NAME, header};

/// The run file of a run: `resolved` (its spec as it trains) after the header, which says how
/// to train it again (`again`, in the front-end's words) and what a re-run keeps.
pub fn text(
    resolved: &RunSpec,
    written_by: &str,
    again: &str,
    unix_secs: u64,
) -> Result<String, toml::ser::Error> {
    let mut note = format!(
        "{again} The backend, the device and the memory budget are as the run was asked for, \
         not as this machine resolved them, so that the file runs on another machine too; \
         every other setting is what the run trained with."
    );
    if resolved.planner {
        note.push_str(
            " With the planner on, the step's split is planned again where the file runs (the \
             run's plan event shows this machine's; pin its parts under [split] and [memory] \
             to train that split anywhere).",
        );
    }
    Ok(format!(
        "{}{}\n{}",
        header(written_by, unix_secs),
        comment(&note),
        document(resolved)?
    ))
}

/// The order a run file lists the top-level settings in (the rest follow, sorted): what the
/// run trains, then how, then its tables.
const ORDER: [&str; 20] = [
    "model",
    "asr_size",
    "gan_size",
    "negatives",
    "backend",
    "device",
    "planner",
    "length",
    "lr",
    "clip_norm",
    "ema",
    "seed",
    "checkpoint_every",
    "validate_every",
    "empty_cache_every",
    "data",
    "split",
    "memory",
    "classifier",
    "sashimi",
];

/// `spec` as a TOML document: the settings in [`ORDER`], a table of one value (the run's
/// length) and a nested table of at most two values (the budget) on one line, empty tables
/// left out.
pub fn document(spec: &RunSpec) -> Result<String, toml::ser::Error> {
    let table = toml::Table::try_from(spec)?;
    let mut out = String::new();
    section(&table, "", &mut out);
    Ok(out)
}

fn section(table: &toml::Table, path: &str, out: &mut String) {
    let mut keys: Vec<&String> = table.keys().collect();
    if path.is_empty() {
        keys.sort_by_key(|key| ORDER.iter().position(|o| o == key).unwrap_or(ORDER.len()));
    }
    let inline = |t: &toml::Table| {
        let scalars = t
            .values()
            .all(|v| !matches!(v, toml::Value::Table(_) | toml::Value::Array(_)));
        scalars && (t.len() == 1 || (t.len() == 2 && !path.is_empty()))
    };
    let mut lines = String::new();
    let mut tables = Vec::new();
    for key in keys {
        match &table[key] {
            toml::Value::Table(t) if t.is_empty() => {}
            toml::Value::Table(t) if !inline(t) => tables.push((key, t)),
            value => lines.push_str(&format!("{key} = {value}\n")),
        }
    }
    if !lines.is_empty() {
        if !path.is_empty() {
            out.push_str(&format!("\n[{path}]\n"));
        }
        out.push_str(&lines);
    }
    for (key, t) in tables {
        let inner = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        section(t, &inner, out);
    }
}

/// `words` as comment lines of at most about 90 characters.
pub fn comment(words: &str) -> String {
    let mut lines = String::new();
    let mut line = String::from("#");
    for word in words.split_whitespace() {
        if line.len() + 1 + word.len() > 90 {
            lines.push_str(&line);
            lines.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    lines.push_str(&line);
    lines.push('\n');
    lines
}

/// Writes `text` as the run file of the run directory `dir` (atomically: a reader sees the
/// old file or the whole new one), and returns its path.
pub fn write(dir: &Path, text: &str) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(FILE_NAME);
    headroom_datasets::error::write_atomically(&path, |w| {
        std::io::Write::write_all(w, text.as_bytes())
    })?;
    Ok(path)
}
