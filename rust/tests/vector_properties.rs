//! Arbitrary vectors for the similarity kernels: NaN, infinities, zero rows, odd and mismatched
//! dimensions, `k` of 0 or past the row count. Every call answers with results or a `CoreError`
//! naming the problem, a failed `VectorSet::add` changes nothing, and the results are the best
//! rows, best first.

use std::sync::Arc;

use memstrata::vectors::{cosine_top_k, SharedRows, VectorSet};
use memstrata::CoreError;
use proptest::prelude::*;

/// Mostly ordinary floats, with the values that break naive code mixed in.
fn element() -> impl Strategy<Value = f32> {
    prop_oneof![
        8 => -10.0f32..10.0,
        1 => Just(0.0f32),
        1 => Just(-0.0f32),
        1 => Just(f32::NAN),
        1 => Just(f32::INFINITY),
        1 => Just(f32::NEG_INFINITY),
        1 => Just(f32::MAX),
        1 => Just(f32::MIN_POSITIVE),
        1 => Just(1e-30f32),
    ]
}

fn finite_element() -> impl Strategy<Value = f32> {
    prop_oneof![8 => -10.0f32..10.0, 1 => Just(0.0f32), 1 => Just(1e-20f32), 1 => Just(1e20f32)]
}

fn cosine(a: &[f32], b: &[f32]) -> Option<f64> {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    (na > 0.0 && nb > 0.0).then(|| dot / na / nb)
}

/// Scores are f32 and pass through an int8 prefilter; this much disagreement with f64 is noise.
const TOLERANCE: f64 = 1e-4;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn cosine_top_k_answers_anything_with_results_or_an_error(
        matrix in prop::collection::vec(element(), 0..120),
        rows in 0usize..12,
        dim in 0usize..12,
        query in prop::collection::vec(element(), 0..12),
        k in 0usize..16,
        threshold in prop::option::of(prop_oneof![-1.5f64..1.5, Just(f64::NAN)]),
    ) {
        match cosine_top_k(&matrix, rows, dim, &query, k, threshold) {
            Ok(hits) => {
                prop_assert!(hits.len() <= k.min(rows));
                for pair in hits.windows(2) {
                    prop_assert!(pair[0].score >= pair[1].score);
                }
                for hit in &hits {
                    prop_assert!((-1.0..=1.0).contains(&hit.score), "{}", hit.score);
                    prop_assert!(hit.index < rows);
                    if let Some(t) = threshold {
                        prop_assert!(f64::from(hit.score) >= t - TOLERANCE);
                    }
                }
            }
            Err(
                CoreError::InvalidArgument(_)
                | CoreError::DimensionMismatch { .. }
                | CoreError::ZeroVector { .. }
                | CoreError::NonFiniteVector { .. },
            ) => {}
            Err(other) => prop_assert!(false, "unexpected error {}", other),
        }
    }

    #[test]
    fn cosine_top_k_returns_the_best_rows(
        (dim, rows, seed) in (1usize..24, 1usize..60).prop_flat_map(|(dim, rows)| {
            (Just(dim), Just(rows), prop::collection::vec(finite_element(), dim * (rows + 1)))
        }),
        k in 1usize..10,
    ) {
        let matrix = &seed[..rows * dim];
        let query = &seed[rows * dim..];
        prop_assume!(query.iter().any(|&x| x != 0.0));
        let hits = cosine_top_k(matrix, rows, dim, query, k, None).unwrap();
        let scores: Vec<Option<f64>> =
            matrix.chunks(dim).map(|row| cosine(row, query)).collect();
        let nonzero = scores.iter().flatten().count();
        prop_assert_eq!(hits.len(), k.min(nonzero));
        let worst_kept = hits.last().map_or(f64::INFINITY, |h| f64::from(h.score));
        for (i, score) in scores.iter().enumerate() {
            if let Some(score) = score {
                if !hits.iter().any(|h| h.index == i) {
                    prop_assert!(*score <= worst_kept + TOLERANCE, "row {} beats the kept ones", i);
                }
            }
        }
    }

    #[test]
    fn vector_set_refuses_bad_rows_and_then_holds_what_it_held(
        dim in 0usize..70_000,
        good in prop::collection::vec(finite_element(), 0..64),
        bad in prop::collection::vec(element(), 0..64),
    ) {
        let mut set = match VectorSet::new(dim) {
            Ok(set) => set,
            Err(CoreError::InvalidArgument(message)) => {
                prop_assert!(dim == 0 || dim > 65_536);
                prop_assert!(message.contains("dim"));
                return Ok(());
            }
            Err(other) => return Err(TestCaseError::fail(format!("{other}"))),
        };
        let dim = set.dim();
        let rows = good.len() / dim;
        let ids: Vec<String> = (0..rows).map(|i| format!("g{i}")).collect();
        let accepted = set.add(&ids, &good[..rows * dim]).is_ok();
        let before: Vec<String> = set.ids().to_vec();
        let vectors: Vec<Option<Vec<f32>>> =
            before.iter().map(|id| set.get(id).map(<[f32]>::to_vec)).collect();
        // The bad batch: whatever it holds, a refusal leaves the set exactly as it was.
        let bad_rows = bad.len() / dim;
        let bad_ids: Vec<String> = (0..bad_rows).map(|i| format!("g{}", i % 3)).collect();
        match set.add(&bad_ids, &bad) {
            Ok(()) => prop_assert!(bad.len() == bad_rows * dim),
            Err(
                CoreError::InvalidArgument(_)
                | CoreError::ZeroVector { .. }
                | CoreError::NonFiniteVector { .. },
            ) => {
                prop_assert_eq!(set.ids(), &before[..]);
                for (id, vector) in before.iter().zip(&vectors) {
                    prop_assert_eq!(set.get(id).map(<[f32]>::to_vec), vector.clone());
                }
            }
            Err(other) => prop_assert!(false, "unexpected error {}", other),
        }
        if accepted && !set.is_empty() {
            let query = vec![1.0f32; dim];
            let hits = set.top_k(&query, 3, None).unwrap();
            prop_assert!(hits.len() <= 3);
            prop_assert!(set.top_k(&query, 0, None).is_err());
            prop_assert!(set.top_k(&query[..dim - 1], 1, None).is_err());
            prop_assert!(set.find_duplicate(&vec![0.0; dim], 0.5).is_err());
        }
    }
}

