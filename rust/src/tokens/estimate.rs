//! The calibrated estimator: features x per-family coefficients.

use super::coefficients::{
    CL100K, CL100K_HANGUL_DOUBLE, CL100K_HANGUL_SINGLE, CL100K_HAN_DOUBLE, CL100K_HAN_SINGLE,
    FEATURE_COUNT, O200K, O200K_HANGUL_DOUBLE, O200K_HANGUL_SINGLE, O200K_HAN_DOUBLE,
    O200K_HAN_SINGLE,
};
use super::count::count_tokens;
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
/// non-empty text encodes to zero tokens), the rounded linear model in between, or the exact
/// count where the features cannot bound the text (see [`model_is_unreliable`]).
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
    if model_is_unreliable(&f, value, code_points(units)) {
        return exact(units, encoding).max(1);
    }
    // `as` saturates: a negative or NaN sum becomes 0 before the max.
    (value.round() as usize).max(1)
}

/// Number of code points of `units`.
fn code_points<U: Unit>(units: &[U]) -> usize {
    if size_of::<U>() == 1 {
        // UTF-8: every byte but the continuation bytes starts a code point.
        units.iter().filter(|u| u.value() & 0xC0 != 0x80).count()
    } else {
        units.len()
    }
}

/// The exact count of `units`: lone surrogates (which only UCS-4 input can hold) are counted
/// as U+FFFD, another 3-byte character.
fn exact<U: Unit>(units: &[U], encoding: Encoding) -> usize {
    if size_of::<U>() == 1 {
        let bytes: Vec<u8> = units.iter().map(|u| u.value() as u8).collect();
        return count_tokens(&String::from_utf8_lossy(&bytes), encoding);
    }
    let text: String = units
        .iter()
        .map(|u| char::from_u32(u.value()).unwrap_or('\u{FFFD}'))
        .collect();
    count_tokens(&text, encoding)
}

/// Whether the linear model cannot be trusted on a text of `chars` code points with features
/// `f` and model value `value`: the text is made of pieces whose token count the features do
/// not bound (long runs of one character, whitespace, punctuation, fragments such as base64
/// and hex, scripts and symbols the calibration corpus barely holds), or its density of
/// tokens per character lies outside what any calibrated text shows, or it is shorter than 32
/// characters. Such texts are counted
/// exactly; ordinary prose, code, JSON and CJK text never meet these conditions (the tests
/// and `tools/calibrate_tokens.py evaluate` report how often they do).
pub fn model_is_unreliable(f: &Features, value: f64, chars: usize) -> bool {
    use super::features::slots::*;
    let n = chars as f64;
    let e = value.max(1.0);
    let at = |k: usize| f[k] as f64;
    let segments: f64 = (SEG_LEN_1..=SEG_LEN_12P).map(at).sum();
    let pieces = segments + at(DIGIT_GROUPS);
    let fragments = at(SEG_LEN_1) + at(SEG_LEN_1 + 1) + at(DIGIT_GROUPS);
    let han_kana = at(HAN_SINGLE) + at(HAN_DOUBLE) + at(HAN_OTHER) + at(KANA);
    // Characters each vocabulary spells in a varying number of tokens.
    let unusual = 0.5 * at(HAN_OTHER) + at(HANGUL_OTHER) + at(OTHER_3BYTE) + at(FOUR_BYTE);
    // A short text: the model has too little to average over (ten letters may be one word or
    // ten tokens), and counting it costs next to nothing.
    n < 32.0
        || n > 8.0 * e
        || n < 0.6 * e
        || at(SPACE_RUN_CHARS) + at(NEWLINE_CHARS) > 0.6 * n
        || at(NEWLINE_CHARS) - at(NEWLINE_RUNS) > 0.1 * n
        || at(NEWLINE_RUNS) > 0.15 * n
        || at(SEG_LONG_EXTRA) > 0.1 * n
        || at(PUNCT_EXTRA) > 0.25 * n
        || unusual > 0.15 * e
        || (fragments > 0.6 * pieces && pieces > 0.25 * e)
        || at(OTHER_2BYTE) > 12.0 * at(OTHER_2BYTE_RUNS)
        || (han_kana > 0.0 && at(HAN_KANA_RUNS) > 0.35 * han_kana)
        // Each letter segment, digit group and newline run is a piece of its own of at least
        // one token: an estimate well under their number is surely too low.
        || 0.8 * (pieces + at(NEWLINE_RUNS)) > e
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
    fn runs_the_model_cannot_bound_are_counted_exactly() {
        let texts = [
            " ".repeat(40_000),
            "\n".repeat(10_000),
            format!("note{}", "\n".repeat(100_000)),
            "a".repeat(20_000),
            "\u{1F600}".repeat(5_000),
            "-".repeat(10_000),
            "  \n".repeat(5_000),
        ];
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for text in &texts {
                let exact = count_tokens(text, e);
                assert_eq!(estimate_tokens(text, e), exact, "{e:?} {:?}", &text[..8]);
                let units: Vec<u32> = text.chars().map(u32::from).collect();
                assert_eq!(estimate_units(&units, e), exact);
            }
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
