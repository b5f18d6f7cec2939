//! Run files: a [`super::RunSpec`] in TOML, as `trainer-cli train` writes one into its run
//! directory ([`FILE_NAME`]) and reads one back (its run-file flag), and as the desktop app opens and
//! saves them. Core parses no TOML (each front-end does, with the toml crate); what is here is
//! theirs alike: the comment a file opens with, and an error placed at its line and key. A
//! run's spec written as a file is [`super::writing`]'s (the `run-files` feature; not in the
//! page).

use std::path::{Path, PathBuf};

/// The run file a run writes into its directory.
pub const FILE_NAME: &str = "run.toml";

/// A run file that does not read as a run: the file, where in it, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {message}", path.display(), place.as_ref().map(Place::words).unwrap_or_default())]
pub struct RunFileError {
    pub path: PathBuf,
    pub place: Option<Place>,
    pub message: String,
}

/// Where in a file's text something is: its line and column (from 1) and the key it is, or is
/// the value of, with the tables it is in (`memory.precision`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub line: usize,
    pub column: usize,
    pub key: Option<String>,
}

impl Place {
    /// The place of byte `at` of `text`; `None` past its end or inside a character.
    pub fn of(text: &str, at: usize) -> Option<Place> {
        let before = text.get(..at)?;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i);
        Some(Place {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
            key: key_at(
                &text[..line_start],
                &before[line_start..],
                &text[at..line_end],
            ),
        })
    }

    fn words(&self) -> String {
        let key = self
            .key
            .as_ref()
            .map(|key| format!(", key `{key}`"))
            .unwrap_or_default();
        format!(", line {}, column {}{key}", self.line, self.column)
    }
}

impl RunFileError {
    /// `message` about the file at `path`, whose text is `text`, at byte `at` of it.
    pub fn new(path: &Path, text: &str, at: Option<usize>, message: &str) -> Self {
        // serde places an unknown key of some tables (the budget's) at the table: the key is
        // the first of that name in it.
        let unknown = message
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split_once('`'))
            .map(|(key, _)| key);
        let at = at.map(|at| unknown.and_then(|key| key_in(text, at, key)).unwrap_or(at));
        Self {
            path: path.to_path_buf(),
            place: at.and_then(|at| Place::of(text, at)),
            // toml's messages are one line, but for a parse error's list of what it expected.
            message: message.trim().replace('\n', "; "),
        }
    }
}

/// The key at a place in a file: the table whose header is last in `above` (the lines
/// before the place's), the keys of the line whose values `before` (the line up to the place)
/// opens, and the key `after` (the rest of the line) starts with, when it starts with one (an
/// error about a key rather than a value).
fn key_at(above: &str, before: &str, after: &str) -> Option<String> {
    let line = format!("{before}{after}");
    if line.trim_start().starts_with('[') {
        return table_name(&line);
    }
    let mut path: Vec<String> = above
        .lines()
        .rev()
        .find_map(table_name)
        .map(|table| vec![table])
        .unwrap_or_default();
    path.extend(open_keys(before));
    if let Some((key, _)) = after.split_once('=')
        && !key.trim().is_empty()
        && key
            .trim()
            .chars()
            .all(|c| bare_key(c) || c == '.' || c == ' ')
    {
        path.push(key.trim().to_string());
    }
    (!path.is_empty()).then(|| path.join("."))
}

/// Where the key `key` is set in the table that starts at byte `at` of `text` (at its header
/// or inline), before the next table's header.
fn key_in(text: &str, at: usize, key: &str) -> Option<usize> {
    let table = text.get(at..)?;
    let end = table
        .match_indices("\n[")
        .map(|(i, _)| i)
        .next()
        .unwrap_or(table.len());
    let table = &table[..end];
    table.match_indices(key).find_map(|(i, _)| {
        let before = table[..i].chars().next_back();
        let after = table[i + key.len()..].trim_start();
        let whole = before.is_none_or(|c| !bare_key(c) && c != '.' && c != '"');
        (whole && after.starts_with('=')).then_some(at + i)
    })
}

fn bare_key(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// The table a header line (`[memory]`, `[memory.budget]`) opens.
fn table_name(line: &str) -> Option<String> {
    let inner = line.trim().strip_prefix('[')?;
    let inner = inner.strip_prefix('[').unwrap_or(inner);
    let (name, _) = inner.split_once(']')?;
    let parts: Vec<&str> = name.split('.').map(str::trim).collect();
    Some(parts.join("."))
}

/// The keys whose values are open at the end of `line`: `length = { steps = ` opens
/// `length` and `steps`.
fn open_keys(line: &str) -> Vec<String> {
    let mut keys: Vec<(usize, String)> = Vec::new();
    let (mut depth, mut start, mut quote) = (0usize, 0usize, None);
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '{' | '[') => {
                depth += 1;
                start = i + 1;
            }
            (None, '}' | ']') => {
                depth = depth.saturating_sub(1);
                keys.retain(|(d, _)| *d <= depth);
            }
            (None, ',') => {
                keys.retain(|(d, _)| *d < depth);
                start = i + 1;
            }
            (None, '=') => {
                keys.retain(|(d, _)| *d < depth);
                keys.push((depth, line[start..i].trim().to_string()));
                start = i + 1;
            }
            _ => {}
        }
    }
    keys.into_iter().map(|(_, key)| key).collect()
}

