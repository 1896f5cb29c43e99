//! Cosine similarity search: a one-shot top-k over a row-major matrix, and [`VectorSet`], a
//! growable set of id-keyed unit vectors for dedup-on-insert and recall.
//!
//! Scores are cosine similarities computed in f32 and clamped to `[-1, 1]`; results are ordered
//! best first with ties broken by the lower row index, so they do not depend on how the scan was
//! split across threads. Rows whose norm is zero have no direction and are skipped. NaN or
//! infinite inputs are errors naming the position.

mod base64;
mod set;
mod simd;
mod topk;

use rayon::prelude::*;

use crate::{CoreError, CoreResult};
pub use base64::{decode_f32_rows, encoded_len, split_f32_members};
pub use set::{SharedRows, VectorSet};
pub use topk::Scored;

/// Below this many f32 elements (4 MB) one thread finishes before a second one is worth waking:
/// waking a sleeping pool thread costs tens of µs on a virtual machine, while one core scans
/// 4 MB in about 50 µs.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 20;
/// Rows scored per kernel call: the scores stay in L1 while the top-k consumes them.
const BLOCK_ROWS: usize = 128;

/// Checks a query and returns it scaled to unit length.
///
/// `what` names the argument in errors (`"query"`). The norm is taken in f64 so tiny or huge but
/// finite vectors still normalise.
pub(crate) fn unit_query(query: &[f32], dim: usize, what: &str) -> CoreResult<Vec<f32>> {
    if query.len() != dim {
        return Err(CoreError::DimensionMismatch {
            what: what.to_string(),
            expected: dim,
            got: query.len(),
        });
    }
    let norm = checked_norm(query, |j| format!("{what}[{j}]"))?;
    if norm == 0.0 {
        return Err(CoreError::ZeroVector {
            what: what.to_string(),
        });
    }
    Ok(query
        .iter()
        .map(|&x| (f64::from(x) / norm) as f32)
        .collect())
}

/// The L2 norm in f64, or an error naming the first non-finite element.
pub(crate) fn checked_norm(v: &[f32], name: impl Fn(usize) -> String) -> CoreResult<f64> {
    // In f64 the sum of squares of finite f32 values cannot overflow, so it is finite exactly
    // when every element is: one branch-free pass, and a second only to name the culprit.
    let sum: f64 = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    if !sum.is_finite() {
        if let Some((j, &x)) = v.iter().enumerate().find(|(_, x)| !x.is_finite()) {
            return Err(non_finite(name(j), x));
        }
    }
    Ok(sum.sqrt())
}

pub(crate) fn non_finite(what: String, value: f32) -> CoreError {
    CoreError::NonFiniteVector {
        what,
        value: if value.is_nan() {
            "NaN".to_string()
        } else {
            value.to_string()
        },
    }
}

/// The `k` rows of `matrix` (`rows × dim`, row-major) most cosine-similar to `query`, best first.
///
/// Only rows scoring at least `threshold` are returned when it is given. Zero rows are skipped.
///
/// # Errors
/// `DimensionMismatch` when `query` does not have `dim` elements, `ZeroVector` for a zero
/// query, `NonFiniteVector` naming the first NaN/infinite element (lowest row first),
/// `InvalidArgument` for `k == 0`, a NaN threshold or a matrix of the wrong length.
pub fn cosine_top_k(
    matrix: &[f32],
    rows: usize,
    dim: usize,
    query: &[f32],
    k: usize,
    threshold: Option<f64>,
) -> CoreResult<Vec<Scored>> {
    if k == 0 {
        return Err(CoreError::InvalidArgument(
            "k must be at least 1, got 0".into(),
        ));
    }
    if threshold.is_some_and(f64::is_nan) {
        return Err(CoreError::InvalidArgument(
            "threshold must be a number, got NaN".into(),
        ));
    }
    if rows.checked_mul(dim) != Some(matrix.len()) {
        return Err(CoreError::InvalidArgument(format!(
            "matrix holds {} values, not rows × dim = {rows} × {dim}",
            matrix.len()
        )));
    }
    let q = unit_query(query, dim, "query")?;
    let level = simd::float_level();
    let scan =
        |start: usize, end: usize| scan_rows(level, matrix, dim, &q, start, end, k, threshold);
    let top = if rows * dim >= PARALLEL_MIN_ELEMENTS && rayon::current_num_threads() > 1 {
        let chunks = chunk_bounds(rows, dim);
        let parts: Vec<CoreResult<topk::TopK>> =
            chunks.par_iter().map(|&(s, e)| scan(s, e)).collect();
        let mut merged = topk::TopK::new(k, threshold);
        // Chunks are in row order, so the first error found is the lowest row's.
        for part in parts {
            merged.merge(part?);
        }
        merged
    } else {
        scan(0, rows)?
    };
    Ok(top.into_sorted())
}