proptest! {
    // Sets past the int8 prefilter's threshold (512 rows): fewer cases.
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn vector_set_top_k_matches_an_exhaustive_scan(
        (dim, values, query) in (1usize..40, 580usize..700).prop_flat_map(|(dim, rows)| {
            (
                Just(dim),
                prop::collection::vec(finite_element(), dim * rows),
                prop::collection::vec(-1.0f32..1.0, dim),
            )
        }),
        k in 1usize..20,
        removed in prop::collection::vec(0usize..700, 0..50),
    ) {
        prop_assume!(query.iter().any(|&x| x != 0.0));
        let mut set = VectorSet::new(dim).unwrap();
        let mut kept: Vec<(String, Vec<f32>)> = Vec::new();
        for (i, row) in values.chunks(dim).enumerate() {
            if row.iter().any(|&x| x != 0.0) {
                kept.push((format!("v{i}"), row.to_vec()));
            }
        }
        let ids: Vec<String> = kept.iter().map(|(id, _)| id.clone()).collect();
        let flat: Vec<f32> = kept.iter().flat_map(|(_, v)| v.clone()).collect();
        set.add(&ids, &flat).unwrap();
        let gone: Vec<String> = removed.iter().map(|i| format!("v{i}")).collect();
        set.remove(&gone);
        kept.retain(|(id, _)| !gone.contains(id));
        prop_assert_eq!(set.len(), kept.len());
        let hits = set.top_k(&query, k, None).unwrap();
        prop_assert_eq!(hits.len(), k.min(kept.len()));
        let worst_kept = hits.last().map_or(f64::INFINITY, |h| f64::from(h.1));
        for (id, vector) in &kept {
            let score = cosine(vector, &query).unwrap();
            match hits.iter().find(|h| h.0 == id) {
                Some(hit) => prop_assert!((f64::from(hit.1) - score).abs() < TOLERANCE),
                None => prop_assert!(score <= worst_kept + TOLERANCE, "{} beats the kept ones", id),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// `weight · cosine + bias` ranked past the prefilter's threshold, against the formula in f64.
    #[test]
    fn vector_set_weighted_top_k_matches_an_exhaustive_scan(
        (dim, values, biases, query) in (1usize..40, 580usize..700).prop_flat_map(|(dim, rows)| {
            (
                Just(dim),
                prop::collection::vec(finite_element(), dim * rows),
                prop::collection::vec(-1.0f32..1.0, rows),
                prop::collection::vec(-1.0f32..1.0, dim),
            )
        }),
        k in 1usize..20,
        weight in 0.0f32..2.0,
    ) {
        prop_assume!(query.iter().any(|&x| x != 0.0));
        let mut set = VectorSet::new(dim).unwrap();
        let mut kept: Vec<(String, Vec<f32>, f32)> = Vec::new();
        for (i, (row, &bias)) in values.chunks(dim).zip(&biases).enumerate() {
            if row.iter().any(|&x| x != 0.0) {
                kept.push((format!("v{i}"), row.to_vec(), bias));
            }
        }
        let ids: Vec<String> = kept.iter().map(|(id, _, _)| id.clone()).collect();
        let flat: Vec<f32> = kept.iter().flat_map(|(_, v, _)| v.clone()).collect();
        let kept_biases: Vec<f32> = kept.iter().map(|(_, _, b)| *b).collect();
        set.add_with_biases(&ids, &flat, Some(&kept_biases)).unwrap();
        let hits = set.top_k_weighted(&query, k, None, weight).unwrap();
        prop_assert_eq!(hits.len(), k.min(kept.len()));
        let worst_kept = hits.last().map_or(f64::INFINITY, |h| f64::from(h.1));
        for (id, vector, bias) in &kept {
            let score = f64::from(weight) * cosine(vector, &query).unwrap() + f64::from(*bias);
            match hits.iter().find(|h| h.0 == id) {
                Some(hit) => prop_assert!((f64::from(hit.1) - score).abs() < 3.0 * TOLERANCE),
                None => {
                    prop_assert!(score <= worst_kept + 3.0 * TOLERANCE, "{} beats the kept ones", id)
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// A set reading its owner's unit rows in place (over two sources, some ids removed)
    /// ranks `weight · cosine + bias` as an exhaustive scan does.
    #[test]
    fn vector_set_of_shared_rows_matches_an_exhaustive_scan(
        (dim, values, biases, query) in (1usize..40, 580usize..700).prop_flat_map(|(dim, rows)| {
            (
                Just(dim),
                prop::collection::vec(finite_element(), dim * rows),
                prop::collection::vec(-1.0f32..1.0, rows),
                prop::collection::vec(-1.0f32..1.0, dim),
            )
        }),
        k in 1usize..20,
        weight in 0.0f32..2.0,
        removed in prop::collection::vec(0usize..700, 0..50),
    ) {
        prop_assume!(query.iter().any(|&x| x != 0.0));
        // The owner's rows: the non-zero ones, scaled to unit length in f64.
        let mut unit: Vec<f32> = Vec::new();
        let mut kept: Vec<(String, Vec<f32>, f32)> = Vec::new();
        for (i, (row, &bias)) in values.chunks(dim).zip(&biases).enumerate() {
            let norm = row.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
            if norm > 0.0 && norm.is_finite() {
                let u: Vec<f32> = row.iter().map(|&x| (f64::from(x) / norm) as f32).collect();
                unit.extend_from_slice(&u);
                kept.push((format!("v{i}"), u, bias));
            }
        }
        let half = kept.len() / 2;
        let sources: Vec<Arc<dyn SharedRows>> = vec![
            Arc::new(unit[..half * dim].to_vec()),
            Arc::new(unit[half * dim..].to_vec()),
        ];
        let ids: Vec<String> = kept.iter().map(|(id, _, _)| id.clone()).collect();
        let rows: Vec<usize> = (0..kept.len()).collect();
        let kept_biases: Vec<f32> = kept.iter().map(|(_, _, b)| *b).collect();
        let mut set = VectorSet::new(dim).unwrap();
        set.add_shared(&ids, &sources, &rows, Some(&kept_biases)).unwrap();
        let gone: Vec<String> = removed.iter().map(|i| format!("v{i}")).collect();
        set.remove(&gone);
        kept.retain(|(id, _, _)| !gone.contains(id));
        prop_assert_eq!(set.len(), kept.len());
        prop_assume!(!kept.is_empty());
        let hits = set.top_k_weighted(&query, k, None, weight).unwrap();
        prop_assert_eq!(hits.len(), k.min(kept.len()));
        let worst_kept = hits.last().map_or(f64::INFINITY, |h| f64::from(h.1));
        for (id, vector, bias) in &kept {
            let score = f64::from(weight) * cosine(vector, &query).unwrap() + f64::from(*bias);
            match hits.iter().find(|h| h.0 == id) {
                Some(hit) => prop_assert!((f64::from(hit.1) - score).abs() < 3.0 * TOLERANCE),
                None => {
                    prop_assert!(score <= worst_kept + 3.0 * TOLERANCE, "{} beats the kept ones", id)
                }
            }
        }
    }
}
