//! What a kind of training measured on its held-out data, in a form every front-end shows
//! without knowing the task: a table with a row per split or group and a column per
//! measure. The patch task's anomaly scores have their own richer report
//! ([`super::EvaluationReport`]); any other task reports these.

use serde::{Deserialize, Serialize};

/// A task's figures on held-out data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// What was measured, in one line ("greedy decoding of the test split").
    pub about: String,
    /// The measures, in column order ("CER", "WER").
    pub measures: Vec<String>,
    pub rows: Vec<ResultsRow>,
    /// Files left out (`--on-bad-file skip`), each with its problem.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// One row: a split or a group of examples, and each measure's value on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultsRow {
    pub label: String,
    /// Examples the row measures.
    pub examples: usize,
    /// One per measure, in [`Results::measures`]' order.
    pub values: Vec<f64>,
}

impl Results {
    /// The table as `results.csv` holds it: `label,examples,` then one column per measure,
    /// each value in full.
    pub fn csv(&self) -> String {
        let mut csv = format!("label,examples,{}\n", self.measures.join(","));
        for row in &self.rows {
            let values: Vec<String> = row.values.iter().map(f64::to_string).collect();
            csv.push_str(&format!(
                "{},{},{}\n",
                row.label,
                row.examples,
                values.join(",")
            ));
        }
        csv
    }

    /// The first row's first measure: the figure a one-line summary names.
    pub fn headline(&self) -> Option<(&str, f64)> {
        let measure = self.measures.first()?;
        let value = *self.rows.first()?.values.first()?;
        Some((measure, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csv_has_a_column_per_measure_and_a_row_per_split() {
        let results = Results {
            about: "test".into(),
            measures: vec!["CER".into(), "WER".into()],
            rows: vec![
                ResultsRow {
                    label: "validation".into(),
                    examples: 8,
                    values: vec![0.25, 0.5],
                },
                ResultsRow {
                    label: "test".into(),
                    examples: 10,
                    values: vec![0.125, 0.375],
                },
            ],
            skipped: Vec::new(),
        };
        assert_eq!(
            results.csv(),
            "label,examples,CER,WER\nvalidation,8,0.25,0.5\ntest,10,0.125,0.375\n"
        );
        assert_eq!(results.headline(), Some(("CER", 0.25)));
    }
}