/// Splits `rows` into contiguous ranges: a few per thread so a core slowed by other work does
/// not hold the rest back, but each large enough to amortise the task overhead.
pub(crate) fn chunk_bounds(rows: usize, dim: usize) -> Vec<(usize, usize)> {
    let threads = rayon::current_num_threads().max(1);
    let min_rows = (PARALLEL_MIN_ELEMENTS / 4 / dim.max(1)).max(BLOCK_ROWS);
    let count = (threads * 4).min(rows.div_ceil(min_rows)).max(1);
    let per = rows.div_ceil(count);
    (0..count)
        .map(|c| (c * per, ((c + 1) * per).min(rows)))
        .filter(|(s, e)| s < e)
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn scan_rows(
    level: simd::Level,
    matrix: &[f32],
    dim: usize,
    q: &[f32],
    start: usize,
    end: usize,
    k: usize,
    threshold: Option<f64>,
) -> CoreResult<topk::TopK> {
    let mut top = topk::TopK::new(k, threshold);
    let mut dots = [0.0_f32; BLOCK_ROWS];
    let mut norms2 = [0.0_f32; BLOCK_ROWS];
    let mut block = start;
    while block < end {
        let len = BLOCK_ROWS.min(end - block);
        let rows = &matrix[block * dim..(block + len) * dim];
        simd::fused_dot_norm2(level, rows, dim, q, &mut dots[..len], &mut norms2[..len]);
        // Branch-free and over slices of exactly `len` elements (no bounds checks), so the
        // compiler vectorises the square roots and divisions.
        let mut any_slow = false;
        let mut scores = [0.0_f32; BLOCK_ROWS];
        for ((score, &dot), &n2) in scores[..len]
            .iter_mut()
            .zip(&dots[..len])
            .zip(&norms2[..len])
        {
            // Outside this range f32 lost the answer (overflow, underflow, NaN): such rows are
            // redone in f64 below, which also finds the offending element.
            any_slow |= !((1e-30..=1e30).contains(&n2) & dot.is_finite());
            *score = (dot / n2.sqrt()).clamp(-1.0, 1.0);
        }
        if any_slow {
            for i in 0..len {
                let (dot, n2) = (dots[i], norms2[i]);
                if !((1e-30..=1e30).contains(&n2) && dot.is_finite()) {
                    let row = &rows[i * dim..(i + 1) * dim];
                    scores[i] = slow_row_score(row, q, block + i)?.unwrap_or(f32::NAN);
                }
            }
        }
        let mut floor = top.floor();
        for (i, &score) in scores[..len].iter().enumerate() {
            // NaN marks a zero row: it fails this test and is skipped.
            if score >= floor {
                top.push(score, block + i);
                floor = top.floor();
            }
        }
        block += len;
    }
    Ok(top)
}

fn slow_row_score(row: &[f32], q: &[f32], index: usize) -> CoreResult<Option<f32>> {
    let norm = checked_norm(row, |j| format!("matrix[{index}, {j}]"))?;
    if norm == 0.0 {
        return Ok(None);
    }
    let dot: f64 = row
        .iter()
        .zip(q)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum();
    Ok(Some(((dot / norm) as f32).clamp(-1.0, 1.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(matrix: &[f32], dim: usize, q: &[f32], k: usize, t: Option<f64>) -> Vec<usize> {
        let qn: f64 = q.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let mut scored: Vec<(f64, usize)> = matrix
            .chunks(dim)
            .enumerate()
            .filter_map(|(i, r)| {
                let n: f64 = r.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
                (n > 0.0).then(|| {
                    let d: f64 = r
                        .iter()
                        .zip(q)
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum();
                    (d / n / qn, i)
                })
            })
            .filter(|(s, _)| t.is_none_or(|t| *s >= t))
            .collect();
        scored.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then(a.1.cmp(&b.1)));
        scored.into_iter().take(k).map(|(_, i)| i).collect()
    }

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    #[test]
    fn matches_brute_force_serial_and_parallel() {
        const { assert!(3000 * 384 >= PARALLEL_MIN_ELEMENTS) };
        for (rows, dim) in [(10, 3), (300, 17), (3000, 384)] {
            let m = random(rows * dim, rows as u64);
            let q = random(dim, 7);
            for k in [1, 5, rows + 3] {
                let got: Vec<usize> = cosine_top_k(&m, rows, dim, &q, k, None)
                    .unwrap()
                    .iter()
                    .map(|s| s.index)
                    .collect();
                assert_eq!(got, brute(&m, dim, &q, k, None), "{rows}x{dim} k={k}");
            }
            let got = cosine_top_k(&m, rows, dim, &q, rows, Some(0.1)).unwrap();
            assert!(got.iter().all(|s| s.score >= 0.1));
            assert_eq!(got.len(), brute(&m, dim, &q, rows, Some(0.1)).len());
        }
    }

    #[test]
    fn ties_go_to_the_lower_index_and_zero_rows_are_skipped() {
        let m = [1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 1.0, 0.0, 0.0, 1.0];
        let got = cosine_top_k(&m, 5, 2, &[1.0, 0.0], 5, None).unwrap();
        let idx: Vec<usize> = got.iter().map(|s| s.index).collect();
        assert_eq!(idx, vec![0, 2, 3, 4]);
        assert_eq!(got[0].score, 1.0);
        assert_eq!(got[3].score, 0.0);
    }

    #[test]
    fn tiny_and_huge_rows_still_score() {
        let m = [1e-30, 1e-30, 3e30, 0.0, -1e-44, 0.0];
        let got = cosine_top_k(&m, 3, 2, &[1.0, 1.0], 3, None).unwrap();
        let idx: Vec<usize> = got.iter().map(|s| s.index).collect();
        assert_eq!(idx, vec![0, 1, 2]);
        assert!((got[0].score - 1.0).abs() < 1e-6);
        assert!((got[2].score + std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
    }

    #[test]
    fn errors_name_what_was_wrong() {
        let m = [1.0, 2.0, 3.0, f32::NAN];
        let err = cosine_top_k(&m, 2, 2, &[1.0, 0.0], 1, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "matrix[1, 1] is NaN; vectors must hold finite numbers"
        );
        let err = cosine_top_k(&m[..2], 1, 2, &[1.0, 0.0, 0.0], 1, None).unwrap_err();
        assert_eq!(
            err,
            CoreError::DimensionMismatch {
                what: "query".into(),
                expected: 2,
                got: 3
            }
        );
        let err = cosine_top_k(&m[..2], 1, 2, &[0.0, 0.0], 1, None).unwrap_err();
        assert!(matches!(err, CoreError::ZeroVector { .. }));
        let err = cosine_top_k(&m[..2], 1, 2, &[f32::INFINITY, 0.0], 1, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "query[0] is inf; vectors must hold finite numbers"
        );
        assert!(cosine_top_k(&m[..2], 1, 2, &[1.0, 0.0], 0, None).is_err());
        assert!(cosine_top_k(&m[..2], 1, 2, &[1.0, 0.0], 1, Some(f64::NAN)).is_err());
    }

    #[test]
    fn first_error_is_the_lowest_row_even_in_parallel() {
        let (rows, dim) = (10_000, 128);
        assert!(rows * dim >= PARALLEL_MIN_ELEMENTS);
        let mut m = random(rows * dim, 3);
        m[9900 * dim + 5] = f32::NAN;
        m[1200 * dim + 7] = f32::NEG_INFINITY;
        let err = cosine_top_k(&m, rows, dim, &random(dim, 1), 3, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "matrix[1200, 7] is -inf; vectors must hold finite numbers"
        );
    }
}
