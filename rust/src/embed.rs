//! A deterministic feature-hashing text embedder, so the library has a working offline embedder.
//!
//! Text is lowercased (Unicode default case mapping) and split into tokens at whitespace and
//! punctuation, except that `.`, `,` and `:` between two ASCII digits stay inside the token
//! (`3.2`, `5,000`, `2:30`, `v1.2`). Each token then gives weighted features:
//!
//! * a number (a token with an ASCII digit, commas dropped, or a number word from `zero` to
//!   `twelve`, as its digits): the whole token, weight 3, no character n-grams, so `Q2` and
//!   `Q3` or `100` and `500` are different features, not near-identical spellings;
//! * a negation (`not`, `no`, `never`, `without`... or the `t` of `n't`): one shared feature,
//!   weight 3;
//! * a stop word (`the`, `is`, `of`...): itself, weight 0.2;
//! * any other word: its light stem (plural `s`/`ies` removed) with weight 1, and the character
//!   3-, 4- and 5-grams of `<word>` (the angle brackets mark the word boundaries) sharing weight
//!   2 (each `2 / sqrt(count)`), so every word weighs the same whatever its length and
//!   inflections stay close;
//! * each pair of consecutive numbers, negations and words (stop words skipped), weight 1: word
//!   order counts ("X differs from Y" is not "Y differs from X").
//!
//! Each feature is hashed with 64-bit FNV-1a over its UTF-8 bytes, preceded by a kind byte
//! (`w` word, `g` n-gram, `s` stop word, `n` number, `x` negation, `b` pair) and followed by the
//! murmur3 finaliser; the low 32 bits pick the bucket and the top bit the sign. The row is summed
//! in f64 and scaled to unit L2 norm.
//!
//! The hash is fixed and platform independent, so every machine and process produces the same
//! vectors. Texts with no token (empty, whitespace or punctuation only) give a zero row: they
//! have no direction, and `VectorSet` refuses them with `ZeroVectorError`.

use rayon::prelude::*;

use crate::{CoreError, CoreResult};

/// The largest supported embedding dimension.
pub const MAX_DIM: usize = 65_536;
/// Texts per parallel task; below two tasks' worth the work stays on the calling thread.
const TEXTS_PER_TASK: usize = 32;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

const WORD_WEIGHT: f64 = 1.0;
const GRAMS_WEIGHT: f64 = 2.0;
const STOP_WEIGHT: f64 = 0.2;
const NUMBER_WEIGHT: f64 = 3.0;
const NEGATION_WEIGHT: f64 = 3.0;
const PAIR_WEIGHT: f64 = 1.0;

/// ASCII punctuation plus the typographic quotes, dashes and ellipsis that prose uses.
const EXTRA_SEPARATORS: &[char] = &[
    '\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}', '\u{2013}', '\u{2014}', '\u{2026}', '\u{00AB}',
    '\u{00BB}',
];

