//! The calibrated estimator: features x per-family coefficients.

use super::coefficients::{
    CL100K, CL100K_HANGUL_SINGLE, CL100K_HAN_SINGLE, FEATURE_COUNT, O200K, O200K_HANGUL_SINGLE,
    O200K_HAN_SINGLE,
};
use super::features::{extract, Features, SingleTokenTables};
use super::models::Encoding;

fn model(encoding: Encoding) -> (&'static [f64; FEATURE_COUNT], SingleTokenTables) {
    match encoding {
        Encoding::O200kBase => (
            &O200K,
            SingleTokenTables {
                han: &O200K_HAN_SINGLE,
                hangul: &O200K_HANGUL_SINGLE,
            },
        ),
        Encoding::Cl100kBase => (
            &CL100K,
            SingleTokenTables {
                han: &CL100K_HAN_SINGLE,
                hangul: &CL100K_HANGUL_SINGLE,
            },
        ),
    }
}

/// The feature vector the estimate is computed from (exposed for the reference tests).
pub fn features(text: &str, encoding: Encoding) -> Features {
    extract(text, &model(encoding).1)
}

/// Estimated token count of `text` under `encoding`: 0 for "", at least 1 otherwise (no
/// non-empty text encodes to zero tokens), the rounded linear model in between.
pub fn estimate_tokens(text: &str, encoding: Encoding) -> usize {
    if text.is_empty() {
        return 0;
    }
    let (coefficients, tables) = model(encoding);
    let f = extract(text, &tables);
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
