//! The calibrated estimator: features x per-family coefficients.

use super::coefficients::{
    CL100K, CL100K_HANGUL_DOUBLE, CL100K_HANGUL_SINGLE, CL100K_HAN_DOUBLE, CL100K_HAN_SINGLE,
    FEATURE_COUNT, O200K, O200K_HANGUL_DOUBLE, O200K_HANGUL_SINGLE, O200K_HAN_DOUBLE,
    O200K_HAN_SINGLE,
};
use super::features::{extract_any, Features, SingleTokenTables, Unit};
use super::models::Encoding;
use std::sync::OnceLock;

static O200K_CATEGORIES: OnceLock<Box<[u8; 0x10000]>> = OnceLock::new();
static CL100K_CATEGORIES: OnceLock<Box<[u8; 0x10000]>> = OnceLock::new();

fn model(encoding: Encoding) -> (&'static [f64; FEATURE_COUNT], SingleTokenTables) {
    match encoding {
        Encoding::O200kBase => (
            &O200K,
            SingleTokenTables {
                han_single: &O200K_HAN_SINGLE,
                han_double: &O200K_HAN_DOUBLE,
                hangul_single: &O200K_HANGUL_SINGLE,
                hangul_double: &O200K_HANGUL_DOUBLE,
                categories: &O200K_CATEGORIES,
            },
        ),
        Encoding::Cl100kBase => (
            &CL100K,
            SingleTokenTables {
                han_single: &CL100K_HAN_SINGLE,
                han_double: &CL100K_HAN_DOUBLE,
                hangul_single: &CL100K_HANGUL_SINGLE,
                hangul_double: &CL100K_HANGUL_DOUBLE,
                categories: &CL100K_CATEGORIES,
            },
        ),
    }
}

/// The feature vector the estimate is computed from (exposed for the reference tests).
pub fn features(text: &str, encoding: Encoding) -> Features {
    features_of_units(text.as_bytes(), encoding)
}

/// [`features`] of UTF-8 bytes or UCS-4 code points.
pub fn features_of_units<U: Unit + Sync>(units: &[U], encoding: Encoding) -> Features {
    extract_any(units, &model(encoding).1)
}

/// Estimated token count of `text` under `encoding`: 0 for "", at least 1 otherwise (no
/// non-empty text encodes to zero tokens), the rounded linear model in between.
pub fn estimate_tokens(text: &str, encoding: Encoding) -> usize {
    estimate_units(text.as_bytes(), encoding)
}

/// [`estimate_tokens`] of UTF-8 bytes or UCS-4 code points (same result for the same text).
pub fn estimate_units<U: Unit + Sync>(units: &[U], encoding: Encoding) -> usize {
    if units.is_empty() {
        return 0;
    }
    let (coefficients, tables) = model(encoding);
    let f = extract_any(units, &tables);
    let value: f64 = f
        .iter()
        .zip(coefficients.iter())
        .map(|(&x, &c)| x as f64 * c)
        .sum();
    // `as` saturates: a negative or NaN sum becomes 0 before the max.
    (value.round() as usize).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::count::count_tokens;

    #[test]
    fn empty_is_zero_and_text_is_positive() {
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            assert_eq!(estimate_tokens("", e), 0);
            assert!(estimate_tokens(" ", e) >= 1);
            assert!(estimate_tokens("\n", e) >= 1);
        }
    }

    #[test]
    fn utf8_and_ucs4_agree() {
        let text = "naïve 東京 ソウル 서울 🚀 camelCase {\"k\": [1, 2]}\n\tend";
        let units: Vec<u32> = text.chars().map(u32::from).collect();
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            assert_eq!(features(text, e), features_of_units(&units, e));
            assert_eq!(estimate_tokens(text, e), estimate_units(&units, e));
        }
    }

    #[test]
    fn close_to_exact_on_plain_prose() {
        let text = "Memory layers let an agent keep goals, beliefs and reflections between \
                    turns, and the context gate decides what fits into the next prompt. "
            .repeat(10);
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let exact = count_tokens(&text, e) as f64;
            let estimate = estimate_tokens(&text, e) as f64;
            assert!(
                (estimate - exact).abs() / exact < 0.15,
                "{e:?}: {estimate} vs {exact}"
            );
        }
    }
}
