//! Stored vectors: float32 rows written as standard base64 text (little-endian bytes), decoded
//! in bulk on load.
//!
//! The decoder is strict where the encoder is: the RFC 4648 alphabet, `=` padding to a multiple
//! of four characters, no whitespace or line breaks, and exactly `4 * dim` bytes. Anything else
//! is not a stored vector, and its row is left zero for the caller to treat as missing.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::ops::Range;

use rayon::prelude::*;

use crate::json_member::{string_member, Member};

use super::PARALLEL_MIN_ELEMENTS;

const INVALID: u8 = 0xFF;

const fn alphabet() -> [u8; 256] {
    let mut table = [INVALID; 256];
    let symbols = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut i = 0;
    while i < symbols.len() {
        table[symbols[i] as usize] = i as u8;
        i += 1;
    }
    table
}

static DECODE: [u8; 256] = alphabet();

/// The base64 length of `bytes` bytes, padded.
pub fn encoded_len(bytes: usize) -> usize {
    bytes.div_ceil(3) * 4
}

/// The 24 bits four base64 symbols encode, or `None` for a character outside the alphabet.
#[inline]
fn sextets(quad: &[u8]) -> Option<u32> {
    let (a, b, c, d) = (
        DECODE[quad[0] as usize],
        DECODE[quad[1] as usize],
        DECODE[quad[2] as usize],
        DECODE[quad[3] as usize],
    );
    // A symbol is below 64; INVALID and nothing else sets the top bits.
    if (a | b | c | d) & 0xC0 != 0 {
        return None;
    }
    Some(u32::from(a) << 18 | u32::from(b) << 12 | u32::from(c) << 6 | u32::from(d))
}

/// Decodes `text` into exactly `out.len()` bytes; false when `text` is not the padded standard
/// base64 of that many bytes (`out` is then partly written).
pub fn decode_exact(text: &[u8], out: &mut [u8]) -> bool {
    if text.len() != encoded_len(out.len()) {
        return false;
    }
    let whole = out.len() / 3;
    let (head, tail) = text.split_at(whole * 4);
    // The whole groups: no padding among them, so a strict SIMD decode of them is exact (any
    // symbol outside the alphabet, '=' included, fails it).
    if base64_simd::STANDARD_NO_PAD
        .decode(head, base64_simd::Out::from_slice(&mut out[..whole * 3]))
        .is_err()
    {
        return false;
    }
    let rest = &mut out[whole * 3..];
    match rest.len() {
        0 => true,
        // "xx==" holds one byte, "xxx=" two; the bits past them are ignored, as CPython does.
        1 if tail[2] == b'=' && tail[3] == b'=' => match sextets(&[tail[0], tail[1], b'A', b'A']) {
            Some(bits) => {
                rest[0] = (bits >> 16) as u8;
                true
            }
            None => false,
        },
        2 if tail[2] != b'=' && tail[3] == b'=' => {
            match sextets(&[tail[0], tail[1], tail[2], b'A']) {
                Some(bits) => {
                    rest.copy_from_slice(&bits.to_be_bytes()[1..3]);
                    true
                }
                None => false,
            }
        }
        _ => false,
    }
}

/// Decodes one stored vector into `row` (its dimension); false, with `row` zeroed, for text
/// that is not one.
pub fn decode_f32_row(text: &[u8], row: &mut [f32], scratch: &mut Vec<u8>) -> bool {
    scratch.resize(row.len() * 4, 0);
    if !decode_exact(text, scratch) {
        row.fill(0.0);
        return false;
    }
    for (x, bytes) in row.iter_mut().zip(scratch.chunks_exact(4)) {
        *x = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    }
    true
}

/// Runs `work` on each row with a scratch buffer: on every core when the rows hold `elements`
/// floats, enough to be worth waking the pool's threads, else on this one.
fn each_with_scratch<T: Send>(
    rows: impl Iterator<Item = T>,
    elements: usize,
    work: impl Fn(T, &mut Vec<u8>) + Sync + Send,
) {
    if elements >= PARALLEL_MIN_ELEMENTS && rayon::current_num_threads() > 1 {
        rows.collect::<Vec<_>>()
            .into_par_iter()
            .for_each_init(Vec::new, |scratch, row| work(row, scratch));
    } else {
        let mut scratch = Vec::new();
        rows.for_each(|row| work(row, &mut scratch));
    }
}

