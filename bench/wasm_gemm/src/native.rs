//! Each product of the mix timed natively, one thread. Prints one JSON line: each product's
//! calls, m, k, n and seconds a product (written by hand: no JSON crate for one list).
use std::time::Instant;

use wasm_gemm_bench::{Operands, reps, shapes::STEP};

/// Each product's fastest of this many passes over the mix, as the page takes them.
const PASSES: usize = 3;

fn main() {
    let mut operands: Vec<Operands> = STEP.iter().map(Operands::new).collect();
    let mut seconds = vec![f64::INFINITY; STEP.len()];
    for _ in 0..PASSES {
        for ((p, operands), best) in STEP.iter().zip(&mut operands).zip(&mut seconds) {
            operands.multiply(p, 2);
            let n = reps(p);
            let start = Instant::now();
            std::hint::black_box(operands.multiply(p, n));
            *best = best.min(start.elapsed().as_secs_f64() / n as f64);
        }
    }
    let rows: Vec<String> = STEP
        .iter()
        .zip(&seconds)
        .map(|(p, seconds)| {
            format!(
                r#"{{"calls":{},"m":{},"k":{},"n":{},"seconds":{seconds:e}}}"#,
                p.calls, p.m, p.k, p.n
            )
        })
        .collect();
    println!("[{}]", rows.join(","));
}
