//! Each product of the mix timed natively, one thread. Prints one JSON line: each product's
//! calls, m, k, n and seconds a product (written by hand: no JSON crate for one list).
use std::time::Instant;

use wasm_gemm_bench::{Operands, reps, shapes::STEP};

fn main() {
    let rows: Vec<String> = STEP
        .iter()
        .map(|p| {
            let mut operands = Operands::new(p);
            operands.multiply(p, 2);
            let n = reps(p);
            let start = Instant::now();
            std::hint::black_box(operands.multiply(p, n));
            let seconds = start.elapsed().as_secs_f64() / n as f64;
            format!(
                r#"{{"calls":{},"m":{},"k":{},"n":{},"seconds":{seconds:e}}}"#,
                p.calls, p.m, p.k, p.n
            )
        })
        .collect();
    println!("[{}]", rows.join(","));
}