/// Decodes stored vectors of dimension `dim` into one row-major `(texts.len(), dim)` matrix.
///
/// `None` stands for a value that is not text. Returns the matrix and, per text, whether it
/// was a vector of that dimension; the rows of the others are zero.
pub fn decode_f32_rows(texts: &[Option<&[u8]>], dim: usize) -> (Vec<f32>, Vec<bool>) {
    let mut matrix = vec![0.0_f32; texts.len() * dim];
    let mut ok = vec![false; texts.len()];
    if dim == 0 {
        return (matrix, ok);
    }
    let decode = |(row, (text, ok)): (&mut [f32], (&Option<&[u8]>, &mut bool)),
                  scratch: &mut Vec<u8>| {
        *ok = text.is_some_and(|t| decode_f32_row(t, row, scratch));
    };
    let rows = matrix
        .chunks_exact_mut(dim)
        .zip(texts.iter().zip(ok.iter_mut()));
    each_with_scratch(rows, texts.len() * dim, decode);
    (matrix, ok)
}

/// One row of [`split_f32_members`]: its matrix row, its text and the text's member, dropped
/// unless it decodes.
type SplitRow<'m, 't> = (&'m mut [f32], (&'t &'t [u8], &'m mut Option<Member>));

/// The dimension of the float32 vector whose padded base64 is `chars` long, if any.
pub fn dim_of_encoded(chars: usize) -> Option<usize> {
    let dim = 3 * chars / 16;
    (dim > 0 && encoded_len(4 * dim) == chars).then_some(dim)
}

/// The dimension of the vectors most `members` have the length of (the first seen among
/// equals), up to [`crate::embed::MAX_DIM`]; 0 when none has.
fn most_common_dim(members: &[Option<Member>]) -> usize {
    // dimension -> (texts of its length, where it was first seen)
    let mut seen: HashMap<usize, (usize, usize)> = HashMap::new();
    for (n, member) in members.iter().enumerate() {
        let dim = member.as_ref().and_then(|m| dim_of_encoded(m.value.len()));
        if let Some(dim) = dim.filter(|&dim| dim <= crate::embed::MAX_DIM) {
            seen.entry(dim).or_insert((0, n)).0 += 1;
        }
    }
    seen.into_iter()
        .max_by_key(|&(_, (count, first))| (count, Reverse(first)))
        .map_or(0, |(dim, _)| dim)
}