/// What a short word is, when it is not an ordinary word.
#[derive(Clone, Copy)]
enum Lexical {
    /// A function word: it carries little of a fact, so it weighs little and makes no pair.
    Stop,
    Negation,
    /// A number word, as its digits.
    Number(&'static str),
}

/// Stop words, negations and number words, sorted for `binary_search`.
const LEXICON: &[(&str, Lexical)] = &[
    ("a", Lexical::Stop),
    ("about", Lexical::Stop),
    ("also", Lexical::Stop),
    ("am", Lexical::Stop),
    ("an", Lexical::Stop),
    ("and", Lexical::Stop),
    ("are", Lexical::Stop),
    ("as", Lexical::Stop),
    ("at", Lexical::Stop),
    ("be", Lexical::Stop),
    ("been", Lexical::Stop),
    ("being", Lexical::Stop),
    ("but", Lexical::Stop),
    ("by", Lexical::Stop),
    ("can", Lexical::Stop),
    ("cannot", Lexical::Negation),
    ("could", Lexical::Stop),
    ("did", Lexical::Stop),
    ("do", Lexical::Stop),
    ("does", Lexical::Stop),
    ("eight", Lexical::Number("8")),
    ("eleven", Lexical::Number("11")),
    ("five", Lexical::Number("5")),
    ("for", Lexical::Stop),
    ("four", Lexical::Number("4")),
    ("from", Lexical::Stop),
    ("had", Lexical::Stop),
    ("has", Lexical::Stop),
    ("have", Lexical::Stop),
    ("having", Lexical::Stop),
    ("he", Lexical::Stop),
    ("her", Lexical::Stop),
    ("here", Lexical::Stop),
    ("him", Lexical::Stop),
    ("his", Lexical::Stop),
    ("how", Lexical::Stop),
    ("i", Lexical::Stop),
    ("if", Lexical::Stop),
    ("in", Lexical::Stop),
    ("into", Lexical::Stop),
    ("is", Lexical::Stop),
    ("it", Lexical::Stop),
    ("its", Lexical::Stop),
    ("just", Lexical::Stop),
    ("may", Lexical::Stop),
    ("me", Lexical::Stop),
    ("might", Lexical::Stop),
    ("must", Lexical::Stop),
    ("my", Lexical::Stop),
    ("neither", Lexical::Negation),
    ("never", Lexical::Negation),
    ("nine", Lexical::Number("9")),
    ("no", Lexical::Negation),
    ("nobody", Lexical::Negation),
    ("none", Lexical::Negation),
    ("nor", Lexical::Negation),
    ("not", Lexical::Negation),
    ("nothing", Lexical::Negation),
    ("of", Lexical::Stop),
    ("on", Lexical::Stop),
    ("one", Lexical::Number("1")),
    ("onto", Lexical::Stop),
    ("or", Lexical::Stop),
    ("our", Lexical::Stop),
    ("per", Lexical::Stop),
    ("s", Lexical::Stop),
    ("seven", Lexical::Number("7")),
    ("shall", Lexical::Stop),
    ("she", Lexical::Stop),
    ("should", Lexical::Stop),
    ("six", Lexical::Number("6")),
    ("so", Lexical::Stop),
    ("ten", Lexical::Number("10")),
    ("than", Lexical::Stop),
    ("that", Lexical::Stop),
    ("the", Lexical::Stop),
    ("their", Lexical::Stop),
    ("them", Lexical::Stop),
    ("then", Lexical::Stop),
    ("there", Lexical::Stop),
    ("these", Lexical::Stop),
    ("they", Lexical::Stop),
    ("this", Lexical::Stop),
    ("those", Lexical::Stop),
    ("three", Lexical::Number("3")),
    ("to", Lexical::Stop),
    ("too", Lexical::Stop),
    ("twelve", Lexical::Number("12")),
    ("two", Lexical::Number("2")),
    ("us", Lexical::Stop),
    ("very", Lexical::Stop),
    ("via", Lexical::Stop),
    ("was", Lexical::Stop),
    ("we", Lexical::Stop),
    ("were", Lexical::Stop),
    ("what", Lexical::Stop),
    ("when", Lexical::Stop),
    ("where", Lexical::Stop),
    ("which", Lexical::Stop),
    ("while", Lexical::Stop),
    ("who", Lexical::Stop),
    ("whom", Lexical::Stop),
    ("whose", Lexical::Stop),
    ("why", Lexical::Stop),
    ("will", Lexical::Stop),
    ("with", Lexical::Stop),
    ("without", Lexical::Negation),
    ("would", Lexical::Stop),
    ("you", Lexical::Stop),
    ("your", Lexical::Stop),
    ("zero", Lexical::Number("0")),
];
/// The longest word in `LEXICON`, in bytes: longer tokens skip the lookup.
const LEXICON_MAX_LEN: usize = 7;

fn lexical(token: &str) -> Option<Lexical> {
    if token.len() > LEXICON_MAX_LEN {
        return None;
    }
    LEXICON
        .binary_search_by(|(word, _)| word.cmp(&token))
        .ok()
        .map(|i| LEXICON[i].1)
}

/// The pair-sequence item of a negation: no word can spell it.
const NEGATION_ITEM: &str = "\0not";

fn is_separator(c: char) -> bool {
    c.is_whitespace() || c.is_ascii_punctuation() || EXTRA_SEPARATORS.contains(&c)
}

#[inline]
fn feature_hash(kind: u8, bytes: &[u8]) -> u64 {
    let mut h = (FNV_OFFSET ^ u64::from(kind)).wrapping_mul(FNV_PRIME);
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    // FNV's low bits mix poorly; the murmur3 finaliser spreads every input bit over the word.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[inline]
fn add_feature(row: &mut [f64], kind: u8, bytes: &[u8], weight: f64) {
    let h = feature_hash(kind, bytes);
    // Multiply-shift maps the low 32 bits onto 0..dim without a division.
    let bucket = (((h & 0xFFFF_FFFF) * row.len() as u64) >> 32) as usize;
    row[bucket] += if h >> 63 == 0 { weight } else { -weight };
}

/// Splits lowercased text into tokens; `.`, `,`, `:` between ASCII digits do not split.
fn tokens(lower: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut prev: Option<char> = None;
    let mut chars = lower.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let joins = matches!(c, '.' | ',' | ':')
            && start.is_some()
            && prev.is_some_and(|p| p.is_ascii_digit())
            && chars.peek().is_some_and(|&(_, n)| n.is_ascii_digit());
        if is_separator(c) && !joins {
            if let Some(s) = start.take() {
                out.push(&lower[s..i]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
        prev = Some(c);
    }
    if let Some(s) = start {
        out.push(&lower[s..]);
    }
    out
}

/// Drops a plural ending: `ies` -> `y` (5 chars or more), else a final `s` (4 chars or more)
/// unless the word ends in `ss`, `us` or `is`.
fn stem(word: &str) -> std::borrow::Cow<'_, str> {
    let chars = word.chars().count();
    if chars > 4 && word.ends_with("ies") {
        return format!("{}y", &word[..word.len() - 3]).into();
    }
    if chars > 3
        && word.ends_with('s')
        && !(word.ends_with("ss") || word.ends_with("us") || word.ends_with("is"))
    {
        return word[..word.len() - 1].into();
    }
    word.into()
}

fn add_grams(row: &mut [f64], word: &str, padded: &mut Vec<u8>, bounds: &mut Vec<usize>) {
    padded.clear();
    bounds.clear();
    padded.push(b'<');
    bounds.push(0);
    for (i, _) in word.char_indices() {
        bounds.push(1 + i);
    }
    padded.extend_from_slice(word.as_bytes());
    bounds.push(padded.len());
    padded.push(b'>');
    bounds.push(padded.len());
    // `bounds` holds the start of every char of `<word>` and the end: chars = len - 1.
    let chars = bounds.len() - 1;
    let count: usize = (3..=5).map(|n| (chars + 1).saturating_sub(n)).sum();
    let weight = GRAMS_WEIGHT / (count as f64).sqrt();
    for n in 3..=5 {
        for start in 0..(chars + 1).saturating_sub(n) {
            add_feature(row, b'g', &padded[bounds[start]..bounds[start + n]], weight);
        }
    }
}

/// Embeds one text into `row` (its length is the dimension), overwriting it; `acc` is scratch.
fn embed_text(text: &str, row: &mut [f32], acc: &mut Vec<f64>) {
    acc.clear();
    acc.resize(row.len(), 0.0);
    let lower = text.to_lowercase();
    let mut padded: Vec<u8> = Vec::with_capacity(64);
    let mut bounds: Vec<usize> = Vec::with_capacity(64);
    let mut items: Vec<std::borrow::Cow<'_, str>> = Vec::with_capacity(32);
    let mut prev = "";
    for token in tokens(&lower) {
        let number = token.bytes().any(|b| b.is_ascii_digit());
        let kind = if token == "t" && prev.ends_with('n') {
            Some(Lexical::Negation)
        } else if number {
            None
        } else {
            lexical(token)
        };
        match kind {
            Some(Lexical::Negation) => {
                add_feature(acc, b'x', b"not", NEGATION_WEIGHT);
                items.push(NEGATION_ITEM.into());
            }
            Some(Lexical::Number(digits)) => {
                add_feature(acc, b'n', digits.as_bytes(), NUMBER_WEIGHT);
                items.push(digits.into());
            }
            Some(Lexical::Stop) => add_feature(acc, b's', token.as_bytes(), STOP_WEIGHT),
            None if number => {
                let value: String = token.chars().filter(|&c| c != ',').collect();
                add_feature(acc, b'n', value.as_bytes(), NUMBER_WEIGHT);
                items.push(value.into());
            }
            None => {
                let stemmed = stem(token);
                add_feature(acc, b'w', stemmed.as_bytes(), WORD_WEIGHT);
                add_grams(acc, token, &mut padded, &mut bounds);
                items.push(stemmed);
            }
        }
        prev = token;
    }
    let mut pair: Vec<u8> = Vec::with_capacity(64);
    for w in items.windows(2) {
        pair.clear();
        pair.extend_from_slice(w[0].as_bytes());
        pair.push(b' ');
        pair.extend_from_slice(w[1].as_bytes());
        add_feature(acc, b'b', &pair, PAIR_WEIGHT);
    }
    let norm = acc.iter().map(|&x| x * x).sum::<f64>().sqrt();
    if norm > 0.0 {
        for (out, &x) in row.iter_mut().zip(acc.iter()) {
            *out = (x / norm) as f32;
        }
    } else {
        row.fill(0.0);
    }
}

/// Embeds one text into `row` (its length is the dimension), overwriting it.
pub fn embed_into(text: &str, row: &mut [f32]) {
    embed_text(text, row, &mut Vec::new());
}

/// Embeds each text; returns `texts.len() × dim` values, row-major.
///
/// # Errors
/// `InvalidArgument` unless `1 <= dim <= 65536`.
pub fn hash_embed<S: AsRef<str> + Sync>(texts: &[S], dim: usize) -> CoreResult<Vec<f32>> {
    if !(1..=MAX_DIM).contains(&dim) {
        return Err(CoreError::InvalidArgument(format!(
            "dim must be between 1 and {MAX_DIM}, got {dim}"
        )));
    }
    let mut out = vec![0.0_f32; texts.len() * dim];
    if texts.len() >= 2 * TEXTS_PER_TASK && rayon::current_num_threads() > 1 {
        out.par_chunks_mut(dim * TEXTS_PER_TASK)
            .zip(texts.par_chunks(TEXTS_PER_TASK))
            .for_each(|(rows, batch)| {
                let mut acc = Vec::with_capacity(dim);
                for (row, text) in rows.chunks_exact_mut(dim).zip(batch) {
                    embed_text(text.as_ref(), row, &mut acc);
                }
            });
    } else {
        let mut acc = Vec::with_capacity(dim);
        for (row, text) in out.chunks_exact_mut(dim).zip(texts) {
            embed_text(text.as_ref(), row, &mut acc);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn near_duplicates_score_high_and_unrelated_low() {
        let texts = [
            "The staging environment uses a different API key than production.",
            "Staging uses a different API key than production",
            "My daughter's birthday party is on Saturday afternoon.",
            "Prefer tabs over spaces in Go code.",
        ];
        let v = hash_embed(&texts, 384).unwrap();
        let row = |i: usize| &v[i * 384..(i + 1) * 384];
        assert!(cosine(row(0), row(1)) >= 0.7, "{}", cosine(row(0), row(1)));
        for (a, b) in [(0, 2), (0, 3), (1, 2), (2, 3)] {
            assert!(
                cosine(row(a), row(b)).abs() < 0.3,
                "{a} {b} {}",
                cosine(row(a), row(b))
            );
        }
    }

    #[test]
    fn rows_are_unit_or_zero_and_deterministic() {
        let texts = ["Hello, World!", "", "  \t\n", "?!...", "ÉCOLE école", "a"];
        let v = hash_embed(&texts, 64).unwrap();
        for (i, row) in v.chunks(64).enumerate() {
            let n: f32 = row.iter().map(|x| x * x).sum();
            if (1..=3).contains(&i) {
                assert_eq!(n, 0.0);
            } else {
                assert!((n - 1.0).abs() < 1e-5);
            }
        }
        // Case-insensitive: "ÉCOLE" and "école" embed identically.
        let cased = hash_embed(&["ÉCOLE", "école"], 64).unwrap();
        assert_eq!(cased[..64], cased[64..]);
        assert_eq!(hash_embed(&texts, 64).unwrap(), v);
    }

    #[test]
    fn numbers_negation_and_order_move_the_vector() {
        let texts = [
            "TSMC Q2 capacity is fully booked",
            "TSMC Q3 capacity is fully booked",
            "The user is not allergic to peanuts",
            "The user is allergic to peanuts",
            "X differs from Y",
            "Y differs from X",
            "The GitHub API allows 5,000 requests per hour",
            "GitHub API allows 5000 requests an hour",
        ];
        let v = hash_embed(&texts, 384).unwrap();
        let row = |i: usize| &v[i * 384..(i + 1) * 384];
        assert!(cosine(row(0), row(1)) < 0.85, "{}", cosine(row(0), row(1)));
        assert!(cosine(row(2), row(3)) < 0.85, "{}", cosine(row(2), row(3)));
        assert!(cosine(row(4), row(5)) < 0.95, "{}", cosine(row(4), row(5)));
        assert!(cosine(row(6), row(7)) > 0.9, "{}", cosine(row(6), row(7)));
        // Separators inside numbers join only between digits.
        assert_eq!(
            tokens("v1.2, 3.5% and 2:30. x.y"),
            ["v1.2", "3.5", "and", "2:30", "x", "y"]
        );
        assert_eq!(stem("queries"), "query");
        assert_eq!(stem("status"), "status");
        assert_eq!(stem("keys"), "key");
        assert!(LEXICON.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(LEXICON.iter().all(|(w, _)| w.len() <= LEXICON_MAX_LEN));
    }

    #[test]
    fn fixed_hash_values_do_not_drift() {
        // FNV-1a over "wa" then fmix64, computed independently (Python): a change to the hash
        // would silently change every stored embedding.
        assert_eq!(feature_hash(b'w', b"a"), 0xa07e_247e_4417_807b);
        let parallel: Vec<String> = (0..200).map(|i| format!("text number {i}")).collect();
        let all = hash_embed(&parallel, 32).unwrap();
        for (i, t) in parallel.iter().enumerate() {
            let one = hash_embed(&[t.as_str()], 32).unwrap();
            assert_eq!(&all[i * 32..(i + 1) * 32], one.as_slice());
        }
    }

    #[test]
    fn dim_out_of_range() {
        assert!(hash_embed(&["x"], 0).is_err());
        assert!(hash_embed(&["x"], MAX_DIM + 1).is_err());
        assert_eq!(hash_embed::<&str>(&[], 8).unwrap(), Vec::<f32>::new());
    }
}