/// The comment a run file opens with: what it is, who wrote it (`written_by`, e.g.
/// `trainer-cli 0.1.0 (commit 3683677)`) and on which day (`unix_secs`). The front-end adds
/// how to give it back, in its words.
pub fn header(written_by: &str, unix_secs: u64) -> String {
    format!(
        "# A Headroom run: the settings of one run, for trainer-cli and the desktop app to\n\
         # train again. Written by {written_by} on {} (UTC).\n",
        date(unix_secs)
    )
}

/// The day `unix_secs` falls on, as 2026-12-07 (the proleptic Gregorian calendar, UTC).
pub fn date(unix_secs: u64) -> String {
    // Howard Hinnant's civil_from_days, for days since 1970-01-01.
    let z = (unix_secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str, at: &str) -> Option<String> {
        let at = text.find(at).unwrap();
        Place::of(text, at).unwrap().key
    }

    #[test]
    fn a_place_names_its_line_column_and_key() {
        let text = "model = \"dcase-ae\"\nlr = \"fast\"\n\n[memory]\nfraction = 0.5\n\
                    precision = \"f64\"\n\n[memory.budget]\nkind = \"given\"\nbytez = 3\n";
        let place = Place::of(text, text.find("\"fast\"").unwrap()).unwrap();
        assert_eq!(
            place,
            Place {
                line: 2,
                column: 6,
                key: Some("lr".into())
            }
        );
        assert_eq!(key(text, "\"f64\""), Some("memory.precision".into()));
        assert_eq!(key(text, "bytez"), Some("memory.budget.bytez".into()));
        assert_eq!(key(text, "[memory.budget]"), Some("memory.budget".into()));
        assert_eq!(key(text, "memory.budget]"), Some("memory.budget".into()));
        assert_eq!(key(text, "model"), Some("model".into()));
        assert_eq!(Place::of(text, text.len() + 1), None);
    }

    #[test]
    fn keys_inside_inline_tables_are_named_with_their_table() {
        let text = "length = { steps = \"x\" }\nsplit = { stride = 3, placement = \"odd\" }\n";
        assert_eq!(key(text, "\"x\""), Some("length.steps".into()));
        assert_eq!(key(text, "\"odd\""), Some("split.placement".into()));
        assert_eq!(key(text, "stride"), Some("split.stride".into()));
        let array = "[data]\nspeech = { train = \"a\", test = [1, 'b=c'] }\n";
        assert_eq!(key(array, "'b"), Some("data.speech.test".into()));
    }

    #[test]
    fn an_error_reads_as_the_file_its_place_and_what() {
        let text = "seed = 1\nstepz = 4\n";
        let error = RunFileError::new(
            Path::new("runs/a/run.toml"),
            text,
            text.find("stepz"),
            "unknown field `stepz`, expected one of `model`, `seed`\n",
        );
        assert_eq!(
            error.to_string(),
            "runs/a/run.toml, line 2, column 1, key `stepz`: unknown field `stepz`, \
             expected one of `model`, `seed`"
        );
        // An unknown key placed at its table: found in it.
        let text = "seed = 1\n\n[memory.budget]\nkind = \"given\"\nbytez = 3\n[data]\nbytez = 1\n";
        let error = RunFileError::new(
            Path::new("run.toml"),
            text,
            text.find("[memory.budget]"),
            "unknown field `bytez`, expected `bytes`",
        );
        let place = error.place.unwrap();
        assert_eq!(place.line, 5);
        assert_eq!(place.key.as_deref(), Some("memory.budget.bytez"));
        let inline = "[memory]\nbudget = { kind = \"given\", bytez = 3 }\n";
        let at = inline.find('{');
        let error = RunFileError::new(Path::new("r"), inline, at, "unknown field `bytez`");
        assert_eq!(
            error.place.unwrap().key.as_deref(),
            Some("memory.budget.bytez")
        );
        let nowhere = RunFileError::new(Path::new("a.toml"), text, None, "bad");
        assert_eq!(nowhere.to_string(), "a.toml: bad");
    }

    #[test]
    fn dates_are_days_of_the_calendar() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400), "2000-02-29");
        // 2026-12-07 12:00 UTC.
        assert_eq!(date(1_796_644_800), "2026-12-07");
        assert!(header("trainer-cli 0.1.0", 0).contains("on 1970-01-01 (UTC)"));
        assert!(header("x", 0).lines().all(|l| l.starts_with('#')));
    }
}
