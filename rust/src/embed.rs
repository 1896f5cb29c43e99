//! A deterministic feature-hashing text embedder, so the library has a working offline embedder.
//!
//! Text is lowercased (Unicode default case mapping) and split into words at whitespace and
//! punctuation. Each word contributes itself and the character 3-, 4- and 5-grams of
//! `<word>` (the angle brackets mark the word boundaries, so prefixes and suffixes are features
//! of their own). Each feature is hashed with 64-bit FNV-1a over its UTF-8 bytes, preceded by a
//! kind byte (`w` word, `g` n-gram) and followed by the murmur3 finaliser; the low 32 bits pick
//! the bucket and the top bit the sign. The row is then scaled to unit L2 norm.
//!
//! The hash is fixed and platform independent, so every machine and process produces the same
//! vectors. Texts with no word (empty, whitespace or punctuation only) give a zero row: they have
//! no direction, and `VectorSet` refuses them with `ZeroVectorError`.

use rayon::prelude::*;

use crate::{CoreError, CoreResult};

/// The largest supported embedding dimension.
pub const MAX_DIM: usize = 65_536;
/// Texts per parallel task; below two tasks' worth the work stays on the calling thread.
const TEXTS_PER_TASK: usize = 32;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// ASCII punctuation plus the typographic quotes, dashes and ellipsis that prose uses.
const EXTRA_SEPARATORS: &[char] = &[
    '\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}', '\u{2013}', '\u{2014}', '\u{2026}', '\u{00AB}',
    '\u{00BB}',
];

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
fn add_feature(row: &mut [f32], kind: u8, bytes: &[u8]) {
    let h = feature_hash(kind, bytes);
    // Multiply-shift maps the low 32 bits onto 0..dim without a division.
    let bucket = (((h & 0xFFFF_FFFF) * row.len() as u64) >> 32) as usize;
    row[bucket] += if h >> 63 == 0 { 1.0 } else { -1.0 };
}

/// Embeds one text into `row` (its length is the dimension), overwriting it.
pub fn embed_into(text: &str, row: &mut [f32]) {
    row.fill(0.0);
    let lower = text.to_lowercase();
    let mut padded: Vec<u8> = Vec::with_capacity(64);
    let mut bounds: Vec<usize> = Vec::with_capacity(64);
    for word in lower.split(is_separator).filter(|w| !w.is_empty()) {
        add_feature(row, b'w', word.as_bytes());
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
        for n in 3..=5 {
            for start in 0..(chars + 1).saturating_sub(n) {
                add_feature(row, b'g', &padded[bounds[start]..bounds[start + n]]);
            }
        }
    }
    let norm: f64 = row
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        for x in row.iter_mut() {
            *x = (f64::from(*x) / norm) as f32;
        }
    }
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
                for (row, text) in rows.chunks_exact_mut(dim).zip(batch) {
                    embed_into(text.as_ref(), row);
                }
            });
    } else {
        for (row, text) in out.chunks_exact_mut(dim).zip(texts) {
            embed_into(text.as_ref(), row);
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
        // Case-insensitive: both words of "ÉCOLE école" hash identically.
        let single = hash_embed(&["école"], 64).unwrap();
        assert!(cosine(&v[4 * 64..5 * 64], &single) > 0.999_99);
        assert_eq!(hash_embed(&texts, 64).unwrap(), v);
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