/// For each JSON object text, the span of its top-level string member `key` when that member
/// is a stored vector of dimension `dim` (see [`crate::json_member::string_member`]), decoded
/// into its row of one row-major `(texts.len(), dim)` matrix; `None`, with a zero row, for a
/// text whose member cannot be cut out exactly or is not such a vector. Without a `dim`, the
/// length most members share sets it (the first seen among equals; 0 when none has a vector's
/// length up to [`crate::embed::MAX_DIM`]): a stray vector of another dimension, however
/// large, neither sizes the matrix nor turns the other texts away. Returns the dimension too.
pub fn split_f32_members(
    texts: &[&[u8]],
    key: &[u8],
    dim: Option<usize>,
) -> (Vec<f32>, Vec<Option<Range<usize>>>, usize) {
    let mut members: Vec<Option<Member>> =
        texts.iter().map(|text| string_member(text, key)).collect();
    let dim = dim.unwrap_or_else(|| most_common_dim(&members));
    let mut matrix = vec![0.0_f32; texts.len() * dim];
    if dim == 0 {
        return (matrix, vec![None; texts.len()], 0);
    }
    let split = |(row, (text, member)): SplitRow<'_, '_>, scratch: &mut Vec<u8>| {
        if let Some(found) = member {
            if !decode_f32_row(&text[found.value.clone()], row, scratch) {
                *member = None;
            }
        }
    };
    let rows = matrix
        .chunks_exact_mut(dim)
        .zip(texts.iter().zip(members.iter_mut()));
    each_with_scratch(rows, texts.len() * dim, split);
    let cuts = members.into_iter().map(|m| m.map(|m| m.cut)).collect();
    (matrix, cuts, dim)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYMBOLS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    /// A plain reference encoder (RFC 4648, padded).
    fn encode(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
            for k in 0..4 {
                if k <= chunk.len() {
                    out.push(SYMBOLS[(n >> (18 - 6 * k) & 63) as usize]);
                } else {
                    out.push(b'=');
                }
            }
        }
        out
    }

    fn encode_row(row: &[f32]) -> Vec<u8> {
        encode(&row.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>())
    }

    #[test]
    fn round_trips_every_length_remainder() {
        for len in 0..40 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let mut out = vec![0; len];
            assert!(decode_exact(&encode(&bytes), &mut out), "len {len}");
            assert_eq!(out, bytes);
        }
    }

    #[test]
    fn known_text() {
        let mut out = [0; 6];
        assert!(decode_exact(b"Zm9vYmFy", &mut out));
        assert_eq!(&out, b"foobar");
        let mut out = [0; 4];
        assert!(decode_exact(b"Zm9vYg==", &mut out));
        assert_eq!(&out, b"foob");
        let mut out = [0; 5];
        assert!(decode_exact(b"Zm9vYmE=", &mut out));
        assert_eq!(&out, b"fooba");
    }

    #[test]
    fn refuses_what_the_encoder_never_writes() {
        let mut out = [0; 4];
        for bad in [
            &b"Zm9vYg="[..], // short
            b"Zm9vYg===",    // long
            b"Zm9v Yg=",     // whitespace
            b"Zm9vYg-=",     // url-safe alphabet
            b"Zm9vY===",     // padding in the wrong place
            b"Zm9=Ygaa",     // padding inside
            b"Zm9vYgA=",     // five bytes, not four
            b"Zm9vYg\n=",    // line break
            "Zm9vYg\u{e9}".as_bytes(),
        ] {
            assert!(
                !decode_exact(bad, &mut out),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// A symbol-at-a-time decoder of the same rules: the reference the fast one must match.
    fn reference_decode(text: &[u8], len: usize) -> Option<Vec<u8>> {
        if text.len() != encoded_len(len) {
            return None;
        }
        let mut bits = Vec::new();
        for (n, &c) in text.iter().enumerate() {
            let padding = c == b'=' && n >= text.len() - (3 * text.len() / 4 - len);
            if padding {
                continue;
            }
            let v = DECODE[usize::from(c)];
            if v == INVALID {
                return None;
            }
            bits.push(v);
        }
        let mut out: Vec<u8> = Vec::new();
        let (mut acc, mut held) = (0_u32, 0);
        for v in bits {
            acc = acc << 6 | u32::from(v);
            held += 6;
            if held >= 8 {
                held -= 8;
                out.push((acc >> held) as u8);
                acc &= (1 << held) - 1;
            }
        }
        (out.len() == len).then_some(out)
    }

    #[test]
    fn matches_a_symbol_at_a_time_decoder_on_damaged_texts() {
        // Every length remainder, and texts long enough for each SIMD width, with one or two
        // symbols replaced by anything (padding, whitespace, URL-safe symbols, non-ASCII).
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..20_000 {
            let len = [1, 2, 3, 4, 5, 47, 48, 49, 96, 1536][case % 10] + (case / 10) % 3;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let mut text = encode(&bytes);
            for _ in 0..(case % 3) {
                let at = next() as usize % text.len();
                text[at] = b"=A/+-_ \n\xe9\x00z9"[next() as usize % 12];
            }
            let mut out = vec![0; len];
            let ok = decode_exact(&text, &mut out);
            let want = reference_decode(&text, len);
            assert_eq!(ok, want.is_some(), "{:?}", String::from_utf8_lossy(&text));
            if let Some(want) = want {
                assert_eq!(out, want);
            }
        }
    }

    #[test]
    fn rows_decode_and_failures_stay_zero() {
        let a = [1.5_f32, -2.0, 0.25];
        let b = [f32::MIN_POSITIVE, 3.0e38, -0.0];
        let (ea, eb) = (encode_row(&a), encode_row(&b));
        let wrong_dim = encode_row(&[1.0, 2.0]);
        let texts = [
            Some(ea.as_slice()),
            None,
            Some(wrong_dim.as_slice()),
            Some(eb.as_slice()),
            Some(&b"not base64"[..]),
        ];
        let (matrix, ok) = decode_f32_rows(&texts, 3);
        assert_eq!(ok, [true, false, false, true, false]);
        assert_eq!(&matrix[0..3], &a);
        assert_eq!(&matrix[3..9], &[0.0; 6]);
        assert_eq!(
            matrix[9..12]
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>(),
            b.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(&matrix[12..15], &[0.0; 3]);
    }

    #[test]
    fn parallel_path_matches_serial() {
        let dim = 384;
        let n = PARALLEL_MIN_ELEMENTS / dim + 5;
        let rows: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let row: Vec<f32> = (0..dim).map(|j| (i * dim + j) as f32 * 0.5 - 7.0).collect();
                encode_row(&row)
            })
            .collect();
        let mut texts: Vec<Option<&[u8]>> = rows.iter().map(|r| Some(r.as_slice())).collect();
        texts[7] = None;
        let (matrix, ok) = decode_f32_rows(&texts, dim);
        assert_eq!(ok.iter().filter(|&&o| !o).count(), 1);
        assert!(!ok[7]);
        assert_eq!(matrix[8 * dim + 3], (8 * dim + 3) as f32 * 0.5 - 7.0);
        assert_eq!(
            matrix[(n - 1) * dim + dim - 1],
            (n * dim - 1) as f32 * 0.5 - 7.0
        );
    }

    #[test]
    fn the_dimension_most_members_share_is_split_a_tie_going_to_the_first() {
        let small = String::from_utf8(encode_row(&[1.0, 2.0])).unwrap();
        let large = String::from_utf8(encode_row(&[0.5; 4096])).unwrap();
        let text = |v: &str| format!(r#"{{"e":"{v}","a":1}}"#);
        let texts = [text(&large), text(&small), text(&small)];
        let views: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
        let (matrix, cuts, dim) = split_f32_members(&views, b"e", None);
        assert_eq!((dim, matrix), (2, vec![0.0, 0.0, 1.0, 2.0, 1.0, 2.0]));
        assert_eq!(cuts[0], None);
        assert!(cuts[1..].iter().all(Option::is_some));
        assert_eq!(split_f32_members(&views[..2], b"e", None).2, 4096);
        assert_eq!(split_f32_members(&views[1..2], b"e", Some(4096)).1, [None]);
    }

    #[test]
    fn splits_members_that_are_vectors_and_declines_the_rest() {
        let vector = String::from_utf8(encode_row(&[1.5, -2.0])).unwrap();
        let texts = [
            format!(r#"{{"id":"a","embedding":"{vector}","n":1}}"#),
            format!(r#"{{"embedding":"{vector}"}}"#),
            r#"{"embedding":"AAAA"}"#.to_string(), // another dimension
            format!(r#"{{"embedding":"{vector}","embedding":"{vector}"}}"#),
            "not json".to_string(),
        ];
        let views: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
        let (matrix, cuts, dim) = split_f32_members(&views, b"embedding", None);
        assert_eq!(dim, 2);
        let rest = |i: usize| {
            let cut = cuts[i].clone().unwrap();
            [&texts[i][..cut.start], &texts[i][cut.end..]].concat()
        };
        assert_eq!(rest(0), r#"{"id":"a","n":1}"#);
        assert_eq!(rest(1), "{}");
        assert_eq!(&matrix[..4], &[1.5, -2.0, 1.5, -2.0]);
        assert_eq!(cuts[2..], [None, None, None]);
        assert!(matrix[4..].iter().all(|&x| x == 0.0));
        let (_, cuts, dim) = split_f32_members(&views[2..], b"embedding", Some(2));
        assert_eq!((cuts, dim), (vec![None, None, None], 2));
        let (matrix, _, dim) = split_f32_members(&[b"{}".as_slice()], b"embedding", None);
        assert_eq!((matrix.len(), dim), (0, 0));
    }
}
